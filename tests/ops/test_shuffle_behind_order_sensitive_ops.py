"""A shuffle behind an op whose elements depend on its input's order restores exactly the rest.

Below a ``deterministic=False`` stage each pass delivers the same elements in another order. An op that
groups, pairs, counts, cuts or carries state by position (``zip``, ``enumerate``, the ``batch`` family,
``pack``, ``concat_then_split``, ``window``, ``group_by_window``, ``bucket_by_sequence_length``, ``scan``,
``take``, ``skip``, ``take_while``, ``rejection_resample``, ``sample_from_datasets``, ``choose_from_datasets``)
therefore makes *other* elements on a re-read, and the shuffle's content hashes cannot find its buffered
elements again (it raised ``StateError``: sweep seed 39, a ``bucket_by_sequence_length`` between the two). The
shuffle saves its buffer by value there. The order after a restore may differ (deterministic=False); the
records are exact: every record not delivered before the checkpoint, once.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable

import numpy as np
import pytest

import headrace as hr

D = hr.Dataset
N_OUTER, PER = 6, 5  # each interleave yields N_OUTER * PER elements
N = N_OUTER * PER


def _slow(y):
    time.sleep(random.random() * 0.003)  # completion order varies: deterministic=False delivers it
    return y


def _inner(x):
    return D.range(x * 10, x * 10 + PER).map(_slow)


def _side(start: int) -> D:
    return D.range(start, start + N_OUTER).interleave(_inner, cycle_length=2, num_parallel_calls=2,
                                                       deterministic=False)


def _values(start: int) -> list[int]:
    return sorted(x * 10 + j for x in range(start, start + N_OUTER) for j in range(PER))


def _records(x) -> list[int]:
    """The record ids an element of any op below carries (every leaf >= 0 of its structure)."""
    if isinstance(x, D):
        return [v for y in x for v in _records(y)]
    if isinstance(x, (tuple, list)):
        return [v for y in x for v in _records(y)]
    if isinstance(x, dict):
        return [v for y in x.values() for v in _records(y)]
    return [int(v) for v in np.asarray(x).ravel()]


def _chain(ds: D, position: int, records: Callable[[object], list[int]]) -> tuple[list[int], list[int]]:
    with iter(ds) as it:
        before = [records(next(it)) for _ in range(position)]
        state = json.loads(json.dumps(it.get_state()))  # as a checkpoint file holds it
    with iter(ds) as it2:
        it2.set_state(state)
        rest = [records(x) for x in it2]
    return [v for r in before for v in r], [v for r in rest for v in r]


def _row(v):
    return np.full(int(v) % 4 + 1, v)  # lengths 1-4: padded, bucketed


def _first_of_rows(x) -> list[int]:
    return [int(row[0]) for row in np.asarray(x)]  # one record per padded row


def _first_of_segments(x) -> list[int]:
    packed, segment_ids, _ = x  # pack: one record per segment of a row
    return [int(packed[segment_ids == k][0]) for k in range(1, int(segment_ids.max(initial=0)) + 1)]


def _tokens(x) -> list[int]:
    packed, segment_ids, _ = x  # concat_then_split of one-token sequences: one record per token
    return [int(v) for v in packed[segment_ids > 0]]


def _records_of_pairs(x) -> list[int]:
    return [int(x[1])]  # enumerate / scan: the record, not its index or running count


# name -> (pipeline after the nondeterministic side, the records one element carries)
ORDER_SENSITIVE: dict[str, tuple[Callable[[D], D], Callable[[object], list[int]]]] = {
    "batch": (lambda d: d.batch(3), _records),
    "padded_batch": (lambda d: d.map(_row).padded_batch(3, padding_values=np.int64(-1)), _first_of_rows),
    "window": (lambda d: d.window(3).flat_map(lambda w: w.batch(3)), _records),
    "group_by_window": (lambda d: d.group_by_window(lambda v: v % 2, lambda k, w: w.batch(2), window_size=2),
                        _records),
    "bucket_by_sequence_length": (lambda d: d.map(_row).bucket_by_sequence_length(
        lambda v: np.shape(v)[0], [3], [2, 2], padding_values=np.int64(-1)), _first_of_rows),
    "enumerate": (lambda d: d.enumerate(), _records_of_pairs),
    "pack": (lambda d: d.map(_row).pack(4, num_packing_bins=2), _first_of_segments),
    "concat_then_split": (lambda d: d.map(lambda v: np.reshape(v, [1])).concat_then_split(3), _tokens),
    "scan": (lambda d: d.scan(np.int64(0), lambda s, v: (s + 1, (s, v))), _records_of_pairs),
}
PARTIAL: dict[str, Callable[[D], D]] = {  # records are a prefix-dependent subset: exactly-once, none repeated
    "take": lambda d: d.take(N - 7),
    "skip": lambda d: d.skip(7),
    "take_while": lambda d: d.scan(np.int64(0), lambda s, v: (s + 1, (s, v))).take_while(
        lambda i, v: i < 40 - v // 10).map(lambda i, v: v),
}


@pytest.mark.parametrize("position", [0, *sorted(random.Random(22).sample(range(1, N), 4))])
def test_a_shuffle_behind_a_zip_restores_exactly_the_rest(position):
    ds = D.zip((_side(0), _side(100))).shuffle(8, seed=0)
    before, rest = _chain(ds, position, _records)
    assert len(before) + len(rest) == 2 * N
    assert sorted(v for v in before + rest if v < 100) == _values(0)
    assert sorted(v for v in before + rest if v >= 100) == _values(100)


@pytest.mark.parametrize("op", sorted(ORDER_SENSITIVE))
@pytest.mark.parametrize("position", [1, 4, 8])
def test_a_shuffle_behind_an_op_that_depends_on_its_input_order_restores_exactly_the_rest(op, position):
    make, records = ORDER_SENSITIVE[op]
    ds = make(_side(0)).shuffle(16, seed=0)
    before, rest = _chain(ds, position, records)
    assert sorted(before + rest) == _values(0)


@pytest.mark.parametrize("op", sorted(PARTIAL))
@pytest.mark.parametrize("position", [1, 6])
def test_a_shuffle_behind_a_positional_cut_restores_without_repeating_a_record(op, position):
    ds = PARTIAL[op](_side(0)).shuffle(16, seed=0)
    before, rest = _chain(ds, position, _records)
    got = before + rest
    assert len(set(got)) == len(got) and set(got) <= set(_values(0))
    if op != "take_while":
        assert len(got) == N - 7


@pytest.mark.parametrize("position", [1, 6])
def test_a_shuffle_behind_a_sample_of_nondeterministic_inputs_restores_exactly_the_rest(position):
    sampled = D.sample_from_datasets([_side(0), _side(100)], weights=[0.5, 0.5], seed=3)
    chosen = D.choose_from_datasets([_side(0), _side(100)], D.range(2).repeat(N), stop_on_empty_dataset=False)
    for ds in (sampled.shuffle(16, seed=0), chosen.shuffle(16, seed=0)):
        before, rest = _chain(ds, position, _records)
        assert sorted(before + rest) == _values(0) + _values(100)
