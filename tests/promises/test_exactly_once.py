"""Promise 2: a restored iterator yields exactly the rest of the stream (element ids, nothing lost or twice).

Restores at random points into freshly built pipelines (in a child process, through ``json``), SIGKILLs at
random points with recovery from the last checkpoint, over the shapes issue 10 broke (a
``deterministic=False`` map feeding ``shuffle``) and generated shapes (``bench/promises.py`` runs hundreds).
"""

from __future__ import annotations

import json
import random
import time
import warnings

import pytest

import headrace as hr
from tests.promises.harness import check_kill, check_restore
from tests.promises.shapes import random_shape

D = hr.Dataset


def _jitter(x):
    if int(x) % 7 == 0:
        time.sleep(0.0005)  # finishes late: a deterministic=False map delivers it out of order
    return x


def _nondeterministic_into_shuffle() -> hr.Dataset:
    return D.range(600).map(_jitter, num_parallel_calls=3, deterministic=False).shuffle(64, seed=1).prefetch(4)


def test_nondeterministic_map_into_shuffle_restores_exactly_in_process():
    rng = random.Random(0)
    for _ in range(10):  # issue 10 saw 10 of 10 trials lose and duplicate elements
        k = rng.randint(1, 599)
        with iter(_nondeterministic_into_shuffle()) as it:
            got = [int(next(it)) for _ in range(k)]
            state = json.loads(json.dumps(it.get_state()))
        with iter(_nondeterministic_into_shuffle()) as it:
            it.set_state(state)
            got += [int(x) for x in it]
        assert sorted(got) == list(range(600)), f"restored at {k}"


SHUFFLE_BEHIND_NONDETERMINISTIC = {
    "seed": 0, "n": 800, "sizes": {"kind": "uniform", "small": 64, "large": 4096},
    "source": {"kind": "interleave", "files": 4, "cycle_length": 4, "parallel": True, "deterministic": False},
    "stages": [{"op": "map", "parallel": 2, "deterministic": False, "blowup": 1.0},
               {"op": "shuffle", "buffer": 100}, {"op": "padded_batch", "size": 4},
               {"op": "prefetch", "buffer": 2}],
    "budget": 64 * 1024**2}


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(3))
def test_sigkill_at_random_points_then_recover_exactly_once(trial):
    rng = random.Random(trial)
    verdict = check_kill(SHUFFLE_BEHIND_NONDETERMINISTIC, after_elements=rng.randint(20, 180), every=7)
    assert verdict.ok, (verdict.kind, verdict.detail, verdict.figures)


@pytest.mark.parametrize("seed", range(6))
def test_generated_shapes_restore_exactly_once(seed):
    shape = random_shape(2000 + seed, max_stream_bytes=256 * 1024**2)
    rng = random.Random(seed)
    points = sorted(rng.sample(range(1, 40), 3))
    verdict = check_restore(shape, points)
    assert verdict.ok, (verdict.kind, verdict.detail, shape)


# Shapes the full sweep (bench/promises.py) found losing and repeating elements, with the points it used:
# seed 0: a state saved after an earlier restore (the restore capped the shuffle afresh while a prefetch
# skipped forward); seed 182: shuffle -> map -> prefetch under a tight budget (the map's replay event
# counted from when a worker reading ahead saw it, not from the element after it).
SWEEP_FOUND = {0: [10, 30], 182: [15, 23, 29]}


@pytest.mark.parametrize("seed", sorted(SWEEP_FOUND))
def test_shapes_the_sweep_found_restore_exactly_once(seed):
    shape = dict(random_shape(seed), n=300)
    for _ in range(2):  # seed 182 failed in most runs, not all
        verdict = check_restore(shape, SWEEP_FOUND[seed])
        assert verdict.ok, (verdict.kind, verdict.detail, shape)


@pytest.mark.parametrize(("seed", "points"), [(58, [13, 14, 38])])  # (and seed 17: 27 s, left to the sweep)
def test_shuffle_behind_a_shuffle_restores_without_hanging(seed, points):
    """The sweep found these hanging in the restore's hash scan once restores stopped capping shuffles
    afresh: the scan of a replayed input had been told to fill inner shuffles to their recorded capacity
    (which only the replay's own ``set_state`` needs) while the outer buffer held most of the budget."""
    verdict = check_restore(random_shape(seed), points, timeout_s=90)
    assert verdict.ok, (verdict.kind, verdict.detail)


class _OrderChangesOnceRestored:
    """An input that replays exactly while a restore runs and, once it is over, yields the rest of its
    positions in another order (reversed): what a shuffle does when it caps its buffer to the budget after a
    restore (``bench/promises.py`` seed 245: ``shuffle -> prefetch(AUTOTUNE) -> map(deterministic=False)``)."""

    def __init__(self, n: int, raise_at: int | None = None) -> None:
        self.n, self.pos, self.restoring, self.restored, self.reverse_from = n, 0, False, False, None
        self.raise_at = raise_at

    def __next__(self) -> int:
        if self.pos >= self.n:
            raise StopIteration
        if self.restored and not self.restoring and self.reverse_from is None:
            self.reverse_from = self.pos
        p, self.pos = self.pos, self.pos + 1
        if p == self.raise_at:
            raise ValueError(f"bad record {p}")
        return p if self.reverse_from is None else self.n - 1 - (p - self.reverse_from)

    def get_state(self) -> dict:
        return {"pos": self.pos}

    def set_state(self, state: dict) -> None:
        self.pos, self.restored = int(state["pos"]), True

    def skip_ahead(self, n: int) -> None:
        for _ in range(n):
            next(self)

    def replay_epoch(self) -> int:
        return 0

    def replays_deterministically(self) -> bool:
        return True


@pytest.mark.parametrize("raise_at", [None, 3])
def test_out_of_order_positions_are_read_while_the_restore_runs(raise_at):
    """``raise_at=3``: the last skipped position is an element that raised; the restore read past it too."""
    from headrace._engine.pool.parallel import ParallelApplier
    from headrace._memory import MemoryBudget

    def slow_zero(x):
        if x == 0:
            time.sleep(0.5)  # element 0 finishes last: 1, 2, 3 are delivered before it
        return x

    def pool(fn):
        src = _OrderChangesOnceRestored(40, raise_at)
        acc = MemoryBudget(1 << 20).account("map", 4)
        return src, ParallelApplier(src, fn, num_workers=2, window=4, deterministic=False, account=acc,
                                    stage="map", thread_name="test-map")

    def take(p, got, errors, k=None):
        while k is None or len(got) + len(errors) < k:
            try:
                got.append(p.next())
            except StopIteration:
                return
            except ValueError as e:
                errors.append(str(e))

    got: list[int] = []
    errors: list[str] = []
    _, first = pool(slow_zero)
    take(first, got, errors, 3)
    state = json.loads(json.dumps(first.state()))
    first.stop()
    assert sorted(got + [3] * len(errors)) == [1, 2, 3] and state["skip"] == [1, 2, 3], (got, errors, state)
    src, second = pool(lambda x: x)
    src.restoring = True  # what Iterator.set_state's ctx.restoring says to a shuffle
    second.restore(state)
    src.restoring = False
    take(second, got, errors)
    second.stop()
    want = [i for i in range(40) if i != raise_at]
    assert sorted(got) == want and errors == ([] if raise_at is None else ["bad record 3"]), (sorted(got), errors)


def test_replaying_a_nondeterministic_order_never_waits_for_the_stall_breaker():
    """A restored deterministic=False map replays the saved order, so it holds results that came back early
    while it waits for the one the consumer needs; with its share full of them, that one was refused until
    the stall breaker fired (1 s, a MemoryBudgetWarning "went over the budget" under a 1 GiB budget holding
    bytes). The element the consumer waits for is limited by the budget as a whole only."""
    opts = hr.Options(memory_budget="1GiB")
    rng = random.Random(1)
    for _ in range(6):
        k = rng.randint(1, 599)
        with iter(_nondeterministic_into_shuffle().with_options(opts)) as it:
            for _ in range(k):
                next(it)
            state = json.loads(json.dumps(it.get_state()))
        with warnings.catch_warnings():
            warnings.simplefilter("error", hr.MemoryBudgetWarning)
            with iter(_nondeterministic_into_shuffle().with_options(opts)) as it:
                it.set_state(state)
                rest = sum(1 for _ in it)
                stalls = it.memory_stats()["stalls"]
        assert rest == 600 - k
        assert stalls == 0, f"restored at {k}: {stalls} stall(s) in a pipeline using bytes of a 1 GiB budget"
