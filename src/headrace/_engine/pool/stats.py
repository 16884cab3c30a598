"""The counters of a parallel stage (``headrace._engine.pool.parallel``), which ``Iterator.explain()`` and the
autotuner (``headrace._engine.tuning.tuner``) read.

Per worker thread (:class:`PoolStats`, written by that thread only, no locks; one more for the calls made
inline in the consumer's thread): calls, time inside the function (wall and the thread's CPU time), time
getting input (the input lock and ``source.__next__``), waiting for room in the window, waiting for the memory
budget. On the consumer side: the time it waited for a result and the elements and bytes delivered.
:func:`summarize` sums them into the dict ``ParallelApplier.stats()`` returns.
"""

from __future__ import annotations

import time

from ..tuning.knobs import StageStats


class PoolStats:
    """Counters of one worker thread (written by that thread only; read as sums by :func:`summarize`)."""

    __slots__ = ("budget_s", "busy_s", "calls", "cpu_s", "input_s", "parked_s", "room_s", "t0")

    def __init__(self) -> None:
        self.t0 = time.monotonic()  # when the thread started (reset when a new generation reuses it)
        self.parked_s = 0.0  # parked above the active worker count
        self.calls = 0
        self.busy_s = 0.0   # inside fn / the executor (wall)
        self.cpu_s = 0.0    # the thread's CPU time inside fn
        self.input_s = 0.0  # waiting for the input lock and inside source.__next__
        self.room_s = 0.0   # waiting for room in the window
        self.budget_s = 0.0  # waiting in the memory budget's reserve()


def summarize(workers: list[PoolStats], threads: int, inline: PoolStats, *, active: int, window: int,
              consumer_wait_s: float, delivered: int, delivered_bytes: int, started_s: float) -> StageStats:
    """The counters of ``workers`` (the first ``threads`` of them running now) and of the ``inline`` calls
    summed, with the settings and the consumer's counters; ``worker_time_s``: the time the workers existed
    and were not parked (the denominator of shares)."""
    parts = [*workers, inline]
    now = time.monotonic()
    span = sum(now - p.t0 - p.parked_s for p in workers[:threads])
    span += inline.busy_s + inline.input_s  # the consumer's thread, while it computed inline
    return StageStats(
        workers=active, threads=threads, window=window, worker_time_s=span,
        calls=sum(p.calls for p in parts), busy_s=sum(p.busy_s for p in parts),
        cpu_s=sum(p.cpu_s for p in parts), input_s=sum(p.input_s for p in parts),
        room_s=sum(p.room_s for p in parts), budget_s=sum(p.budget_s for p in parts),
        consumer_wait_s=consumer_wait_s, delivered=delivered,
        delivered_bytes=delivered_bytes, elapsed_s=now - started_s)
