"""A bounded, checkpointable thread pool applying a function to an input iterator's elements, and the stage
around it (:class:`PoolIterator`).

Used by parallel ``map``, ``prefetch`` (one worker, identity), parallel ``batch`` and ``interleave``'s slots.
:class:`ParallelApplier` is one object assembled from one part per concern, each in its module of this
package, sharing the fields listed in ``fields`` so that the per-element paths read them without a call:
``order`` (the results window and the consumer's ``next()``), ``steps`` (pull, apply, advance: one home
each), ``workers`` (threads, reservations, executor calls, shutdown), ``inline`` (``set_workers(0)``: the
consumer's thread computes), ``snapshots`` (input snapshots, ``state()``, ``restore()``), ``stats``.
``set_workers(n)`` and ``set_window(n)`` (the tuner) keep the state exact: sequence numbers, snapshots and
ordering are the same whoever computes an element. Ordering, snapshots and the inline path, with a picture:
docs/design/pool.md.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._memory import StageAccount
from ..._sync import Lock as TimedLock
from ..replay import replays_in_order
from ..stage import Stage
from ..stage_support import check_state
from ..tuning.knobs import (
    MAX_BUFFER,
    MAX_WINDOW,
    MAX_WORKERS,
    KnobKind,
    StageStats,
    StageTuning,
    stage_tuning,
    workers_start_reason,
)
from .executor import Executor, ExecutorKind, ThreadExecutor
from .inline import InlinePath
from .order import LEAN_TIMING_EVERY, ResultsWindow
from .snapshots import RESTORE_WAIT_S, InputSnapshots
from .stats import PoolStats, summarize
from .steps import ElementSteps
from .workers import WorkerThreads

if TYPE_CHECKING:
    from ..context import IteratorContext

__all__ = ["LEAN_TIMING_EVERY", "RESTORE_WAIT_S", "SNAPSHOT_EVERY", "ParallelApplier", "PoolIterator", "PoolStats"]

SNAPSHOT_EVERY = 16
"""Pulls between two snapshots of the input's state (restore re-reads at most this many elements)."""


class ParallelApplier:
    """Apply ``fn`` to elements of ``source`` in ``num_workers`` threads (see the module docstring).

    ``identity``: ``fn`` returns its input (prefetch): a worker reserves one element, not two.
    ``runs=False``: a worker takes one element at a time, never a run (docs/design/pool.md: runs), for a
    stage whose one pull is long (a prefetch of batches: a run would hold finished batches back).
    ``input_charged``: the input's bytes are already held in another account, released by
    ``release_input(x)`` once ``fn(x)`` returned (parallel batch); the reservation covers the output only.
    ``refill_at`` (default ``window - 1``): a worker waiting for room is woken only once the elements in
    flight have dropped to this many, so a fast producer refills the window in bursts.
    ``record_state=False`` skips the input snapshots for stages that never checkpoint.
    ``window`` may be a callable (re-read at every check): the read-ahead of an interleave slot depends
    on how many slots share the budget. ``urgent_when_waited``: a reservation is urgent only while the
    consumer waits on this pool (interleave slots share one account; only the slot the consumer waits on
    may use its headroom).

    Its parts, each writing only its own fields: :attr:`window` (:class:`ResultsWindow`: sequence numbers,
    results, ordering, the consumer's ``next()`` and its lean path), :attr:`workers`
    (:class:`WorkerThreads`), :attr:`inline` (:class:`InlinePath`), :attr:`snapshots`
    (:class:`InputSnapshots`: state and restore) and :attr:`steps` (:class:`ElementSteps`: pull and apply).
    """

    def __init__(self, source: Stage, fn: Callable[[Any], Any], *, num_workers: int,
                 window: int | Callable[[], int], deterministic: bool, account: StageAccount, stage: str,
                 thread_name: str, index_base: int = 0, identity: bool = False, input_charged: bool = False,
                 release_input: Callable[[Any], None] | None = None, record_state: bool = True,
                 refill_at: int | Callable[[], int] | None = None, snapshot_every: int | None = None,
                 urgent_when_waited: bool = False, headroom: bool | None = None,
                 executor: Executor | None = None, runs: bool = True) -> None:
        self.source = source
        self.fn = fn
        self.executor: Executor = executor if executor is not None else ThreadExecutor(fn)
        self.num_workers = num_workers
        self.active = num_workers      # workers taking elements now (0: inline in the consumer's thread)
        self.account = account
        self.stage = stage
        self.thread_name = thread_name
        self.identity = identity
        self.takes_runs = runs
        self.input_charged = input_charged
        self.release_input = release_input
        self.delivers_as: Any = self  # the iterator a reader above pulls from (PoolIterator sets itself)
        input_replays = replays_in_order(source)
        self.input_lock = TimedLock(f"{stage} input")  # held around source.__next__ (timed acquisitions)
        self.raw_input_lock = self.input_lock.raw  # the inline path's untimed try (see ResultsWindow.next_lean)
        # Out-of-order delivery is checkpointed as "these positions after the prefix were delivered", which
        # only names the right elements if the input replays them in the same order. Below another
        # deterministic=False stage it does not, so this stage delivers in order (its output order is
        # unpredictable anyway; tf.data's deterministic=False allows it).
        self.window = ResultsWindow(self, window, refill_at, deterministic or not input_replays,
                                    (deterministic and num_workers > 1) if headroom is None else headroom,
                                    urgent_when_waited)
        self.snapshots = InputSnapshots(self, record_state,
                                        snapshot_every or (SNAPSHOT_EVERY if input_replays else 1))
        self.workers = WorkerThreads(self)
        self.inline = InlinePath(self)
        self.steps = ElementSteps(self)
        for part in (self.window, self.snapshots, self.workers, self.steps):
            part.wire()
        # the consumer's calls go to the window directly (PoolIterator binds ``next`` once)
        self.next: Callable[[], Any] = self.window.next
        self.has_ready: Callable[[], bool] = self.window.has_ready
        self.started_s = time.monotonic()
        self.reset(index_base, self.snapshots.base_state, 0, [])

    def reset(self, index_base: int, base_state: Any, forward: int, skip: list[int]) -> None:
        """A new run from ``base_state`` (then ``forward`` more input elements), ``skip`` offsets to drop."""
        self.window.reset(index_base, skip)
        self.snapshots.reset(base_state, forward)
        self.workers.reset()

    @property
    def deterministic(self) -> bool:
        """Whether results come in input order (also below another ``deterministic=False`` stage)."""
        return self.window.deterministic

    @property
    def record_state(self) -> bool:
        return self.snapshots.record_state

    def set_workers(self, n: int) -> None:
        """Run with ``n`` workers from now on (0: inline, in the consumer's thread)."""
        n = max(0, int(n))
        window = self.window
        with window.cv:
            self.active = n
            if n:
                window.leave_lean()
            if self.workers.started:
                self.workers.ensure_threads(n)
            window.notify_all()
        if n > 0:
            self.executor.set_workers(n)

    def set_window(self, n: int) -> None:
        """At most ``n`` elements in flight from now on."""
        self.window.set_window(n)

    def state(self) -> dict[str, Any]:
        return self.snapshots.state()

    def restore(self, state: dict[str, Any]) -> None:
        self.snapshots.restore(state)

    def delivered_epoch(self) -> int:
        return self.snapshots.delivered_epoch()

    def signal_stop(self) -> None:
        self.workers.signal_stop()

    def join(self, deadline: float) -> None:
        self.workers.join(deadline)

    def alive_threads(self) -> list[threading.Thread]:
        return self.workers.alive_threads()

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop, join (``timeout_s``), drop held results and start a new generation."""
        self.workers.stop(timeout_s)

    def stats(self) -> dict[str, Any]:
        """:meth:`stage_stats` by name."""
        return dataclasses.asdict(self.stage_stats())

    def stage_stats(self) -> StageStats:
        """The counters (:class:`PoolStats` summed over the workers and the inline calls) and settings
        (``headrace._engine.pool.stats``)."""
        window, workers = self.window, self.workers
        return summarize(workers.stats, len(workers.threads), self.inline.stats, active=self.active,
                         window=window.size, consumer_wait_s=window.consumer_wait_s, delivered=window.delivered,
                         delivered_bytes=window.delivered_bytes, started_s=self.started_s)


class PoolIterator(Stage):
    """The stage around a :class:`ParallelApplier` (parallel map, prefetch, parallel batch, interleave slots).

    ``account``: a shared account (interleave slots share their stage's); without it the stage opens its
    own with a demand of ``window`` elements. Other keywords go to :class:`ParallelApplier`.
    """

    def __init__(self, ctx: IteratorContext, source: Stage, fn: Callable[[Any], Any], stage: str, workers: int,
                 deterministic: bool, *, kind: str, window: int | Callable[[], int],
                 account: StageAccount | None = None, warn_shrink: bool = True, autotune: bool = False,
                 **pool_options: Any) -> None:
        super().__init__(ctx)
        self.kind = kind
        self.stage = stage
        self.autotune = autotune
        self._source = source
        self._owns_account = account is None
        if account is None:
            demand = window if isinstance(window, int) else None
            account = ctx.account(stage, demand)
            account.warn_shrink = warn_shrink
        self._account = account
        self._deterministic = deterministic
        self._pool = ParallelApplier(source, fn, num_workers=workers, window=window, deterministic=deterministic,
                                     account=account, stage=stage, thread_name=stage, **pool_options)
        # the stage downstream binds ``source.__next__`` once (UnaryIterator): give it the pool's directly
        self.__next__ = self._pool.next  # type: ignore[method-assign]
        self._pool.delivers_as = self
        self.reorders = not self._pool.deterministic  # (replay's rule 1)
        self._tuning: StageTuning | None = None
        if autotune and ctx.options.autotune_enabled is not False:
            self._tune(ctx, workers, window)

    # ---- AUTOTUNE (headrace._engine.tuning.tuner) ------------------------------------------------------------
    def _tune(self, ctx: IteratorContext, workers: int, window: int | Callable[[], int]) -> None:
        t = stage_tuning(ctx, self.stage, self.kind)
        if self.kind == "prefetch":
            t.knob(KnobKind.BUFFER, int(window) if isinstance(window, int) else 1, 0, MAX_BUFFER,
                   f"AUTOTUNE start: {window} elements")
        else:
            executor = self._pool.executor
            t.executor = executor
            hi = ctx.cpu_budget if executor.kind is ExecutorKind.PROCESS else MAX_WORKERS
            if ctx.options.max_parallelism:
                hi = min(hi, ctx.options.max_parallelism)
            taken = 0
            if KnobKind.WORKERS not in t.knobs:  # the first stage made takes from what is left of the CPU budget
                taken = sum(k.value for u in list(ctx.tree.tunings.values()) for k in u.knobs.values() if k.compute)
                workers = max(0, min(workers, ctx.cpu_budget - taken))
            why = workers_start_reason(workers, ctx.cpu_budget, ctx.options.cpu_budget is not None, taken=taken)
            t.knob(KnobKind.WORKERS, workers, 0, hi, why, compute=True)
            if isinstance(window, int):
                t.knob(KnobKind.WINDOW, window, 1, MAX_WINDOW,
                       f"AUTOTUNE start: {window // max(1, workers)} per worker")
        self._tuning = t
        t.start(self)

    def apply_knob(self, kind: KnobKind, value: int, *, start: bool = False) -> None:
        """Set ``kind`` to ``value`` (the tuner thread; ``start``: its starting value, while building)."""
        pool = self._pool
        if kind is KnobKind.WORKERS:
            pool.set_workers(value)
        elif kind is KnobKind.WINDOW:
            pool.set_window(value)
            if self._owns_account:
                self._account.set_demand(value, start=start)
        elif kind is KnobKind.BUFFER:
            pool.set_workers(1 if value > 0 else 0)
            if value > 0:
                pool.set_window(value)
                if self._owns_account:
                    self._account.set_demand(value, start=start)

    def tuning_stats(self) -> StageStats:
        return self._pool.stage_stats()

    def __next__(self) -> Any:
        return self._pool.next()

    @property
    def pool(self) -> ParallelApplier:
        return self._pool

    @property
    def account(self) -> StageAccount:
        return self._account

    def has_ready(self) -> bool:
        return self._pool.has_ready()

    def delivers_charged(self) -> bool:
        """Results are charged until taken, except on the inline path (no workers: ``headrace._handoff``)."""
        return self._pool.active > 0

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, **self._pool.state()}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        self._pool.restore(state)

    def replay_epoch(self) -> int:
        snapshots = self._pool.snapshots  # (asked per element by the stage above: no delegation here)
        if not snapshots.record_state:
            return super().replay_epoch()
        # nothing to count since it was last asked: what delivered_epoch() would return, without the call
        return snapshots.delivered_epoch() if snapshots.events or snapshots.epoch_stale else snapshots.epoch_out

    def _signal_self(self) -> None:
        self._pool.signal_stop()

    def _own_threads(self) -> list[threading.Thread]:
        return self._pool.alive_threads()

    def _close_self(self) -> None:
        if self._tuning is not None:
            self._tuning.remove(self)
        self._pool.stop(timeout_s=0.0)
        if self._owns_account:
            self._account.close()

    def _children(self) -> list[Stage]:
        return [self._source]
