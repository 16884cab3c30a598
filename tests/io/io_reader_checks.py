"""Checks shared by the reader tests (Parquet, HDF5, image folders): element equality, state round trips,
shard coverage."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

import headrace as hr


def assert_same(a: Any, b: Any, where: str = "element") -> None:
    """Deep equality of elements (dicts / tuples of numpy values and bytes), dtypes included."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, tuple | list):
        assert type(a) is type(b) and len(a) == len(b), f"{where}: {a!r} != {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray | np.generic):
        assert isinstance(b, np.ndarray | np.generic), f"{where}: {type(b)}"
        assert a.dtype == b.dtype, f"{where}: dtype {a.dtype} != {b.dtype}"
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def assert_streams_equal(xs: list[Any], ys: list[Any]) -> None:
    assert len(xs) == len(ys), f"{len(xs)} elements != {len(ys)}"
    for i, (x, y) in enumerate(zip(xs, ys)):
        assert_same(x, y, f"element {i}")


def assert_state_roundtrip(ds: hr.Dataset, positions: range | list[int] | None = None) -> int:
    """For each position k: take k elements, save the state (JSON), check that a fresh iterator restored
    to it yields exactly what the original iterator yields next; also restores twice into one iterator.
    Returns the number of elements."""
    with iter(ds) as it:
        n = len(list(it))
    for k in positions if positions is not None else range(n + 1):
        with iter(ds) as it:
            for _ in range(k):
                next(it)
            state = json.loads(json.dumps(it.get_state()))
            expected = list(it)
        with iter(ds) as it2:
            next(it2, None)  # move away first: set_state must fully reset
            it2.set_state(state)
            assert_streams_equal(list(it2), expected)
            it2.set_state(state)  # callable repeatedly
            assert_streams_equal(list(it2), expected)
    return n


def assert_disjoint_complete(shards: list[list[Any]], everything: list[Any]) -> None:
    """Shards (lists of hashable keys) are pairwise disjoint and their union is ``everything``."""
    seen: list[Any] = []
    for s in shards:
        seen.extend(s)
    assert len(seen) == len(set(seen)), "shards overlap"
    assert sorted(seen) == sorted(everything), "shards do not cover everything"
