"""``normalize_sized`` (a ``map`` inside a ``batch`` normalizes and sizes a dict or tuple element in one pass)
gives exactly ``normalize`` and ``nbytes``, over generated dicts and tuples of every kind of leaf; ``nbytes`` of
object arrays counts their strings, whichever way it sums them.

What would break it: a leaf kept without its conversion (a Python int left as int, a str not encoded), a size
taken before the conversion, a nested value not normalized."""

from __future__ import annotations

import random

import numpy as np
import pytest

from headrace._structure import nbytes, normalize, normalize_rows, normalize_sized, scalar_columns

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


# ---- a run of results a column at a time (``normalize_rows`` / ``scalar_columns``: a map handing rows to batch) ----
SCALARS = [lambda r, i: i * r.randint(-3, 3), lambda r, i: i / 7, lambda r, i: i % 3 == 0, lambda r, i: np.int32(i),
           lambda r, i: np.float64(i) / 3, lambda r, i: np.float32(i), lambda r, i: np.uint8(i % 256),
           lambda r, i: np.bool_(i % 2), lambda r, i: np.int64(i) if i % 2 else i]  # (the last: int64 both ways)
OTHERS = [lambda r, i: b"x" * (i % 3), lambda r, i: np.zeros(2), lambda r, i: None, lambda r, i: (i, i),
          lambda r, i: np.int64(i) if i else np.int32(i), lambda r, i: 2**63 + i if i == 1 else i,
          lambda r, i: "s" if i == 1 else i]


@pytest.mark.parametrize("seed", range(40))
def test_a_run_a_column_at_a_time_equals_normalize_one_by_one(seed: int) -> None:
    r = random.Random(seed)
    n = r.randint(2, 12)  # (every one of OTHERS shows in two elements)
    makers = [r.choice(SCALARS) for _ in range(r.randint(1, 5))]
    scalar = r.random() < 0.6  # every component fixed-size scalars (columns), else one of another kind
    if not scalar:
        makers[r.randrange(len(makers))] = r.choice(OTHERS)
    as_dict = r.random() < 0.5
    ys = [{f"k{c}": m(r, i) for c, m in enumerate(makers)} if as_dict else tuple(m(r, i) for m in makers)
          for i in range(n)]
    got = normalize_rows(list(ys))
    if not scalar:
        assert got is None and scalar_columns(list(ys)) is None, ys
        return
    assert got is not None, ys
    rows, total, largest = got
    want = [normalize(y) for y in ys]
    assert len(rows) == n and all(_same(g, w) for g, w in zip(rows, want)), (ys, rows)
    assert total == sum(map(nbytes, want)) and largest == max(map(nbytes, want))
    names, arrays, _ = scalar_columns(list(ys))
    assert names == (tuple(ys[0]) if as_dict else None)
    columns = [list(y.values()) if as_dict else list(y) for y in want]
    for k, a in enumerate(arrays):  # the arrays a batch concatenates: what stacking the normalized elements gives
        stacked = np.array([c[k] for c in columns])
        assert a.dtype == stacked.dtype and a.tolist() == stacked.tolist()


def test_runs_that_are_not_one_kind_of_flat_row_are_left_to_normalize() -> None:
    for ys in ([{"a": 1}, {"b": 1}], [{"a": 1}, {"a": 1, "b": 2}], [(1, 2), (1,)], [{}], [()], [{"a": 1}, (1,)],
               [[1, 2]], [1, 2], [{"a": {"b": 1}}]):
        assert normalize_rows(ys) is None, ys
