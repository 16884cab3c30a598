"""``batch`` / ``padded_batch`` (``headrace._ops.batch``, ``padded_batch``) inside the memory budget: elements of
different sizes, a failed reservation, the assembly's size (issue 15, engine review)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import headrace as hr

D = hr.Dataset
MiB = 1024**2


def test_parallel_batch_of_growing_elements_does_not_hang():
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


def test_a_failed_batch_reservation_leaves_the_budget_whole():
    ds = (D.range(4).map(lambda x: np.zeros(300_000, np.uint8)).batch(4)
          .with_options(hr.Options(memory_budget=1_000_000)))
    with iter(ds) as it:
        with pytest.raises(hr.MemoryBudgetError):
            next(it)
        stats = it.memory_stats()
    assert stats["current_bytes"] >= 0
    assert all(s["current_bytes"] >= 0 and s["held_elements"] >= 0 for s in stats["stages"].values())


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
