"""A shuffle behind a zip (or a batch) of ``deterministic=False`` interleaves restores exactly the rest.

Re-reading such a zip pairs other elements (each input's order differs from pass to pass), so the
shuffle's content hashes cannot find its buffered pairs again (it raised ``StateError``); it saves its
buffer by value there. The order after a restore may differ (deterministic=False); the rest of each zipped
component is exact: every value not delivered before the checkpoint, once.
"""

from __future__ import annotations

import json
import random
import time

import pytest

import headrace as hr

N_OUTER, PER = 6, 5  # each interleave yields N_OUTER * PER elements


def _slow(y):
    time.sleep(random.random() * 0.003)  # completion order varies: deterministic=False delivers it
    return y


def _inner(x):
    return hr.Dataset.range(x * 10, x * 10 + PER).map(_slow)


def _side(start: int) -> hr.Dataset:
    return hr.Dataset.range(start, start + N_OUTER).interleave(_inner, cycle_length=2, num_parallel_calls=2,
                                                              deterministic=False)


def _pipeline() -> hr.Dataset:
    return hr.Dataset.zip((_side(0), _side(100))).shuffle(8, seed=0)


def _values(start: int) -> list[int]:
    return sorted(x * 10 + j for x in range(start, start + N_OUTER) for j in range(PER))


@pytest.mark.parametrize("position", [0, *sorted(random.Random(22).sample(range(1, N_OUTER * PER), 4))])
def test_restore_yields_exactly_the_rest(position):
    ds = _pipeline()
    with iter(ds) as it:
        before = [tuple(int(v) for v in next(it)) for _ in range(position)]
        state = json.loads(json.dumps(it.get_state()))  # as a checkpoint file holds it
    with iter(ds) as it2:
        it2.set_state(state)
        rest = [tuple(int(v) for v in x) for x in it2]
    assert len(before) + len(rest) == N_OUTER * PER
    for c, start in ((0, 0), (1, 100)):
        assert sorted([e[c] for e in before] + [e[c] for e in rest]) == _values(start)


@pytest.mark.parametrize("position", [1, 4, 8])
def test_a_shuffle_of_batches_of_a_nondeterministic_stage_restores(position):
    """Batches group consecutive elements: a re-read in another order groups others (same StateError)."""
    ds = _side(0).batch(3).shuffle(4, seed=0)
    with iter(ds) as it:
        before = [[int(v) for v in next(it)] for _ in range(position)]
        state = json.loads(json.dumps(it.get_state()))
    with iter(ds) as it2:
        it2.set_state(state)
        rest = [[int(v) for v in x] for x in it2]
    assert sorted(v for b in before + rest for v in b) == _values(0)
