"""Lent batch buffers (``headrace._engine.batch_buffers``): a sequential ``batch`` hands out large batches over
raw buffers it takes back when the consumer drops them, charged to the memory budget while idle.

What must hold: values identical to ``np.stack``; a buffer the consumer (or a view, or a tensor) still holds
is never written; an idle buffer is charged, and kept only where the budget has room for it; nothing is
kept or charged after ``close()``; the buffer really is reused (the page faults it saves).
"""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

import headrace as hr
from headrace._engine import batch_buffers
from headrace._engine.stacking import BufferPool, stack
from headrace._memory import MemoryBudget, process_budget

SHAPE = (64, 64, 3)  # float32: 48 KiB per element, 3 MiB per batch of 64
BATCH_BYTES = 64 * 64 * 64 * 3 * 4


def _elements(n: int, start: int = 0) -> list[np.ndarray]:
    return [np.full(SHAPE, start + i, np.float32) for i in range(n)]


def _bound_pool(limit: int = 64 << 20) -> tuple[BufferPool, batch_buffers.SpareBuffers, MemoryBudget]:
    budget = MemoryBudget(limit)
    account = budget.account("batch(64) assembly", 128, mandatory=True, min_units=128)
    pool = BufferPool()
    return pool, pool.lend_from(account), budget


def _stack_charged(pool: BufferPool, spares: batch_buffers.SpareBuffers, items: list[np.ndarray]) -> np.ndarray:
    """What the batch stage does: reserve the output (the idle buffers' reservation first), stack, settle."""
    reservation = batch_buffers.reserve_output(spares._account, spares, BATCH_BYTES, None)
    out = stack(items, "batch", pool)
    reservation.settle(out.nbytes, unit=False)
    spares._account.release(out.nbytes)  # handed to the consumer (uncharged from here)
    return out


def test_values_identical_to_np_stack_and_buffer_reused_after_drop() -> None:
    pool, spares, budget = _bound_pool()
    first = _stack_charged(pool, spares, _elements(64))
    assert type(first) is np.ndarray and first.flags.writeable
    np.testing.assert_array_equal(first, np.stack(_elements(64)))
    address = first.__array_interface__["data"][0]
    del first  # the consumer dropped it: idle, charged
    assert spares.idle_bytes() == BATCH_BYTES
    assert budget.total_bytes == BATCH_BYTES
    second = _stack_charged(pool, spares, _elements(64, 1000))
    assert second.__array_interface__["data"][0] == address  # the same memory, refilled
    assert spares.reused == 1
    np.testing.assert_array_equal(second, np.stack(_elements(64, 1000)))
    assert budget.total_bytes == 0  # the idle charge became the batch's, then went to the consumer


@pytest.mark.parametrize("holder", ["batch", "row view", "reshaped view", "torch tensor"])
def test_a_buffer_still_held_is_never_written(holder: str) -> None:
    pool, spares, _ = _bound_pool()
    batch = _stack_charged(pool, spares, _elements(64))
    if holder == "batch":
        kept = batch
    elif holder == "row view":
        kept = batch[5]
    elif holder == "reshaped view":
        kept = batch.reshape(64, -1)[:, :7]
    else:
        torch = pytest.importorskip("torch")
        kept = torch.from_numpy(batch)

    def values(x: object) -> np.ndarray:
        return x.numpy() if hasattr(x, "numpy") else np.asarray(x)  # type: ignore[no-any-return, union-attr]

    expected = values(kept).copy()
    del batch
    assert spares.idle_bytes() == 0  # still held: not given back
    later = [_stack_charged(pool, spares, _elements(64, 100 * (j + 1))) for j in range(3)]
    np.testing.assert_array_equal(values(kept), expected)
    for j, b in enumerate(later):
        np.testing.assert_array_equal(b, np.stack(_elements(64, 100 * (j + 1))))


def test_no_room_in_the_budget_frees_the_buffer_instead_of_keeping_it() -> None:
    pool, spares, budget = _bound_pool(limit=4 << 20)  # one batch: 3 MiB; the reserve is 1/16 of 4 MiB
    other = budget.account("someone else", None)
    batch = _stack_charged(pool, spares, _elements(64))
    hog = other.try_reserve(1 << 20)
    assert hog is not None
    del batch
    assert spares.idle_bytes() == 0  # 3 MiB + 1 MiB held elsewhere would leave no reserve: freed
    assert budget.total_bytes == 1 << 20
    assert budget.total_bytes <= budget.limit_bytes
    hog.cancel()


@pytest.mark.parametrize("how", ["reserve", "try_reserve"])
def test_an_idle_buffer_gives_way_to_a_reservation_that_needs_its_room(how: str) -> None:
    pool, spares, budget = _bound_pool(limit=8 << 20)
    other = budget.account("shuffle", None)
    batch = _stack_charged(pool, spares, _elements(64))
    del batch
    assert spares.idle_bytes() == BATCH_BYTES  # 3 MiB idle, charged
    need = 6 << 20  # fits only once the idle buffer is gone
    t0 = time.monotonic()
    got = other.reserve(need, None) if how == "reserve" else other.try_reserve(need)
    assert got is not None and time.monotonic() - t0 < 0.5  # at once: no wait for the stall breaker
    assert spares.idle_bytes() == 0 and spares.reclaimed == 1
    assert budget.total_bytes == need <= budget.limit_bytes
    assert budget.stalls == 0 and budget.overdraft_bytes == 0
    got.cancel()
    again = _stack_charged(pool, spares, _elements(64, 9))  # a fresh buffer, right values
    np.testing.assert_array_equal(again, np.stack(_elements(64, 9)))


def test_given_back_by_a_thread_holding_the_budget_lock_is_freed_without_waiting() -> None:
    pool, spares, budget = _bound_pool()
    batch = _stack_charged(pool, spares, _elements(64))
    done = threading.Event()

    def drop_inside_the_lock() -> None:
        nonlocal batch
        with budget.cv:
            batch = None  # the lease dies here, in a thread that holds the budget's lock
        done.set()

    t = threading.Thread(target=drop_inside_the_lock)
    t.start()
    t.join(timeout=10)
    assert done.is_set(), "giving a buffer back waited for a lock its own thread held"
    assert spares.idle_bytes() == 0 and budget.total_bytes == 0


def test_after_close_nothing_is_kept_or_charged() -> None:
    pool, spares, budget = _bound_pool()
    a = _stack_charged(pool, spares, _elements(64))
    b = _stack_charged(pool, spares, _elements(64, 64))
    del a
    assert budget.total_bytes == BATCH_BYTES
    spares.close()
    assert budget.total_bytes == 0 and spares.idle_bytes() == 0
    del b
    gc.collect()
    assert budget.total_bytes == 0 and spares.idle_bytes() == 0


def test_a_smaller_last_batch_gets_a_fresh_buffer_and_the_right_values() -> None:
    pool, spares, budget = _bound_pool()
    del budget
    first = _stack_charged(pool, spares, _elements(64))
    del first
    last = _stack_charged(pool, spares, _elements(10, 7))
    assert last.shape == (10, *SHAPE) and spares.reused == 0
    np.testing.assert_array_equal(last, np.stack(_elements(10, 7)))


def _spares_made(monkeypatch: pytest.MonkeyPatch) -> list[batch_buffers.SpareBuffers]:
    made: list[batch_buffers.SpareBuffers] = []
    real = BufferPool.lend_from

    def record(self: BufferPool, account: object) -> batch_buffers.SpareBuffers:
        made.append(real(self, account))  # type: ignore[arg-type]
        return made[-1]

    monkeypatch.setattr(BufferPool, "lend_from", record)
    return made


@pytest.mark.parametrize("prefetch", [0, 2])
def test_pipeline_streaming_reuses_buffers_and_values_match(monkeypatch: pytest.MonkeyPatch, prefetch: int) -> None:
    made = _spares_made(monkeypatch)
    n = 64 * 12
    ds = hr.Dataset.range(n).map(lambda i: np.full(SHAPE, i, np.float32)).batch(64)
    if prefetch:
        ds = ds.prefetch(prefetch)
    ds = ds.with_options(hr.Options(memory_budget="64MiB"))
    with iter(ds) as it:
        for j, b in enumerate(it):
            np.testing.assert_array_equal(b, np.stack([np.full(SHAPE, i, np.float32)
                                                       for i in range(64 * j, 64 * (j + 1))]))
            assert it.memory_stats()["peak_bytes"] <= 64 << 20
        del b
    assert len(made) == 1
    assert made[0].lent == 12 and made[0].reused >= 6  # most batches went into a buffer given back


def test_pipeline_batches_kept_by_the_user_are_all_intact_and_distinct(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _spares_made(monkeypatch)
    n = 64 * 6 + 5
    kept = list(hr.Dataset.range(n).map(lambda i: np.full(SHAPE, i, np.float32)).batch(64).prefetch(2))
    assert made[0].reused == 0  # every batch is still held
    for j, b in enumerate(kept):
        expected = np.arange(64 * j, min(64 * (j + 1), n), dtype=np.float32)
        np.testing.assert_array_equal(b[:, 0, 0, 0], expected)
        np.testing.assert_array_equal(b[:, -1, -1, -1], expected)
    for j in range(len(kept) - 1):
        assert not np.shares_memory(kept[j], kept[j + 1])


def test_parallel_batch_does_not_lend(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _spares_made(monkeypatch)
    out = list(hr.Dataset.range(64 * 3).map(lambda i: np.full(SHAPE, i, np.float32))
               .batch(64, num_parallel_calls=2))
    assert made == [] and len(out) == 3
    np.testing.assert_array_equal(out[2][:, 0, 0, 0], np.arange(128, 192, dtype=np.float32))


def test_each_epoch_of_a_repeat_closes_its_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _spares_made(monkeypatch)
    # (a budget of its own: the process budget's total also counts what earlier tests' pipelines left)
    ds = (hr.Dataset.range(64 * 3).map(lambda i: np.full(SHAPE, i, np.float32)).batch(64).repeat(4).prefetch(1)
          .with_options(hr.Options(memory_budget="512MiB")))
    with iter(ds) as it:
        sums = [float(b[:, 0, 0, 0].sum()) for b in it]
    assert sums == [float(np.arange(64 * j, 64 * (j + 1)).sum()) for j in range(3)] * 4
    budget = made[0]._account.budget
    assert budget is not process_budget()
    assert len(made) == 4 and all(s._closed for s in made)
    assert budget.reclaimers == [] and budget.total_bytes == 0


def test_two_large_leaves_share_one_reservation_and_keep_their_values(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _spares_made(monkeypatch)
    ds = (hr.Dataset.range(64 * 8)
          .map(lambda i: {"a": np.full(SHAPE, i, np.float32), "b": np.full((32, 32, 4), -i, np.float32)})
          .batch(64).with_options(hr.Options(memory_budget="64MiB")))
    with iter(ds) as it:
        for j, b in enumerate(it):
            expected = np.arange(64 * j, 64 * (j + 1), dtype=np.float32)
            np.testing.assert_array_equal(b["a"][:, 3, 4, 1], expected)
            np.testing.assert_array_equal(b["b"][:, 5, 6, 2], -expected)
        del b
        stats = it.memory_stats()
    assert made[0].lent == 16 and made[0].reused >= 8  # both leaves recycled
    assert stats["peak_bytes"] <= 64 << 20 and stats["overdraft_bytes"] == 0
