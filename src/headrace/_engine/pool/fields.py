"""The fields of a parallel stage's pool (``headrace._engine.pool.parallel.ParallelApplier``), in one place, with the
part that owns (sets up and resets) each.

The pool is one object whose code is split by concern into parts (mixins, one module each: ``order``,
``steps``, ``workers``, ``inline``, ``snapshots``); the parts read each other's fields
directly, because the per-element paths (the worker loop, the inline and lean paths) must not pay a call or an
indirection per element. Every part derives from :class:`PoolFields`, so the whole state is listed here.
Locks: ``_cv`` (the results lock, with ``_room`` on it) guards the window's fields between threads; the input
lock (``_input_lock``) is held around ``source.__next__`` and every snapshot of the input.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..._memory import Policy, StageAccount
    from ..._sync import Condition, Flag
    from ..._sync import Lock as TimedLock
    from ..stage import Stage
    from .executor import Executor
    from .stats import PoolStats


class Result:
    """One sequence number's outcome: its value and bytes, or its error."""

    __slots__ = ("error", "nbytes", "value")

    def __init__(self, value: Any, n: int, error: BaseException | None) -> None:
        self.value = value
        self.nbytes = n
        self.error = error


class PoolFields:
    """The pool's fields (annotations only: each part sets its own in its ``_init_*`` / ``_reset_*``)."""

    # ---- the pool itself (parallel.ParallelApplier.__init__) ---------------------------------------------
    source: Stage
    fn: Callable[[Any], Any]
    executor: Executor                # headrace._engine.pool.executor (ThreadExecutor(fn): fn on the worker threads)
    num_workers: int
    active: int                       # workers taking elements now (0: inline in the consumer's thread)
    account: StageAccount
    stage: str
    thread_name: str
    identity: bool                    # fn returns its input (prefetch)
    input_charged: bool               # the input's bytes are held by another account (parallel batch)
    release_input: Callable[[Any], None] | None
    started_s: float
    _input_lock: TimedLock            # held around source.__next__ (timed acquisitions)
    _raw_input_lock: threading.Lock   # the inline path's untimed try
    _started: bool                    # the worker threads were started (first next())

    # ---- the results window and ordering (order) --------------------------------------------------------
    deterministic: bool
    headroom: bool
    urgent_when_waited: bool
    delivers_as: Any                  # the iterator a reader above pulls from (PoolIterator sets itself)
    _window: int | Callable[[], int]
    _window_set: int | None
    _refill_at: int | Callable[[], int] | None
    _cv: Condition                    # the consumer waits here for a result
    _room: Condition                  # a worker (holding the input lock) waits here for room
    _consumer_waiting: bool
    _waiter_urgent: Callable[[], bool] | None
    _room_waiting: bool
    consumer_wait_s: float
    delivered: int
    delivered_bytes: int
    _index_base: int                  # the element index of sequence number 0
    _next_seq: int                    # next sequence number to claim
    _end_seq: int | None              # set when the input is exhausted
    _results: dict[int, Result]       # computed, waiting for the consumer
    _prefix: int                      # every seq < prefix was delivered (or skipped)
    _beyond: set[int]                 # delivered or skipped seq beyond the prefix
    _skip: set[int]                   # seq to drop (restored out-of-order deliveries)
    _barrier: int | None              # out-of-order delivery stops here until the prefix passes it

    # ---- the worker threads (workers) -------------------------------------------------------------------
    _threads: list[threading.Thread]
    _stale: list[threading.Thread]    # threads of stopped generations still inside user code
    _stop: Flag                       # this generation's stop event
    _gen: int
    _crash: BaseException | None      # a defect in the pool's machinery, re-raised to the consumer
    _in_max: int                      # the largest input seen (the reservation's input part)
    _policy: Policy                   # the workers' kind of reservation (READ_AHEAD, with headroom or not)
    _top_up_policy: Policy            # a reservation taken on a guess, topped up once the probe sized it
    _worker_stats: list[PoolStats]

    # ---- the inline and lean paths (inline) -------------------------------------------------------------
    _inline_direct: bool              # fn called directly inline (no executor, or one settled on threads)
    _inline_stats: PoolStats
    _lean: bool                       # the inline path's steady state

    # ---- snapshots, replay events, restore (snapshots) --------------------------------------------------
    record_state: bool
    _every: int                       # pulls between two snapshots
    _replay_epoch: int                # the input's replay_epoch() as last seen
    _events: deque[tuple[int, int]]   # (seq, epoch increase) of replay events not delivered
    _epoch_out: int                   # replay events among the delivered elements
    _snaps: dict[int, tuple[Any, int]]  # position -> (input state, forward)
    _prepulled: dict[int, Result]     # seq -> input element read by restore()
    _prepull_end: int                 # the input is this many elements ahead of seq 0 while any are left
    _inline_dirty: bool               # inline calls since the last snapshot
    _epoch_stale: bool                # replay events below not counted yet (the lean path)
