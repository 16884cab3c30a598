"""The inline path of a parallel stage (``headrace._engine.pool.parallel``): ``set_workers(0)`` runs the stage in the
consumer's thread.

Once nothing is in flight, the consumer pulls and applies ``fn`` itself (no hand-off: cheaper than a thread
for cheap functions; like the sequential stage, nothing is reserved then). AUTOTUNE (``headrace._engine.tuning.tuner``)
picks it for cheap calls. The state stays exact: sequence numbers, snapshots and ordering are the same
whoever computes an element (``headrace._engine.pool.snapshots``: the inline path takes no snapshots, its state
is the input's position).

Two speeds: the general inline path (:meth:`InlinePath._next_inline`: the steps of
``headrace._engine.pool.steps``, skips, read-ahead, the executor's call) and its steady state, the lean path
(:meth:`InlinePath._next_lean`: nothing skipped, read ahead or held, the function called directly, one call
in ``LEAN_TIMING_EVERY`` timed), where a cheap ``map`` that AUTOTUNE runs inline costs about what a
sequential ``map`` does.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ..._memory import Cancelled
from ..._sync import Flag
from ..stage_support import note_error
from .executor import ExecutorKind
from .fields import PoolFields
from .stats import PoolStats

LEAN_TIMING_EVERY = 8
"""The lean path times one call in this many; that one stands for them all."""
LEAN_TIMING_MASK = LEAN_TIMING_EVERY - 1


class InlinePath(PoolFields):
    """The consumer-thread paths of :class:`~headrace._engine.pool.parallel.ParallelApplier`
    (a part: its fields are listed in ``fields``)."""

    def _init_inline(self) -> None:
        self._inline_direct = self.executor.kind is ExecutorKind.THREAD  # see _inline_call
        self._inline_stats = PoolStats()
        self._lean = False

    def _next_inline(self) -> Any:
        """Pull and apply in the consumer's thread (``active == 0``, nothing in flight), as a sequential
        stage does: no reservation, no snapshots (``state()`` asks the input for its position instead, which
        is exact since nothing is in flight; a worker taking over snapshots first), the same sequence
        numbers and skips. No worker claims or finishes an element meanwhile (they are parked; a number is
        claimed under the input lock), so the prefix moves without the results lock.

        This is the path AUTOTUNE picks for cheap calls, so it is kept lean: an untimed try of the input
        lock first, the function called directly once the executor settled on threads."""
        stop = self._stop
        stats = self._inline_stats
        source = self.source
        raw_lock = self._raw_input_lock
        while True:
            if not raw_lock.acquire(False) and not self._acquire_input(stop):
                raise Cancelled()
            error = None
            try:
                if self._epoch_stale:
                    self._sync_lean_epoch()
                if self._end_seq is not None:
                    raise StopIteration
                seq = self._next_seq
                self._next_seq = seq + 1
                self._inline_dirty = True
                try:
                    x = self._next_input(seq)
                except StopIteration:
                    raise
                except Exception as e:
                    x, error = None, e
                if self.record_state and seq >= self._prepull_end:
                    # a replay event below (see delivered_epoch): this element is delivered now, in order
                    epoch = source.replay_epoch()
                    if epoch != self._replay_epoch:
                        self._record_event(seq, epoch)
            finally:
                raw_lock.release()
            skipped = bool(self._skip) and seq in self._skip
            value = None
            if skipped:  # delivered before the state this run was restored from
                if error is None and self.release_input is not None:
                    self.release_input(x)
                self._skip.discard(seq)
            elif error is None:
                value, _, error = self._apply(x, seq, stop, stats, inline=True)
                x = None
            if not self._beyond and seq == self._prefix:
                self._prefix = seq + 1
            else:
                with self._cv:
                    self._advance(seq)
            if skipped:
                continue
            self.delivered += 1
            if error is not None:
                try:
                    raise error
                finally:
                    del error
            self._lean = self._may_go_lean()
            return value

    def _may_go_lean(self) -> bool:
        """After an inline element: whether the next ones may take ``_next_lean`` (nothing in flight, held,
        skipped, read ahead or ended; the function called directly; no input to release; not stopping)."""
        return (self.active == 0 and self._inline_direct and self.release_input is None and not self._skip
                and not self._beyond and not self._results and self._end_seq is None
                and self._next_seq == self._prefix and self._next_seq >= self._prepull_end
                and self._crash is None and not self._stop.is_set())

    def _next_lean(self, raw: threading.Lock) -> Any:
        """The inline path in its steady state (``_lean``, entered by ``_next_inline``; the input lock
        ``raw`` is held on entry): no element in flight, held, skipped or read ahead, the function called
        directly. What stays: the sequence numbers and the counters the tuner reads. Any other situation
        (a worker woken, a restore, a stop, the end, an error) leaves it for the general path. A cheap
        ``map`` that AUTOTUNE runs inline costs about what a sequential ``map`` does.

        The replay events below are not looked for per element: every element pulled here is delivered
        before the next pull, so an event among them counts as delivered at once. ``_epoch_stale`` says
        they are due; whoever needs them next (``delivered_epoch``, the general inline path, a worker
        taking over) counts them first (``_sync_lean_epoch``), with the input lock held."""
        source = self.source
        seq = self._next_seq
        try:
            x = source.__next__()
        except StopIteration:
            self._lean = False
            raw.release()
            self._end_at(seq)
            raise
        except Exception:  # the input's element raised: delivered (as the error) in its place
            self._lean = False
            self._next_seq = self._prefix = seq + 1
            self._inline_dirty = self._epoch_stale = True
            raw.release()
            self.delivered += 1
            raise
        except BaseException:  # KeyboardInterrupt, Cancelled: nothing was claimed
            self._lean = False
            raw.release()
            raise
        self._next_seq = self._prefix = seq + 1
        self._inline_dirty = self._epoch_stale = True
        raw.release()
        self.delivered += 1
        stats = self._inline_stats
        calls = stats.calls = stats.calls + 1
        try:
            if calls & LEAN_TIMING_MASK:
                return self.fn(x)
            # one call in LEAN_TIMING_EVERY is timed and stands for them all (the tuner needs the time per
            # call and its CPU share; clock reads per call would cost a tenth of a cheap map's time)
            t1, c1 = time.perf_counter(), time.thread_time()
            try:
                return self.fn(x)
            finally:
                stats.busy_s += (time.perf_counter() - t1) * LEAN_TIMING_EVERY
                stats.cpu_s += (time.thread_time() - c1) * LEAN_TIMING_EVERY
        except Exception as e:
            note_error(e, self.stage, self._index_base + seq)
            raise

    def _inline_call(self, x: Any, seq: int, stop: Flag) -> Any:
        """``fn(x)`` for the inline path: directly once the executor runs calls on threads for good (an
        ``"auto"`` executor that decided on threads: its call would only add layers to the same ``fn``),
        else the executor's call."""
        if self._inline_direct:
            return self.fn(x)
        executor = self.executor
        if executor.kind is ExecutorKind.THREAD:  # final: an "auto" executor never moves on from threads
            self._inline_direct = True
            return self.fn(x)
        return executor.call(x, self._index_base + seq, stop)
