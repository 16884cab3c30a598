"""The inline path of a parallel stage (``headrace._engine.pool.parallel``): ``set_workers(0)`` runs the stage in the
consumer's thread.

Once nothing is in flight, the consumer pulls and applies ``fn`` itself (no hand-off: cheaper than a thread
for cheap functions; like the sequential stage, nothing is reserved then). AUTOTUNE picks it for cheap calls.
The state stays exact: sequence numbers, snapshots and ordering are the same whoever computes an element (the
inline path takes no snapshots, its state is the input's position). Its steady state, the lean path, is the
results window's own (``ResultsWindow.next_lean``), entered when :meth:`InlinePath.may_go_lean` says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..._memory import Cancelled
from ..._sync import Flag
from .stats import PoolStats

if TYPE_CHECKING:
    from .parallel import ParallelApplier


class InlinePath:
    """The consumer-thread path of one :class:`~headrace._engine.pool.parallel.ParallelApplier`: ``direct``
    (``fn`` called directly: no executor, or one settled on threads) and the counters of the inline calls."""

    def __init__(self, pool: ParallelApplier) -> None:
        self.pool = pool
        self.direct = pool.executor.final  # see call()
        self.stats = PoolStats()

    def next_inline(self) -> Any:
        """Pull and apply in the consumer's thread (``active == 0``, nothing in flight), as a sequential
        stage does: no reservation, no snapshots (``state()`` asks the input for its position instead, which
        is exact since nothing is in flight; a worker taking over snapshots first), the same sequence
        numbers and skips. No worker claims or finishes an element meanwhile (they are parked; a number is
        claimed under the input lock), so the prefix moves without the results lock.

        This is the path AUTOTUNE picks for cheap calls, so it is kept lean: an untimed try of the input
        lock first, the function called directly once the executor settled on threads."""
        pool = self.pool
        window, snapshots, steps, workers = pool.window, pool.snapshots, pool.steps, pool.workers
        stop = workers.stop_flag
        stats = self.stats
        source = pool.source
        raw_lock = pool.raw_input_lock
        while True:
            if not raw_lock.acquire(False) and not workers.acquire_input(stop):
                raise Cancelled()
            error: BaseException | None = None
            try:
                if snapshots.epoch_stale:
                    snapshots.sync_lean_epoch()
                seq = window.claim_inline()
                if not snapshots.inline_dirty:
                    snapshots.mark_inline()
                try:
                    x = steps.next_input(seq)
                except StopIteration:
                    raise
                except Exception as e:
                    x, error = None, e
                if snapshots.record_state and seq >= snapshots.prepull_end:
                    # a replay event below (see delivered_epoch): this element is delivered now, in order
                    epoch = source.replay_epoch()
                    if epoch != snapshots.replay_epoch:
                        snapshots.record_event(seq, epoch)
            finally:
                raw_lock.release()
            skipped = bool(window.skip) and seq in window.skip
            value = None
            if skipped:  # delivered before the state this run was restored from
                if error is None and pool.release_input is not None:
                    pool.release_input(x)
            elif error is None:
                value, _, error = steps.apply(x, seq, stop, stats, inline=True)
                x = None
            window.done_inline(seq, skipped)
            if skipped:
                continue
            if error is not None:
                try:
                    raise error
                finally:
                    del error
            return value

    def may_go_lean(self) -> bool:
        """After an inline element: whether the next ones may take the lean path (nothing in flight, held,
        skipped, read ahead or ended; the function called directly; no input to release; not stopping)."""
        pool = self.pool
        window, workers = pool.window, pool.workers
        return (pool.active == 0 and self.direct and pool.release_input is None and not window.skip
                and not window.beyond and not window.results and window.end_seq is None
                and window.next_seq == window.prefix and window.next_seq >= pool.snapshots.prepull_end
                and workers.crash is None and not workers.stop_flag.is_set())

    def call(self, x: Any, seq: int, stop: Flag) -> Any:
        """``fn(x)`` for the inline path: directly once the executor runs calls on threads for good (an
        ``"auto"`` executor that decided on threads: its call would only add layers to the same ``fn``),
        else the executor's call."""
        pool = self.pool
        if self.direct:
            return pool.fn(x)
        executor = pool.executor
        if executor.final:  # on threads for good: an "auto" executor whose checks are over
            self.direct = True
            return pool.fn(x)
        return executor.call(x, pool.window.index_base + seq, stop)
