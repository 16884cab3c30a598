"""headrace.torch: to_torch (IterableDataset, worker sharding, zero-copy) and device_prefetch."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import headrace as hr
from headrace.torch import device_prefetch, element_to_torch, to_torch
from tests.close_race import HeldNext, close_during_next, collect_holding_the_budget_lock


def test_element_to_torch_shares_writable_arrays_and_copies_read_only() -> None:
    writable = np.arange(6, dtype=np.float32).reshape(2, 3)
    read_only = np.arange(4, dtype=np.int64)
    read_only.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when handed a read-only array
        out = element_to_torch({"x": writable, "ids": read_only, "name": b"cat", "n": np.int64(7)})
    assert isinstance(out["x"], torch.Tensor) and out["x"].dtype == torch.float32
    assert out["x"].data_ptr() == writable.ctypes.data  # zero-copy
    assert out["ids"].data_ptr() != read_only.ctypes.data and out["ids"].tolist() == [0, 1, 2, 3]
    assert out["name"] == b"cat"
    assert out["n"].ndim == 0 and int(out["n"]) == 7


def test_to_torch_yields_tensors_with_dataset_structure() -> None:
    x = np.random.default_rng(0).normal(size=(10, 3)).astype(np.float32)
    ds = hr.Dataset.from_tensor_slices((x, np.arange(10))).batch(4)
    tds = to_torch(ds)
    batches = list(tds)
    assert [b[0].shape for b in batches] == [(4, 3), (4, 3), (2, 3)]
    assert torch.equal(torch.cat([b[0] for b in batches]), torch.from_numpy(x))
    assert batches[0][1].dtype == torch.int64
    assert len(tds) == 3


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_workers_read_disjoint_complete_shares(num_workers: int) -> None:
    ds = hr.Dataset.range(23)
    loader = DataLoader(to_torch(ds), batch_size=None, num_workers=num_workers)
    seen = [int(v) for v in loader]
    assert sorted(seen) == list(range(23))


def _decode_logged(log: str):
    def decode(x):
        with open(log, "a") as f:   # one line per call, from whichever worker process made it
            f.write(f"{int(x)}\n")
        return np.full(4, x, np.int64)
    return decode


@pytest.mark.parametrize("files", [8, 2], ids=["shard-files", "shard-records"])
def test_dataloader_workers_decode_only_their_share(tmp_path, files: int) -> None:
    # Issue 15: .shard() applied after the whole pipeline made every one of 4 workers decode all 400
    # elements (1,600 calls). Sharded at the source, each element is decoded once.
    log = str(tmp_path / "calls.txt")
    per = 400 // files
    ds = (hr.Dataset.range(files)
          .interleave(lambda f: hr.Dataset.range(int(f) * per, int(f) * per + per), cycle_length=2)
          .map(_decode_logged(log), num_parallel_calls=2)
          .shuffle(16, seed=0).batch(10))
    loader = DataLoader(to_torch(ds), batch_size=None, num_workers=4)
    seen = sorted(int(v) for b in loader for v in b[:, 0])
    assert seen == list(range(400))
    with open(log) as f:
        calls = [int(v) for v in f.read().split()]
    assert sorted(calls) == list(range(400)), f"{len(calls)} decode calls for 400 elements"


def test_shard_at_source_goes_below_elementwise_stages_and_into_files() -> None:
    from headrace._ops.shard import ShardNode, shard_at_source

    files = hr.Dataset.from_tensor_slices([b"a", b"b", b"c", b"d"])
    ds = files.interleave(lambda f: hr.Dataset.from_tensors(f)).map(lambda x: x).batch(2)
    node = shard_at_source(ds._node, 2, 1)
    chain = []
    while node.inputs:
        chain.append(type(node).__name__)
        node = node.inputs[0]
    assert chain == ["BatchNode", "MapNode", "InterleaveNode", "ShardNode"]  # the file list is sharded
    taken = hr.Dataset.range(10).take(5)
    assert isinstance(shard_at_source(taken.map(lambda x: x)._node, 2, 0).inputs[0], ShardNode)  # not below take


def test_dataloader_without_worker_sharding_repeats_data() -> None:
    loader = DataLoader(to_torch(hr.Dataset.range(5), shard_by_worker=False), batch_size=None, num_workers=2)
    assert sorted(int(v) for v in loader) == sorted(list(range(5)) * 2)


def test_a_build_error_reaches_the_dataloader_s_first_next_and_leaves_the_budget_as_it_was(monkeypatch) -> None:
    """As a headrace iterator (tests/test_iterator.py): an error met while the epoch's stages are built comes
    from the DataLoader's first next(), with its message, and what the build opened is closed."""
    from headrace import _memory

    monkeypatch.setattr(_memory, "_process_budget", None)  # a fresh process budget, restored afterwards
    budget = _memory.process_budget()

    def gone():
        raise FileNotFoundError("no such shard: gone.tfrecord")

    ds = hr.Dataset.zip(hr.Dataset.range(8).shuffle(10**9, seed=1), hr.Dataset.from_source(gone))
    batches = iter(DataLoader(to_torch(ds), batch_size=None))
    with pytest.raises(FileNotFoundError, match=r"gone\.tfrecord"):
        next(batches)
    assert (budget._accounts, budget.total_bytes) == ([], 0)


def test_to_torch_rejects_non_datasets() -> None:
    with pytest.raises(TypeError, match=r"expected a headrace\.Dataset, got list"):
        to_torch([1, 2, 3])  # type: ignore[arg-type]


def test_device_prefetch_on_cpu_passes_through_and_converts_numpy() -> None:
    t = torch.ones(2)
    out = list(device_prefetch([(t, np.zeros(3, np.float32))], "cpu"))
    assert out[0][0] is t
    assert isinstance(out[0][1], torch.Tensor) and out[0][1].shape == (3,)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_device_prefetch_rejects_bad_buffer_size(bad: object) -> None:
    with pytest.raises(ValueError, match="buffer_size"):
        list(device_prefetch([1], "cpu", buffer_size=bad))  # type: ignore[arg-type]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_prefetch_on_cuda_keeps_order_and_values() -> None:
    batches = [(torch.full((1000,), i, dtype=torch.float32), torch.tensor([i])) for i in range(6)]
    out = list(device_prefetch(iter(batches), "cuda", buffer_size=3))
    assert [int(b[1]) for b in out] == list(range(6))
    assert all(b[0].is_cuda and float(b[0].mean()) == i for i, b in enumerate(out))


def _late_sevenths(x):
    if int(x) % 7 == 0:
        time.sleep(0.003)  # finishes late: a deterministic=False map delivers it after later elements
    return x


@pytest.mark.parametrize("explicit", [False, True])
def test_shares_above_a_nondeterministic_stage_are_disjoint_and_complete(explicit: bool) -> None:
    """The promise sweep (seed 39) found a DataLoader's 2 workers yielding 4 ids twice (and losing 4): the
    shard stopped at ``group_by_window`` (not a per-element stage) and took every 2nd element of a stream whose
    order each worker's ``deterministic=False`` map made differently. A shard's input now runs in order."""
    from headrace._ops.shard import shard_at_source

    ds = (hr.Dataset.range(300).map(_late_sevenths, num_parallel_calls=4, deterministic=False)
          .group_by_window(lambda x: x % 2, lambda k, w: w.batch(2), window_size=2).unbatch())
    got: list[int] = []
    for i in range(2):
        share = ds.shard(2, i) if explicit else hr.Dataset(shard_at_source(ds._node, 2, i))
        got += [int(x) for x in share]
    assert sorted(got) == list(range(300))


def test_a_closed_to_torch_iterator_raises_and_keeps_its_position() -> None:
    # Issue 37: next() after close() started the epoch again from its first element (duplicates).
    it = iter(to_torch(hr.Dataset.range(10)))
    assert [int(next(it)), int(next(it))] == [0, 1]
    it.close()
    with pytest.raises(hr.IteratorClosedError, match="closed by close"):
        next(it)
    state = it.state_dict()  # the position after element 1, kept by close()
    it.load_state_dict(state)  # reopens it there
    assert [int(x) for x in it] == list(range(2, 10))


def test_close_from_another_thread_during_next_keeps_the_position_after_the_element_next_returns() -> None:
    # Issue 37: close() took the position while next() was producing an element that next() then returned:
    # state_dict() was one element behind it (a duplicate after resume; 1 of 2 loaded suite runs).
    it = iter(to_torch(hr.Dataset.range(10)))
    assert [int(next(it)), int(next(it))] == [0, 1]
    held = HeldNext(it._it)
    it._it = held
    # close() waits for the element in progress
    assert close_during_next(it.close, lambda: int(next(it)), held, go_after_s=0.3) == 2
    state = it.state_dict()
    again = iter(to_torch(hr.Dataset.range(10)))
    again.load_state_dict(state)
    assert [int(x) for x in again] == list(range(3, 10))


def test_close_that_cannot_wait_for_next_says_the_position_is_unknown(monkeypatch) -> None:
    import headrace._sync as sync

    monkeypatch.setattr(sync, "CLOSE_WAITS_FOR_CALL_S", 0.2)
    it = iter(to_torch(hr.Dataset.range(10)))
    assert int(next(it)) == 0
    held = HeldNext(it._it)
    it._it = held
    t0 = time.monotonic()
    ended = close_during_next(it.close, lambda: int(next(it)), held, go_after_s=0, go_after_close=True)
    assert isinstance(ended, hr.IteratorClosedError), ended  # stopped under next(): no element handed out
    assert time.monotonic() - t0 < 5
    with pytest.raises(hr.IteratorClosedError, match="position is unknown"):
        it.state_dict()


def test_dataloader_workers_over_a_file_cache_each_fill_a_file_of_their_own(tmp_path) -> None:
    # Sweep seed 691: both workers filled the one cache file and the second raised FileExistsError.
    ds = hr.Dataset.range(40).cache(str(tmp_path / "c"))
    loader = DataLoader(to_torch(ds), batch_size=None, num_workers=2)
    for _ in range(2):  # the second epoch reads the workers' cache files
        assert sorted(int(x) for x in loader) == list(range(40))
    assert sorted(p.name for p in tmp_path.glob("*.hrcache")) == [
        "c-shard-00000-of-00002.hrcache", "c-shard-00001-of-00002.hrcache"]


def test_garbage_collection_of_a_to_torch_iterator_while_this_thread_holds_the_budget_lock_does_not_wait() -> None:
    """A ``to_torch`` iterator dropped where the collector runs inside a thread holding the process budget's
    lock closes its headrace iterator the way that iterator's own collection does (deferred to the reaper), not
    by a ``close()`` that waits on the lock this thread holds (30 s, then its threads left running)."""
    from tests.conftest import wait_no_threads

    ds = hr.Dataset.range(10**9).map(lambda x: np.full(1000, x), num_parallel_calls=2).batch(8).prefetch(2)
    held = [iter(to_torch(ds))]
    next(held[0])
    held_s = collect_holding_the_budget_lock(held)
    assert held_s < 5.0, f"garbage collection waited {held_s:.1f} s on the budget lock"
    assert wait_no_threads(5.0) == [], "the dropped to_torch iterator's pipeline threads never stopped"
