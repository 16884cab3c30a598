"""Runs in a parallel stage's worker threads (``headrace._engine.pool.workers``): a worker claims, reserves,
pulls, settles and publishes a run of elements at once (docs/design/pool.md: runs). Across generated
schedules of input errors, function errors, replay events below and restore points, a pool taking runs
delivers what a sequential ``map`` does and a state taken anywhere (inside a run too) restores to exactly the
rest; an error inside a run is that element's, named; ``close()`` while a run is claimed computes no more of
it; a budget too small for a whole run makes runs shorter, never overdrawn."""

from __future__ import annotations

import functools
import json
import random
import threading
import time

import numpy as np
import pytest

import headrace as hr
from headrace._engine.pool.order import ResultsWindow
from headrace._engine.pool.parallel import ParallelApplier
from headrace._memory import MemoryBudget
from tests.conftest import ints_and_errors, wait_no_threads
from tests.engine.pool.test_inline_path import _expected, _fn, _Source, _take


def _pool(src: _Source, fn, workers: int, deterministic: bool = True, budget: int = 1 << 24) -> ParallelApplier:
    acc = MemoryBudget(budget).account("map", 16)
    return ParallelApplier(src, fn, num_workers=workers, window=16, deterministic=deterministic, account=acc,
                           stage="map", thread_name="test-runs")


def _counting_claims(monkeypatch) -> list[int]:
    """The ``count`` of every claim the workers make (the run lengths)."""
    counts: list[int] = []
    claim = ResultsWindow.claim_with_room

    def counted(self, stop, index, most=1, fit=None):
        seq, count = claim(self, stop, index, most, fit)
        if seq >= 0:
            counts.append(count)
        return seq, count

    monkeypatch.setattr(ResultsWindow, "claim_with_room", counted)
    return counts


@pytest.mark.parametrize("seed", range(16))
def test_runs_deliver_a_sequential_stream_and_restore_exactly_from_inside_a_run(seed, monkeypatch):
    counts = _counting_claims(monkeypatch)
    rng = random.Random(seed)
    n = rng.randrange(50, 150)  # runs start once a window (16) was delivered
    raise_at = {p for p in range(n) if rng.random() < 0.06}
    fails = {p for p in range(n) if rng.random() < 0.06} - raise_at
    events = {p for p in range(n) if rng.random() < 0.05}
    workers = rng.choice([1, 2, 3])
    expected = _expected(n, raise_at, fails)

    p = _pool(_Source(n, raise_at, events), _fn(fails), workers)
    got = _take(p, {})
    p.stop()
    assert [(k, v) for k, v, _ in got] == expected
    assert max(counts) > 1, counts  # runs were taken (guards the rest of the test)

    cut = rng.randrange(0, n + 1)
    first = _pool(_Source(n, raise_at, events), _fn(fails), workers)
    head = _take(first, {}, cut)
    state = json.loads(json.dumps(first.state()))
    first.stop()
    second = _pool(_Source(n, raise_at, events), _fn(fails), rng.choice([1, 2, 3]))
    second.restore(state)
    tail = _take(second, {})
    second.stop()
    assert [(k, v) for k, v, _ in head + tail] == expected, (seed, cut, state)


@pytest.mark.parametrize("seed", range(8))
def test_out_of_order_runs_restore_to_exactly_the_rest(seed):
    """``deterministic=False``: results finish out of order (slow elements), the state names the positions
    delivered beyond the prefix, which may fall inside a run; the restored pool skips exactly those."""
    rng = random.Random(seed)
    n = rng.randrange(40, 120)
    slow = {p for p in range(n) if rng.random() < 0.15}

    def fn(x: int) -> int:
        if x in slow:
            time.sleep(0.002)
        return x * 10

    cut = rng.randrange(0, n + 1)
    first = _pool(_Source(n, set(), set()), fn, 2, deterministic=False)
    head = [first.next() for _ in range(cut)]
    state = json.loads(json.dumps(first.state()))
    first.stop()
    second = _pool(_Source(n, set(), set()), fn, rng.choice([1, 2]), deterministic=False)
    second.restore(state)
    tail = list(iter(second.next, object()))  # (until StopIteration)
    second.stop()
    assert sorted(head + tail) == [p * 10 for p in range(n)], (seed, cut, state)


def test_a_run_is_one_claim_and_an_error_inside_it_is_that_element_s(monkeypatch):
    counts = _counting_claims(monkeypatch)

    def f(x):
        if int(x) == 37:
            raise ValueError("bad value 37")
        return x * 2

    ds = hr.Dataset.range(200).map(f, num_parallel_calls=2, executor="thread")
    with iter(ds) as it:
        got, raised = ints_and_errors(it, ValueError)
    errors = ["".join(getattr(e, "__notes__", [])) for e in raised]
    assert got == [2 * x for x in range(200) if x != 37]
    assert len(errors) == 1 and "at element 37" in errors[0], errors
    assert len(counts) < 200 / 2, f"{len(counts)} claims for 200 elements: {counts}"


def test_close_while_a_run_is_claimed_computes_no_more_of_it():
    gate = threading.Event()
    calls: list[tuple[int, bool]] = []

    def f(x):
        x = int(x)
        calls.append((x, gate.is_set()))
        if x >= 40:
            gate.wait(10)
        return x

    ds = hr.Dataset.range(1000).map(f, num_parallel_calls=2, executor="thread")
    it = iter(ds)
    assert [int(next(it)) for _ in range(40)] == list(range(40))
    deadline = time.monotonic() + 20
    while sum(x >= 40 for x, _ in calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # both workers blocked inside their runs
    assert sum(x >= 40 for x, _ in calls) >= 2, calls
    t0 = time.monotonic()
    it.close()
    assert time.monotonic() - t0 < 5
    gate.set()
    assert wait_no_threads(10.0) == []
    assert not [x for x, after in calls if after], "elements of a run computed after close()"


def test_a_budget_too_small_for_a_whole_run_shortens_runs_and_never_overdraws(monkeypatch):
    counts = _counting_claims(monkeypatch)
    element = 256 * 1024
    budget = 6 * element  # the map's share: a few elements, never a run of 4 plus the consumer's headroom

    def f(x):
        return np.full(element // 8, int(x), np.float64)

    ds = (hr.Dataset.range(120).map(f, num_parallel_calls=2, executor="thread")
          .with_options(hr.Options(memory_budget=budget)))
    with iter(ds) as it:
        got = [int(a[0]) for a in it]
        stats = it.memory_stats()
    assert got == list(range(120))
    assert stats["peak_bytes"] <= budget, stats
    assert stats["overdraft_bytes"] == 0, stats
    assert max(counts) > 1 and min(counts) == 1, counts


def test_a_run_shrinks_to_what_the_budget_admits_and_gives_back_the_numbers_it_does_not_take():
    """Unit: a claim of up to 8 whose reservation only fits 2 claims 2 numbers and reserves 2 elements."""
    element = 1000
    p = _pool(_Source(100, set(), set()), lambda x: np.zeros(element, np.uint8), 1, budget=1 << 30)
    acc = p.account
    acc.learn_sizes(element, element)  # the element size is known: runs may be taken
    acc.adjust(element)  # one result held
    acc.cap_bytes = 3.5 * element  # the map's share: room for 2 more
    run: list = []
    seq, count = p.window.claim_with_room(p.workers.stop_flag, 0, 8, functools.partial(p.workers._fit, run))
    assert (seq, count) == (0, 2) and run[0].nbytes == 2 * element
    assert p.window.next_seq == 2 and acc.held_bytes == 3 * element
    run[0].cancel()
    p.stop()
