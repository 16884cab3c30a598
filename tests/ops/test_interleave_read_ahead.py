"""A parallel interleave's read-ahead under a budget: the share is split over the cycle's slots from the first
slot on, so the slots opened first cannot read the share full while the others are still opening (issue 24:
16 slots under a budget of 2 elements each ran at 52-60% of the unlimited rate; the consumer, taking the
slots in turn, waited on each later slot's read in series)."""

from __future__ import annotations

import numpy as np
import pytest

import headrace as hr
from headrace._ops.interleave import _InterleaveIterator

MiB = 1 << 20


def _pipeline(cycle_length: int, files: int, per_slot: int) -> hr.Dataset:
    def read(i: int) -> hr.Dataset:
        return hr.Dataset.range(6).map(lambda j: np.full(MiB, j, np.uint8))

    budget = int(per_slot * cycle_length * MiB * 16 / 15) + 64 * 1024  # the budget keeps 1/16 outside every share
    return (hr.Dataset.range(files)
            .interleave(read, cycle_length=cycle_length, num_parallel_calls=cycle_length, deterministic=True)
            .with_options(hr.Options(memory_budget=budget)))


@pytest.mark.parametrize("per_slot", [1, 2, 3])
def test_the_first_slot_reads_ahead_only_its_part_of_the_share_while_others_open(per_slot: int) -> None:
    with iter(_pipeline(8, 8, per_slot)) as it:
        first = next(it)
        root = it._root
        assert isinstance(root, _InterleaveIterator)
        opened = sum(s is not None for s in root._slots)
        assert opened < 8  # the other slots open as the consumer reaches them
        assert root._slot_window() == per_slot  # 1/8 of the share, not 1/opened of it
        rest = list(it)
    assert len(rest) + 1 == 48
    assert int(first[0]) == 0


def test_once_the_input_ended_the_open_slots_split_the_share() -> None:
    with iter(_pipeline(8, 2, 2)) as it:  # 2 files for 8 slots: the input ends after the second
        out = [next(it) for _ in range(4)]
        root = it._root
        assert root._end_of_input
        assert root._slot_window() == 8  # 16 elements of share over the 2 open slots
        out += list(it)
    assert sorted(int(x[0]) for x in out) == sorted(list(range(6)) * 2)
