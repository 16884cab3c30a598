"""A restored iterator yields exactly the rest of the stream after elements whose function raised.

Generated cases (seeded): the op that calls the raising function (``map`` sequential or parallel, in order or
not, on threads or worker processes; ``filter``; ``flat_map``; ``interleave`` sequential or parallel), an
optional stage before it (a seeded shuffle, a map that raises too, batch + unbatch) and after it (batch,
prefetch, a seeded shuffle, take, enumerate, repeat, a parallel map), the elements that raise, where the state
is taken (before, at or after an error), and a restore of the restore. The user catches each error from
``next()`` and goes on, as a training loop with a bad record does: the original iterator's continuation, the
restored one's and the restore of the restore's must be the same elements and errors in the same order
(in any order below an unordered stage), each error raised exactly where the saved run raised it.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

import headrace as hr
from tests.engine.pool.proc_fns import RaisesOn


def _norm(v):
    if isinstance(v, tuple):
        return tuple(_norm(a) for a in v)
    return v.tolist() if hasattr(v, "tolist") else v


def _drain(it, n=None):
    """Up to ``n`` positions (all with None): each element, or ``"ERR ..."`` for an element that raised."""
    out = []
    while n is None or len(out) < n:
        try:
            v = _norm(next(it))
        except StopIteration:
            break
        except ValueError as e:
            v = f"ERR {e}"
        out.append(v)
        assert len(out) < 2000, "the stream does not end"
    return out


def _case(seed):
    rng = random.Random(seed)
    n = rng.randint(8, 60)
    op = rng.choice(["map", "map", "filter", "flat_map", "interleave", "interleave"])
    bad = sorted(rng.sample(range(n), rng.randint(1, 3)))
    ds = hr.Dataset.range(n)
    before = rng.choice([None, "shuffle", "raising_map", "batch_unbatch"])
    if before == "shuffle":
        ds = ds.shuffle(rng.randint(2, 6), seed=rng.randint(0, 99))
    elif before == "raising_map":
        ds = ds.map(RaisesOn(rng.sample(range(n), 2), "map"))
    elif before == "batch_unbatch":
        ds = ds.batch(3).unbatch()
    parallel = rng.choice([None, 2, hr.AUTOTUNE])
    kw = {}
    if op == "map":
        if parallel is not None:
            kw = {"num_parallel_calls": parallel, "deterministic": rng.random() < 0.7,
                  "executor": "process" if rng.random() < 0.4 else "thread"}
        ds = ds.map(RaisesOn(bad, "map"), **kw)
    elif op == "filter":
        ds = ds.filter(RaisesOn(bad, "filter"))
    elif op == "flat_map":
        ds = ds.flat_map(RaisesOn(bad, "flat_map"))
    else:
        kw = {"cycle_length": rng.randint(1, 3), "block_length": rng.randint(1, 2)}
        if parallel is not None:
            kw.update(num_parallel_calls=parallel, deterministic=rng.random() < 0.7)
        ds = ds.interleave(RaisesOn(bad, "flat_map"), **kw)
    after = rng.choice([None, "batch", "prefetch", "shuffle", "take", "enumerate", "repeat", "parallel_map"])
    if after == "batch":
        ds = ds.batch(rng.randint(2, 4))
    elif after == "prefetch":
        ds = ds.prefetch(2)
    elif after == "shuffle":
        ds = ds.shuffle(4, seed=3)
    elif after == "take":
        ds = ds.take(n - 2)
    elif after == "enumerate":
        ds = ds.enumerate()
    elif after == "repeat":
        ds = ds.repeat(2)
    elif after == "parallel_map":
        ds = ds.map(lambda x: x + 1, num_parallel_calls=2, executor="thread")
    ordered = kw.get("deterministic", True) is not False
    desc = f"seed {seed}: range({n}) {before} {op}{kw} raising at {bad}, then {after}"
    return ds, ordered, rng.randint(0, 2 * n), rng.randint(0, 6), desc


def _same(a, b, ordered):
    return a == b if ordered else Counter(map(repr, a)) == Counter(map(repr, b))


@pytest.mark.parametrize("seed", range(40))
def test_a_restore_after_errors_yields_exactly_the_rest(seed):
    ds, ordered, at, at2, desc = _case(seed)
    it = iter(ds)
    _drain(it, at)  # the errors before the state are caught and the loop goes on
    state = it.get_state()
    rest = _drain(it)
    it.close()
    with iter(ds) as restored:
        restored.set_state(state)
        first = _drain(restored, at2)
        state2 = restored.get_state()
        second = _drain(restored)
    with iter(ds) as again:
        again.set_state(state2)
        third = _drain(again)
    assert _same(first + second, rest, ordered), (desc, rest, first + second)
    if ordered:
        assert third == second, (desc, second, third)
    else:
        assert Counter(map(repr, third)) <= Counter(map(repr, rest)), (desc, rest, third)
        assert len(third) == len(second), (desc, second, third)


@pytest.mark.parametrize("at", [0, 5, 17])
def test_a_restored_repeat_reshuffles_its_later_epochs_as_the_saved_run(at):
    """A seeded shuffle with ``reshuffle_each_iteration`` under ``repeat``: the epochs after a restore draw the
    saved run's order (their seeds come from the saved iteration path, not the new iterator's)."""
    ds = hr.Dataset.range(16).shuffle(4, seed=7).map(lambda x: x * 2).repeat(3)
    it = iter(ds)
    _drain(it, at)
    state = it.get_state()
    rest = _drain(it)
    it.close()
    with iter(ds) as restored:
        restored.set_state(state)
        assert _drain(restored) == rest
