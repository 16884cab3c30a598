"""``normalize_sized`` (a ``map`` inside a ``batch`` normalizes and sizes a dict or tuple element in one pass)
gives exactly ``normalize`` and ``nbytes``, over generated dicts and tuples of every kind of leaf; ``nbytes`` of
object arrays counts their strings, whichever way it sums them.

What would break it: a leaf kept without its conversion (a Python int left as int, a str not encoded), a size
taken before the conversion, a nested value not normalized."""

from __future__ import annotations

import random

import numpy as np
import pytest

from headrace._structure import nbytes, normalize, normalize_sized

LEAVES = [
    lambda r: r.randint(-5, 5), lambda r: r.random(), lambda r: r.random() < 0.5, lambda r: "s" * r.randint(0, 4),
    lambda r: b"b" * r.randint(0, 4), lambda r: np.int32(r.randint(0, 9)), lambda r: np.float64(r.random()),
    lambda r: np.float32(r.random()), lambda r: np.uint8(r.randint(0, 9)),
    lambda r: np.arange(r.randint(0, 5), dtype=np.int16), lambda r: np.array(["ab", "c"]),
    lambda r: np.array([b"x" * r.randint(0, 3), "yz"], dtype=object), lambda r: [r.random(), r.random()],
    lambda r: (r.randint(0, 3), "t"), lambda r: {"in": r.random()}, lambda r: None,
]


def _same(a: object, b: object) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, np.ndarray):
        return type(b) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape and a.tolist() == b.tolist()
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("seed", range(40))
def test_one_pass_equals_normalize_then_nbytes(seed: int) -> None:
    r = random.Random(seed)
    x = {f"k{i}": r.choice(LEAVES)(r) for i in range(r.randint(1, 6))}
    for element in (dict(x), tuple(x.values())):
        want = normalize(element)
        got, n = normalize_sized(element, "map")
        assert _same(got, want), (element, got, want)
        assert n == nbytes(want), element


def test_an_unsupported_leaf_raises_as_normalize_does() -> None:
    with pytest.raises(TypeError, match="map: unsupported leaf of type object"):
        normalize_sized({"a": np.int64(1), "b": object()}, "map")


def test_nbytes_of_object_arrays_counts_the_strings() -> None:
    a = np.array([b"abc", "de", b""], dtype=object)
    assert nbytes(a) == a.nbytes + 5
    mixed = np.array([b"abc", 7, None], dtype=object)  # only bytes / str items have a length counted
    assert nbytes(mixed) == mixed.nbytes + 3
