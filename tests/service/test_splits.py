"""The splits of a distributed epoch (``headrace.service._splits``), without Ray: every split's pipeline run
here, the union of the splits is the whole dataset exactly once; sources that cannot be split raise naming the
op and the fix."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from service_helpers import write_shards

import headrace as hr
from headrace.io import TFRecordDataset
from headrace.service._splits import plan_splits, split_node


def _union(ds: hr.Dataset, mode: str = "distributed_epoch", workers: int = 3) -> tuple[list, int]:
    plan = plan_splits(ds._node, mode, workers)
    out: list = []
    for split in plan.splits:
        out += list(hr.Dataset(split_node(ds._node, list(split))).as_numpy_iterator())
    return out, len(plan.splits)


@pytest.mark.parametrize("n", [0, 1, 5, 1000])
def test_range_splits_are_disjoint_and_complete(n):
    ds = hr.Dataset.range(3, 3 + 2 * n, 2).map(lambda x: x * 10).filter(lambda x: x % 3 != 0)
    out, k = _union(ds)
    assert sorted(int(x) for x in out) == [int(x) for x in ds.as_numpy_iterator()]
    assert k == max(1, min(n, 24))


def test_tensor_slices_splits_keep_structure_and_rows():
    data = {"x": np.arange(50).reshape(25, 2), "y": np.arange(25) * 1.5}
    ds = hr.Dataset.from_tensor_slices(data).map(lambda d: (d["x"].sum(), d["y"]))
    out, k = _union(ds, workers=2)
    assert k == 16
    assert sorted((int(a), float(b)) for a, b in out) == sorted(
        (int(a), float(b)) for a, b in ds.as_numpy_iterator())


def test_file_splits_take_whole_files(tmp_path):
    names = write_shards(tmp_path, 5, 7)
    ds = TFRecordDataset(names).map(lambda r: r + b"!")
    plan = plan_splits(ds._node, "distributed_epoch", 2)
    assert len(plan.splits) == 5 and "files" in plan.what
    per_split = [list(hr.Dataset(split_node(ds._node, list(s))).as_numpy_iterator()) for s in plan.splits]
    assert all(len({r.split(b":")[0] for r in part}) == 1 for part in per_split)  # one file each
    every = collections.Counter(r for part in per_split for r in part)
    assert every == collections.Counter(f"{f}:{i}!".encode() for f in range(5) for i in range(7))


def test_parallel_epochs_is_the_whole_dataset_per_worker():
    ds = hr.Dataset.range(10)
    plan = plan_splits(ds._node, "parallel_epochs", 3)
    assert [s[0] for s in plan.splits] == ["whole"] * 3
    assert split_node(ds._node, list(plan.splits[0])) is ds._node


@pytest.mark.parametrize("make, op", [
    (lambda: hr.Dataset.from_generator(lambda: iter(range(3)), output_signature=hr.TensorSpec((), "int64")),
     "from_generator"),
    (lambda: hr.Dataset.zip(hr.Dataset.range(3), hr.Dataset.range(3)).map(lambda a, b: a + b), "zip"),
    (lambda: hr.Dataset.range(4).concatenate(hr.Dataset.range(2)).batch(2), "concatenate"),
])
def test_a_source_that_cannot_be_split_names_the_op_and_the_fix(make, op):
    with pytest.raises(ValueError, match=op) as e:
        plan_splits(make()._node, "distributed_epoch", 2)
    assert "parallel_epochs" in str(e.value) and "from_tensor_slices" in str(e.value)
    plan_splits(make()._node, "parallel_epochs", 2)  # every worker runs it whole: fine


def test_an_endless_source_cannot_be_split():
    with pytest.raises(ValueError, match="'counter'"):
        plan_splits(hr.Dataset.counter().map(lambda x: x + 1)._node, "distributed_epoch", 2)
