"""Regression tests for the engine review (issue 15): each defect as it was confirmed on the old engine."""

from __future__ import annotations

import json
import threading
import time
import warnings

import numpy as np
import pytest

import headrace as hr
from tests.conftest import wait_no_threads

D = hr.Dataset
MiB = 1024**2


def test_1_parallel_batch_of_growing_elements_does_not_hang():
    # The first record is smaller than the batch's average: the old gatherer charged element 0 x batch size,
    # then topped up past its own cap, and the stall breaker never fired -> a hang.
    sizes = [10] + [50_000] * 127
    ds = (D.from_tensor_slices(np.arange(128)).map(lambda i: np.full(sizes[int(i)], 1, np.uint8))
          .padded_batch(64).with_options(hr.Options(memory_budget=64 * MiB)))
    par = (D.from_tensor_slices(np.arange(128)).map(lambda i: np.full(sizes[int(i)], 1, np.uint8))
           .map(lambda x: np.resize(x, 50_000)).batch(64, num_parallel_calls=2)
           .with_options(hr.Options(memory_budget=16 * MiB)))
    for pipeline in (ds, par):
        done: list[int] = []
        t = threading.Thread(target=lambda p=pipeline, d=done: d.extend(len(b) for b in p), daemon=True)
        t.start()
        t.join(20)
        assert not t.is_alive(), "batching elements of different sizes hung"
        assert done == [64, 64]


def test_2_set_state_on_a_running_parallel_stage_loses_nothing():
    # A worker stuck inside the input past the join deadline used to pull from the restored input and drop
    # that element (rewind to "after 3" gave [5, 6, 7, 8, 10, 11]).
    gate = threading.Event()

    def slow_on_4(x):
        if int(x) == 4 and not gate.is_set():
            gate.wait(3)
        return x

    ds = D.range(12).map(slow_on_4).prefetch(8).map(lambda x: x, num_parallel_calls=2)
    with iter(ds) as it:
        got = [int(next(it)) for _ in range(4)]
        state = it.get_state()          # after 3
        time.sleep(0.3)                 # a worker is now inside the input, stuck on element 4
        threading.Timer(1.5, gate.set).start()  # longer than the 1 s join deadline of set_state
        it.set_state(state)
        rest = [int(x) for x in it]
    assert got == [0, 1, 2, 3] and rest == list(range(4, 12))


def test_3_restoring_never_changes_the_dataset():
    ds = D.range(20).shuffle(10, seed=7)
    seven = [int(x) for x in ds.shuffle(1, seed=0)]  # noqa: F841 - a second pipeline over the same node
    first = [int(x) for x in iter(D.range(20).shuffle(10, seed=7))]
    other = iter(D.range(20).shuffle(10, seed=5))
    next(other)
    state = other.get_state()
    with pytest.raises(hr.StateError, match="seed=5 in the state but seed=7"):
        iter(ds).set_state(state)
    assert [int(x) for x in D.range(20).shuffle(10, seed=7)] == first   # seed 7 still gives seed 7's order
    unseeded = D.range(20).shuffle(10)
    it = iter(unseeded)
    it.set_state(state)                  # seed=None adopts the saved seed, in this iterator only
    assert [int(x) for x in it] == [int(x) for x in D.range(20).shuffle(10, seed=5)][1:]
    node_seed = unseeded._node.seed
    list(iter(unseeded))
    assert unseeded._node.seed == node_seed


def test_4_a_failed_batch_reservation_leaves_the_budget_whole():
    ds = (D.range(4).map(lambda x: np.zeros(300_000, np.uint8)).batch(4)
          .with_options(hr.Options(memory_budget=1_000_000)))
    with iter(ds) as it:
        with pytest.raises(hr.MemoryBudgetError):
            next(it)
        stats = it.memory_stats()
    assert stats["current_bytes"] >= 0
    assert all(s["current_bytes"] >= 0 and s["held_elements"] >= 0 for s in stats["stages"].values())


def test_6_iterators_without_a_budget_share_the_process_budget():
    a, b = iter(D.range(3).prefetch(1)), iter(D.range(3).prefetch(1))
    sa, sb = a.memory_stats(), b.memory_stats()
    assert sa["shared"] and sb["shared"] and sa["limit_bytes"] == sb["limit_bytes"]
    own = iter(D.range(3).with_options(hr.Options(memory_budget="1MiB")))
    assert not own.memory_stats()["shared"] and own.memory_stats()["limit_bytes"] == MiB
    for it in (a, b, own):
        it.close()


def test_6_workers_split_the_budget():
    from headrace import _memory

    with _memory.budget_share(4):  # a DataLoader worker, one of 4 (headrace.torch passes it so)
        it = iter(D.range(3).with_options(hr.Options(memory_budget="4MiB")))
        assert it.memory_stats()["limit_bytes"] == MiB
        it.close()
    assert _memory.process_share() == 1  # nothing process-wide is left set
    with pytest.raises(ValueError, match="workers=0"), _memory.budget_share(0):
        pass


def test_7_restore_cost_does_not_grow_with_the_position_after_repeat():
    calls = {"n": 0}

    def count(x):
        calls["n"] += 1
        return x

    def restore_calls(position: int) -> int:
        ds = D.range(100).repeat().map(count).shuffle(50, seed=0)
        with iter(ds) as it:
            for _ in range(position):
                next(it)
            state = json.loads(json.dumps(it.get_state()))
        calls["n"] = 0
        with iter(ds) as it:
            it.set_state(state)
            next(it)
        return calls["n"]

    early, late = restore_calls(300), restore_calls(30_000)
    assert late < 2_000, f"restoring at element 30,000 re-ran the map {late} times"
    assert late < 3 * max(early, 200)


def test_8_parallel_stages_do_not_ask_for_their_inputs_state_per_element():
    gets = {"n": 0}

    class Counting(hr.DatasetIterator):
        def __init__(self):
            super().__init__()
            self.i = 0

        def __next__(self):
            if self.i >= 1000:
                raise StopIteration
            self.i += 1
            return self.i

        def get_state(self):
            gets["n"] += 1
            return {"i": self.i}

        def set_state(self, state):
            self.i = state["i"]

    ds = D.from_source(Counting).map(lambda x: x, num_parallel_calls=2)
    assert len(list(ds)) == 1000
    assert gets["n"] < 1000 / 8, f"get_state() called {gets['n']} times for 1000 elements"


def test_9_ignore_errors_drops_data_errors_only_and_says_so():
    def bad_3(x):
        if x % 3 == 0:
            raise ValueError(f"bad {x}")
        return x

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [int(x) for x in D.range(9).map(bad_3).ignore_errors()] == [1, 2, 4, 5, 7, 8]
    msgs = [str(w.message) for w in caught if issubclass(w.category, hr.IgnoredErrorsWarning)]
    assert msgs and "dropped 3 of 9 elements (ValueError x3)" in msgs[0] and "at element 0" in msgs[0]
    oversize = D.range(3).map(lambda x: np.zeros(400_000, np.uint8)).batch(3).ignore_errors()
    with pytest.raises(hr.MemoryBudgetError):
        list(oversize.with_options(hr.Options(memory_budget=1_000_000)))
    with pytest.raises(NameError):
        list(D.range(3).map(lambda x: undefined_name).ignore_errors())  # noqa: F821 - a bug, not bad data
    with pytest.raises(hr.TooManyErrorsError, match=r"\d+ of 100 elements failed"):
        list(D.range(1000).map(bad_3).ignore_errors(max_drop_ratio=0.1))
    with pytest.raises(ValueError, match=r"max_drop_ratio=1\.5"):
        D.range(3).ignore_errors(max_drop_ratio=1.5)


def test_10_close_is_fast_reports_stuck_threads_and_a_closed_iterator_says_so():
    ds = D.range(10**9)
    for _ in range(4):
        ds = ds.map(lambda x: x, num_parallel_calls=2)
    it = iter(ds)
    next(it)
    t0 = time.monotonic()
    it.close()
    assert time.monotonic() - t0 < 1.5
    assert wait_no_threads(1.0) == []
    with pytest.raises(hr.IteratorClosedError, match="closed by close"):
        next(it)

    release = threading.Event()
    stuck = iter(D.range(10).map(lambda x: release.wait(5) and x, num_parallel_calls=1))
    def wait_in_next() -> None:
        with pytest.raises(hr.IteratorClosedError):
            next(stuck)

    with pytest.warns(ResourceWarning, match=r"still running after close\(\).*headrace-map"):
        t = threading.Thread(target=wait_in_next, daemon=True)
        t.start()
        time.sleep(0.3)
        stuck.close()
    assert stuck.threads_alive and all(n.startswith("headrace-map") for n in stuck.threads_alive)
    release.set()
    t.join(5)
    assert wait_no_threads(5.0) == []


@pytest.mark.parametrize("tail", ["batch", "shuffle", "unbatch", "cache"])
def test_11_a_stage_waiting_for_memory_is_stopped_by_close(tail, monkeypatch):
    from headrace._memory import StageAccount

    elements = D.range(50).map(lambda x: np.zeros((2, 100), np.uint8))
    pipeline = {"batch": elements.batch(2), "shuffle": elements.shuffle(2), "unbatch": elements.unbatch(),
                "cache": elements.cache()}[tail]
    it = iter(pipeline.with_options(hr.Options(memory_budget=10_000)))
    next(it)
    # From now on the budget never has room (and the stall breaker never fires): the stage waits...
    monkeypatch.setattr(StageAccount, "_admit", lambda self, *args, **kwargs: False)
    monkeypatch.setattr(StageAccount, "_stalled", lambda self, *args, **kwargs: False)
    errors: list[BaseException] = []

    def consume():
        try:
            for _ in range(5):
                next(it)
        except BaseException as e:  # reported below
            errors.append(e)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    time.sleep(0.3)
    assert t.is_alive(), f"{tail} did not wait for memory"
    it.close()                                # ...until close() from this thread stops it
    t.join(2)
    assert not t.is_alive() and len(errors) == 1 and isinstance(errors[0], hr.IteratorClosedError), errors


def test_padded_batch_assembly_counts_its_rows_by_their_real_size():
    # Issue 10: padded_batch whose first row per batch is tiny and the rest large reported an assembly peak
    # of 0 (it charged element 0's size x batch size and never corrected it).
    sizes = [8 if i % 16 == 0 else 200_000 for i in range(64)]
    ds = D.from_tensor_slices(np.arange(64)).map(lambda i: np.ones(sizes[int(i)], np.uint8)).padded_batch(16)
    with iter(ds.with_options(hr.Options(memory_budget=64 * MiB))) as it:
        shapes = [b.shape for b in it]
        stats = it.memory_stats()
    assert shapes == [(16, 200_000)] * 4
    assembly = stats["stages"]["padded_batch(16) assembly"]["peak_bytes"]
    assert assembly >= 15 * 200_000 + 16 * 200_000, f"assembly peak {assembly}: rows and the padded batch counted"
    assert stats["peak_bytes"] <= 64 * MiB and stats["overdraft_bytes"] == 0
