"""Batches of dict elements (rows, parsed Examples) are gathered column by column in C loops
(``stacking._flat_dict_columns``); anything else, or any mismatch, goes the general way with its clear error.

What would break it: columns in another order than ``flatten``'s (sorted keys), a nested or differently keyed
element stacked as if it were flat, a namedtuple or dict subclass taken for a leaf."""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np
import pytest

import headrace as hr
from headrace._engine.stacking import stack
from headrace._structure import flatten, pack_as

P = namedtuple("P", "a b")


def _general(items: list) -> object:
    """What the general path gives: every leaf column stacked after ``flatten``."""
    cols = list(zip(*(flatten(x) for x in items)))
    return pack_as(items[0], [np.stack(c) if isinstance(c[0], np.ndarray) else np.array(c) for c in cols])


def test_flat_dicts_stack_by_sorted_key_whatever_the_insertion_order() -> None:
    rng = np.random.default_rng(0)
    items = [{"z": np.int32(i), "a": rng.random(3).astype(np.float32), "m": np.float64(i / 3)} for i in range(9)]
    items[4] = {"m": items[4]["m"], "a": items[4]["a"], "z": items[4]["z"]}  # same keys, other order
    got = stack(items, "batch")
    want = _general(items)
    assert list(got) == ["z", "a", "m"]  # the first element's key order, as before
    for k in got:
        assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), k


def test_bytes_columns_become_object_arrays() -> None:
    got = stack([{"name": b"a", "n": np.int64(1)}, {"name": b"bc", "n": np.int64(2)}], "batch")
    assert got["name"].dtype == object and got["name"].tolist() == [b"a", b"bc"]


@pytest.mark.parametrize("second, words", [
    ({"a": np.int64(1)}, "structure"),                                   # a key missing
    ({"a": np.int64(1), "b": np.int64(2), "c": np.int64(3)}, "structure"),  # a key more
    ({"a": np.int64(1), "b": {"c": np.int64(2)}}, "structure"),          # nested where the first is flat
    ({"a": np.int64(1), "b": P(np.int64(2), np.int64(3))}, "structure"),  # a namedtuple where a leaf was
])
def test_a_mismatch_gets_the_general_paths_error(second: dict, words: str) -> None:
    first = {"a": np.int64(0), "b": np.int64(0)}
    with pytest.raises(ValueError, match=words) as e:
        stack([first, second], "batch(2)")
    assert "batch(2)" in str(e.value) and "element 1" in str(e.value)


def test_nested_and_subclassed_dicts_take_the_general_path() -> None:
    items = [OrderedDict(a=np.int64(i), b={"c": np.float32(i)}) for i in range(3)]
    got = stack(items, "batch")
    assert got["a"].tolist() == [0, 1, 2] and got["b"]["c"].dtype == np.float32


def test_a_dataset_of_rows_batches_as_before() -> None:
    rows = hr.Dataset.range(10).map(lambda i: {"id": i, "x": np.float64(i) / 4, "s": b"r%d" % int(i)})
    b = next(iter(rows.batch(10)))
    assert b["id"].dtype == np.int64 and b["x"].dtype == np.float64 and b["s"].dtype == object
    assert b["x"].tolist() == [i / 4 for i in range(10)] and b["s"][3] == b"r3"
