"""Recycled batch output buffers (``headrace._engine.stacking.BufferPool``): same values as ``np.stack``,
and a buffer is reused only once nothing outside the pool refers to the batch it held."""

from __future__ import annotations

import weakref

import numpy as np
import pytest

import headrace as hr
from headrace._engine.stacking import BufferPool, stack

SHAPE = (64, 64, 3)  # float32: 48 KiB per element, 3 MiB per batch of 64 (above BufferPool.MIN_BYTES)


def _elements(n: int, start: int = 0) -> list[np.ndarray]:
    return [np.full(SHAPE, start + i, np.float32) for i in range(n)]


def test_released_buffer_is_reused_and_held_one_is_not() -> None:
    pool = BufferPool()
    first = stack(_elements(64), "batch", pool)
    np.testing.assert_array_equal(first, np.stack(_elements(64)))
    held = stack(_elements(64, 100), "batch", pool)
    assert held is not first
    ref = weakref.ref(first)
    del first
    third = stack(_elements(64, 200), "batch", pool)
    assert third is ref()  # the released buffer, refilled
    np.testing.assert_array_equal(third, np.stack(_elements(64, 200)))
    np.testing.assert_array_equal(held, np.stack(_elements(64, 100)))  # untouched while held


def test_a_view_keeps_its_batch_from_being_reused() -> None:
    pool = BufferPool()
    batch = stack(_elements(64), "batch", pool)
    row = batch[3]
    ref = weakref.ref(batch)
    del batch
    nxt = stack(_elements(64, 500), "batch", pool)
    assert nxt is not ref()
    np.testing.assert_array_equal(row, np.full(SHAPE, 3, np.float32))


def test_pipeline_batches_kept_by_the_user_stay_intact() -> None:
    n = 64 * 6 + 5
    ds = hr.Dataset.range(n).map(lambda i: np.full(SHAPE, i, np.float32)).batch(64).prefetch(2)
    kept = list(ds)
    assert [len(b) for b in kept] == [64] * 6 + [5]
    for j, b in enumerate(kept):
        expected = np.arange(64 * j, min(64 * (j + 1), n), dtype=np.float32)
        np.testing.assert_array_equal(b[:, 0, 0, 0], expected)
        np.testing.assert_array_equal(b[:, -1, -1, -1], expected)


def test_pipeline_streaming_batches_have_the_right_values() -> None:
    ds = hr.Dataset.range(64 * 8).map(lambda i: np.full(SHAPE, i, np.float32)).batch(64)
    for j, b in enumerate(ds):  # each batch dropped before the next: buffers recycled
        np.testing.assert_array_equal(b[:, 1, 2, 0], np.arange(64 * j, 64 * (j + 1), dtype=np.float32))


def test_large_elements_with_different_dtypes_still_raise() -> None:
    items = [*_elements(63), np.zeros(SHAPE, np.float64)]
    with pytest.raises(TypeError, match="dtype float32 in element 0 but float64 in element 63"):
        stack(items, "batch", BufferPool())


def test_large_elements_with_different_shapes_still_raise() -> None:
    items = [*_elements(63), np.zeros((64, 65, 3), np.float32)]
    with pytest.raises(ValueError, match="element 63 has shape"):
        stack(items, "batch", BufferPool())


def test_pool_keeps_at_most_the_reused_idle_buffer():
    from headrace._engine.stacking import BufferPool

    pool = BufferPool()
    col = [np.ones((512, 512), np.float32) for _ in range(4)]
    held = [pool.stack(col, 0) for _ in range(3)]
    assert len(pool._buffers[0]) == 3
    del held  # all three idle now (outside the memory budget)
    again = pool.stack(col, 0)
    assert len(pool._buffers[0]) == 1 and pool._buffers[0][0] is again
    assert np.array_equal(again, np.stack(col))
