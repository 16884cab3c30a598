"""A bounded, checkpointable thread pool applying a function to an input iterator's elements.

Used by parallel ``map``, ``prefetch`` (one worker, identity) and parallel ``batch``.

Invariants ("bounded work in flight", as torchdata's ``_SingleThreadedMapper``, in bytes as well as count):

- elements pulled from the input but not yet handed to the consumer: at most ``window``;
- every such element is covered by the stage's memory account *before it exists*: a worker reserves the
  stage's estimate (its input's largest size plus its output's largest size) before it pulls, settles the
  reservation to the real output size when ``fn`` returns, and the result holds its bytes until the
  consumer takes it (see ``headrace._memory``). Results waiting for the consumer are therefore counted,
  and so is the input a worker holds while ``fn`` runs.

Ordering: ``deterministic=True`` delivers in input order (sequence numbers); otherwise in completion order,
except below another ``deterministic=False`` stage, where it delivers in order (see ``__init__``: the
out-of-order part of a checkpoint names positions, which only a replaying input can honour).
Ordered pools with several workers keep one element of headroom in their share of the budget for the
element the consumer waits for (``urgent``), so results that finished early cannot starve it.

State: the input's state is snapshotted every ``snapshot_every`` pulls (every pull when the input does not
replay deterministically). The state after delivering a prefix of *p* sequence numbers is "the snapshot at
or before *p*, then ``forward`` more input elements", plus the offsets delivered beyond the prefix
(out-of-order delivery), which the restored stage skips: exactly-once either way, at a fraction of the
cost of asking the input for its state per element. A restore with such offsets reads the input up to the
last of them while ``set_state`` runs (the elements are held, charged, until workers take them): a stage
below may change how it produces elements once the restore is over (a shuffle capping its buffer to the
budget), and the skipped positions must name what the saved run delivered (found by ``bench/promises.py``:
``shuffle -> prefetch(AUTOTUNE) -> map(deterministic=False)`` lost and repeated an element).

Errors: an exception from the input or from ``fn`` is stored as that sequence number's result and
re-raised by the consumer at its position, with a note naming the stage and element; the stage stays
usable afterwards. An exception in the pool's own machinery is re-raised to the consumer too.

Run-time settings (the autotuner, ``headrace._ops.tuner``): ``set_workers(n)`` changes how many workers
take elements (threads are started when needed; those above ``n`` park, holding nothing); ``n = 0`` runs
the stage *inline*: once nothing is in flight, the consumer pulls and applies ``fn`` itself (no hand-off:
cheaper than a thread for cheap functions; like the sequential stage, nothing is reserved then).
``set_window(n)`` changes the elements in flight. Both keep the state exact: sequence numbers, snapshots
and ordering are the same whoever computes an element.

Executor: with ``executor`` (``headrace._ops.executor``: worker processes or ``"auto"``) a worker thread
calls ``executor.call(x, index, stop)`` instead of ``fn(x)``; the reservation adds
``executor.extra_bytes(out)`` (a process call holds one more copy of the output).

Counters (:class:`PoolStats`, per worker thread, no locks): calls, time inside the function (wall and
the thread's CPU time), time getting input (the input lock and ``source.__next__``), waiting for room in
the window, waiting for the memory budget; on the consumer side the time it waited for a result and the
elements and bytes delivered. ``Iterator.explain()`` and the autotuner read them.

Shutdown: ``signal_stop()`` sets the generation's stop event and wakes every waiter (never blocks);
``join(deadline)`` joins the threads; ``alive_threads()`` lists those still inside user code after it.
Every wait is a timed wait that re-checks the stop event. ``restore()`` stops the workers and waits (timed)
for one still inside the input to leave it before it resets the input under the input lock, so a stale
worker can neither pull from the restored input nor end the new run.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .._errors import MemoryBudgetError, StateError
from .._handoff import delivers_charged, hand_off, pulling_for, taking, waiter_urgency
from .._memory import WAIT_SLICE_S, Cancelled, StageAccount
from .._structure import nbytes
from .._sync import Condition, Flag
from .._sync import Lock as TimedLock
from .base import DatasetIterator, check_state, detached, join_threads, mark_crash, note_error, start_thread
from .tuner import MAX_BUFFER, MAX_WINDOW, MAX_WORKERS, stage_tuning, workers_start_reason

SNAPSHOT_EVERY = 16
"""Pulls between two snapshots of the input's state (restore re-reads at most this many elements)."""
RESTORE_WAIT_S = 60.0
"""How long ``set_state`` waits for a worker stuck in the input (a slow user function) to leave it."""


LEAN_TIMING_EVERY = 8
LEAN_TIMING_MASK = LEAN_TIMING_EVERY - 1


class PoolStats:
    """Counters of one worker thread (written by that thread only; read as sums by :meth:`ParallelApplier.stats`)."""

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


class _Result:
    __slots__ = ("error", "nbytes", "value")

    def __init__(self, value: Any, n: int, error: BaseException | None) -> None:
        self.value = value
        self.nbytes = n
        self.error = error


def replays_deterministically(it: DatasetIterator) -> bool:
    """Whether re-reading ``it`` after ``set_state`` yields the same elements in the same order."""
    probe = getattr(it, "replays_deterministically", None)
    return True if probe is None else bool(probe())


def fast_forward(it: DatasetIterator, n: int) -> None:
    """Advance ``it`` by ``n`` positions, an element that raises counting as one (it did the first time)."""
    skip = getattr(it, "skip_ahead", None)
    if skip is not None:
        skip(n)
        return
    for _ in range(n):
        try:
            it.__next__()
        except StopIteration:
            return
        except Exception:
            continue


class ParallelApplier:
    """Apply ``fn`` to elements of ``source`` in ``num_workers`` threads (see the module docstring).

    ``identity``: ``fn`` returns its input (prefetch): a worker reserves one element, not two.
    ``input_charged``: the input's bytes are already held in another account, released by
    ``release_input(x)`` once ``fn(x)`` returned (parallel batch); the reservation covers the output only.
    ``refill_at`` (default ``window - 1``): a worker waiting for room is woken only once the elements in
    flight have dropped to this many, so a fast producer refills the window in bursts.
    ``record_state=False`` skips the input snapshots for stages that never checkpoint.
    ``window`` may be a callable (re-read at every check): the read-ahead of an interleave slot depends
    on how many slots share the budget. ``urgent_when_waited``: a reservation is urgent only while the
    consumer waits on this pool (interleave slots share one account; only the slot the consumer waits on
    may use its headroom).
    """

    def __init__(self, source: DatasetIterator, fn: Callable[[Any], Any], *, num_workers: int,
                 window: int | Callable[[], int], deterministic: bool, account: StageAccount, stage: str,
                 thread_name: str, index_base: int = 0, identity: bool = False, input_charged: bool = False,
                 release_input: Callable[[Any], None] | None = None, record_state: bool = True,
                 refill_at: int | Callable[[], int] | None = None, snapshot_every: int | None = None,
                 urgent_when_waited: bool = False, headroom: bool | None = None, executor: Any = None) -> None:
        self.source = source
        self.fn = fn
        self.executor = executor
        self._inline_direct = executor is None  # see _inline_call
        self.num_workers = num_workers
        self.active = num_workers      # workers taking elements now (0: inline in the consumer's thread)
        self._window = window
        self._window_set: int | None = None
        self._refill_at = refill_at
        input_replays = replays_deterministically(source)
        # Out-of-order delivery is checkpointed as "these positions after the prefix were delivered", which
        # only names the right elements if the input replays them in the same order. Below another
        # deterministic=False stage it does not, so this stage delivers in order (its output order is
        # unpredictable anyway; tf.data's deterministic=False allows it).
        self.deterministic = deterministic or not input_replays
        self.headroom = (deterministic and num_workers > 1) if headroom is None else headroom
        self.urgent_when_waited = urgent_when_waited
        self.account = account
        self.stage = stage
        self.thread_name = thread_name
        self.identity = identity
        self.input_charged = input_charged
        self.release_input = release_input
        self.record_state = record_state
        self.delivers_as: Any = self  # the iterator a reader above pulls from (PoolIterator sets itself)
        self._cv = Condition(f"{stage} results")            # the consumer waits here for a result
        self._room = Condition(f"{stage} room", self._cv.lock)  # a worker (holding the input lock) waits for room
        self._consumer_waiting = False
        self._waiter_urgent: Callable[[], bool] | None = None  # the waiting consumer's own urgency (_handoff)
        self._room_waiting = False
        self._input_lock = TimedLock(f"{stage} input")  # held around source.__next__ (timed acquisitions)
        self._raw_input_lock = self._input_lock.raw  # the inline path's untimed try (see _next_lean)
        self._threads: list[threading.Thread] = []
        self._stale: list[threading.Thread] = []  # threads of stopped generations still inside user code
        self._stop = Flag()
        self._gen = 0
        self._crash: BaseException | None = None
        self._in_max = 0
        base_state: Any = None
        if record_state:
            try:
                base_state = source.get_state()
            except NotImplementedError:
                self.record_state = False
        self._every = snapshot_every or (SNAPSHOT_EVERY if input_replays else 1)
        self._replay_epoch = source.replay_epoch() if self.record_state else 0
        self._worker_stats: list[PoolStats] = []
        self._inline_stats = PoolStats()
        self.consumer_wait_s = 0.0
        self.delivered = 0
        self.delivered_bytes = 0
        self.started_s = time.monotonic()
        self._events: deque[tuple[int, int]] = deque()  # (seq, epoch increase) of replay events not delivered
        self._prepulled: dict[int, _Result] = {}  # seq -> input element read by restore() (see _prepull)
        self._epoch_out = 0  # replay events among the delivered elements (what a downstream stage sees)
        self._reset_counters(index_base, base_state, 0, [])

    # ---- bookkeeping -------------------------------------------------------------------------------
    def _reset_counters(self, index_base: int, base_state: Any, forward: int, skip: list[int]) -> None:
        self._index_base = index_base
        self._next_seq = 0            # next sequence number a worker will claim
        self._end_seq: int | None = None  # set when the input is exhausted
        self._results: dict[int, _Result] = {}
        self._prefix = 0              # every seq < prefix was delivered (or skipped)
        self._beyond: set[int] = set()   # delivered or skipped seq beyond the prefix
        self._skip = set(skip)        # seq to drop (restored out-of-order deliveries)
        self._snaps: dict[int, tuple[Any, int]] = {0: (base_state, forward)}  # position -> (state, forward)
        self._drop_prepulled()
        self._prepull_end = 0         # the input is this many elements ahead of seq 0 while any are left
        self._barrier: int | None = None  # out-of-order delivery stops at this seq until the prefix passes it
        self._events.clear()
        self._started = False
        self._inline_dirty = False  # inline calls since the last snapshot (see _next_inline)
        self._lean = False  # the inline path's steady state (see _next_lean)
        self._epoch_stale = False  # replay events below not counted yet (see _next_lean)

    def _start(self) -> None:
        self._started = True
        self._ensure_threads(self.active)

    def _ensure_threads(self, n: int) -> None:
        """Threads 0..n-1 of this generation exist (a thread parks while its index >= ``active``)."""
        gen, stop = self._gen, self._stop
        while len(self._threads) < n:
            i = len(self._threads)
            while len(self._worker_stats) <= i:
                self._worker_stats.append(PoolStats())
            stats = self._worker_stats[i]
            stats.t0, stats.parked_s = time.monotonic(), 0.0
            self._threads.append(start_thread(f"{self.thread_name}-{i}",
                                              lambda i=i, st=stats: self._work(gen, stop, i, st), stop))

    def set_workers(self, n: int) -> None:
        """Run with ``n`` workers from now on (0: inline, in the consumer's thread)."""
        n = max(0, int(n))
        with self._cv:
            self.active = n
            if n:
                self._lean = False
            if self._started:
                self._ensure_threads(n)
            self._notify_all()
        if self.executor is not None and n > 0:
            self.executor.set_workers(n)

    def set_window(self, n: int) -> None:
        """At most ``n`` elements in flight from now on."""
        with self._cv:
            self._window_set = max(1, int(n))
            self._notify_all()

    @property
    def window(self) -> int:
        if self._window_set is not None:
            return self._window_set
        w = self._window
        return max(1, w() if callable(w) else w)

    @property
    def refill_at(self) -> int:
        window = self.window
        r = self._refill_at
        r = r() if callable(r) else r
        return window - 1 if r is None else min(max(r, 0), window - 1)

    def _urgent(self, seq: int) -> Callable[[], bool]:
        if self.urgent_when_waited:
            return lambda: self._consumer_waiting and self._prefix == seq and self._waited_urgently()
        if self.deterministic:
            return lambda: self._prefix == seq
        return lambda: self._consumer_waiting and not self._results and self._waited_urgently()

    def _waited_urgently(self) -> bool:
        """Whether the consumer waiting on this pool pulls for an element its own consumer waits for."""
        w = self._waiter_urgent
        return w is None or w()

    def _need(self, out: int) -> int:
        """The bytes one call holds at once for an output of ``out`` bytes (its input too, unless charged
        elsewhere, and the executor's extra)."""
        ex = self.executor
        extra = ex.extra_bytes(out) if ex is not None else 0
        return out + extra if (self.identity or self.input_charged) else out + extra + self._in_max

    def _estimate(self) -> int:
        need = self._need(self.account.estimate())
        ex = self.executor
        if ex is not None:
            ex.check_fits(need)  # worker processes: one worker and one call must fit the budget
        return need

    def _in_flight(self) -> int:
        return self._next_seq - self._prefix - len(self._beyond)

    # ---- worker side -------------------------------------------------------------------------------
    def _work(self, gen: int, stop: Flag, index: int, stats: PoolStats) -> None:
        try:
            self._work_loop(gen, stop, index, stats)
        except Cancelled:
            return
        except BaseException as e:  # a defect in the pool itself: the consumer must see it, not hang
            with self._cv:
                if gen == self._gen and self._crash is None:
                    self._crash = mark_crash(e)
                self._notify_all()

    def _acquire_input(self, stop: Flag) -> bool:
        while not self._input_lock.acquire(timeout=WAIT_SLICE_S):
            if stop.is_set():
                return False
        return True

    def _park(self, stop: Flag, index: int) -> None:
        """Wait (timed) while this worker is above the active count (``set_workers``)."""
        if index < self.active:
            return
        t0 = time.monotonic()
        with self._cv:
            while index >= self.active and not stop.is_set():
                self._room.wait(WAIT_SLICE_S)
        self._worker_stats[index].parked_s += time.monotonic() - t0

    def _work_loop(self, gen: int, stop: Flag, index: int, stats: PoolStats) -> None:
        cv = self._cv
        clock = time.perf_counter
        while not stop.is_set():
            self._park(stop, index)
            t0 = clock()
            if not self._acquire_input(stop):
                return
            reserved = 0
            opened = False
            try:
                t1 = clock()
                with cv:
                    while (not stop.is_set() and self._end_seq is None and index < self.active
                           and self._in_flight() >= self.window):
                        self._room_waiting = True
                        self._room.wait(WAIT_SLICE_S)
                        self._room_waiting = False
                    if stop.is_set() or self._end_seq is not None:
                        return
                    if index >= self.active:
                        continue  # parked meanwhile: give the input lock back (below) and park
                    seq = self._next_seq
                    self._next_seq += 1
                if self._inline_dirty:
                    self._resnapshot_after_inline(seq)
                t2 = clock()
                estimate = self._estimate()
                # an input that delivers its element charged hands it into this reservation (_handoff):
                # room for it is checked against this stage's share only, not taken from the budget again
                charged = (estimate if self.identity else self._in_max) if (
                    not self.input_charged and delivers_charged(self.source)) else None
                urgent = self._urgent(seq)
                reserved = self.account.reserve(estimate - (charged or 0), stop, urgent=urgent,
                                                headroom=self.headroom, partial=True, charged_in=charged or 0,
                                                speculative=True)
                opened = True
                t3 = clock()
                with pulling_for(urgent):
                    if charged is None:
                        x, error, ended = self._pull(gen, stop, seq)
                    else:
                        with taking(self.account, self.source) as taker:
                            try:
                                x, error, ended = self._pull(gen, stop, seq)
                            finally:
                                reserved += taker.nbytes
                if ended:
                    opened = False
                    self.account.cancel(reserved)
                    reserved = 0
                    return
            except BaseException:
                if opened:
                    self.account.cancel(reserved)
                raise
            finally:
                self._input_lock.release()
            t4 = clock()
            stats.room_s += t2 - t1
            stats.budget_s += t3 - t2
            stats.input_s += (t1 - t0) + (t4 - t3)
            self._finish(gen, stop, seq, x, error, reserved, stats)
            x = error = None  # no reference to the element while this worker waits for room

    def _pull(self, gen: int, stop: Flag, seq: int) -> tuple[Any, BaseException | None, bool]:
        """Input lock held: snapshot if due, pull element ``seq``; ``(x, error, ended)``."""
        source = self.source
        prepulled = seq < self._prepull_end
        if self.record_state and self._every > 1 and seq % self._every == 0 and seq and not prepulled:
            snap = source.get_state()
            with self._cv:
                if gen == self._gen:
                    self._snaps[seq] = (snap, 0)
        try:
            x = self._next_input(seq)
        except StopIteration:
            with self._cv:
                if gen == self._gen and not stop.is_set():
                    self._end_seq = seq
                    self._next_seq = seq
                self._notify_all()
            return None, None, True
        except Exception as e:
            # an element that raised is a position too: a replay event while pulling it counts from it
            if self.record_state and not prepulled:
                self._snapshot_after_replay_event(gen, seq)
            return None, e, False
        if self.record_state and not prepulled:
            self._snapshot_after_replay_event(gen, seq)
        return x, None, False

    def _next_input(self, seq: int) -> Any:
        """Input lock held: element ``seq`` of the input (read ahead by a restore, or pulled now)."""
        if seq >= self._prepull_end:
            return self.source.__next__()
        item = self._prepulled.pop(seq)
        if item.nbytes:
            self.account.adjust(-item.nbytes)
        if item.error is not None:
            error, item = item.error, None
            try:
                raise error
            finally:
                del error
        return item.value

    def _prepull(self, skip: list[int]) -> None:
        """Input lock held, in ``restore``: read the input up to the last skipped offset now, while the
        pipeline is restoring (see the module docstring: State). Held elements are charged (``adjust``: no
        wait, they existed in the saved run too) unless another account holds them (``input_charged``)."""
        if not skip:
            return
        for seq in range(max(skip) + 1):
            self._prepull_end = seq + 1  # an element that raised was read too: the input is past it
            try:
                x = self.source.__next__()
            except StopIteration as e:
                self._prepulled[seq] = _Result(None, 0, e)
                return
            except Exception as e:
                self._prepulled[seq] = _Result(None, 0, e)
                continue
            n = 0 if self.input_charged else nbytes(x)
            if n:
                self.account.adjust(n)
            self._prepulled[seq] = _Result(x, n, None)

    def _drop_prepulled(self) -> None:
        prepulled = self._prepulled
        for item in prepulled.values():
            if item.error is None:
                if item.nbytes:
                    self.account.adjust(-item.nbytes)
                elif self.release_input is not None:
                    self.release_input(item.value)
        prepulled.clear()

    def _snapshot_after_replay_event(self, gen: int, seq: int) -> None:
        """Input lock held. Snapshot the input right after this element when the input does not replay
        (every element), or when something below happened that a replay cannot repeat (``replay_epoch``),
        so no restore fast-forwards across it."""
        epoch = self.source.replay_epoch()
        if self._every == 1 or epoch != self._replay_epoch:
            event = epoch != self._replay_epoch
            increase = max(0, epoch - self._replay_epoch)
            self._replay_epoch = epoch
            snap = self.source.get_state()
            with self._cv:
                if gen == self._gen:
                    self._snaps[seq + 1] = (snap, 0)
                    if event:
                        self._events.append((seq, increase))
                    if event and not self.deterministic:
                        # Elements from ``seq`` on may differ in a replay from an earlier snapshot: deliver
                        # them in order until the prefix passes the event, so no skip offset names them.
                        self._barrier = seq if self._barrier is None else min(self._barrier, seq)

    def _apply(self, x: Any, seq: int, stop: Flag, stats: PoolStats) -> tuple[Any, int, BaseException | None]:
        """``fn(x)`` (or the executor's call), timed into ``stats``: ``(value, nbytes, error)``."""
        if not (self.identity or self.input_charged):
            n_in = nbytes(x)
            if n_in > self._in_max:
                self._in_max = n_in
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            try:
                if self.executor is not None:
                    value = self.executor.call(x, self._index_base + seq, stop)
                else:
                    value = self.fn(x)
            finally:  # the input's bytes go whether fn succeeded or not
                if self.release_input is not None:
                    self.release_input(x)
                stats.calls += 1
                stats.busy_s += time.perf_counter() - w0
                stats.cpu_s += time.thread_time() - c0
            x = None
            return value, nbytes(value), None
        except Cancelled:
            raise
        except Exception as e:
            return None, 0, note_error(e, self.stage, self._index_base + seq)

    def _finish(self, gen: int, stop: Flag, seq: int, x: Any, error: BaseException | None,
                reserved: int, stats: PoolStats) -> None:
        cv = self._cv
        if seq in self._skip:  # delivered before the state this run was restored from
            self.account.cancel(reserved)
            if error is None and self.release_input is not None:
                self.release_input(x)
            with cv:
                self._skip.discard(seq)
                self._beyond.add(seq)
                self._roll_prefix()
                self._notify_all()
            return
        value, n = None, 0
        if error is None:
            try:
                value, n, error = self._apply(x, seq, stop, stats)
            except Cancelled:
                self.account.cancel(reserved)
                raise
            x = None
        if error is None:
            try:  # a call that needs more than the whole budget is refused before its excess is charged
                self.account.check_possible(self._need(n))
            except MemoryBudgetError:
                self.account.cancel(reserved)
                raise
            self.account.settle(reserved, n)
        else:
            self.account.cancel(reserved)
        with cv:
            if gen != self._gen or stop.is_set():
                if error is None:
                    self.account.release(n)
                return
            self._results[seq] = _Result(value, n, error)
            # ordered delivery: only the result the consumer waits for is worth waking it
            if self._consumer_waiting and (seq == self._prefix or not self.deterministic):
                cv.notify()

    def _notify_all(self) -> None:
        """Wake the consumer and any worker (end of input, skipped elements, stop); lock held."""
        self._cv.notify_all()
        self._room.notify_all()

    def _roll_prefix(self) -> None:
        beyond = self._beyond
        while self._prefix in beyond:
            beyond.discard(self._prefix)
            self._prefix += 1
        snaps = self._snaps
        if len(snaps) > 1:
            base = max(p for p in snaps if p <= self._prefix)
            for p in [p for p in snaps if p < base]:
                del snaps[p]

    # ---- consumer side -----------------------------------------------------------------------------
    def next(self) -> Any:
        if self._lean:
            raw = self._raw_input_lock
            if raw.acquire(False):
                if self.active == 0 and self._lean:
                    return self._next_lean(raw)
                raw.release()
            self._lean = False
        if not self._started:
            self._start()
        if self.active == 0 and self._next_seq == self._prefix and not self._results and self._crash is None:
            return self._next_inline()  # inline, nothing in flight (see _next_inline)
        cv = self._cv
        waited = 0.0
        with cv:
            gen = self._gen
            while True:
                if self._crash is not None:
                    raise detached(self._crash)  # kept to raise again: the consumer's frames stay off it
                result = self._take_ready()
                if result is not None:
                    break
                if self._end_seq is not None and self._prefix >= self._end_seq:
                    raise StopIteration
                if self._stop.is_set() or self._gen != gen:  # (stop() from close() starts a new generation)
                    raise Cancelled()
                if self.active == 0 and self._in_flight() == 0:
                    break  # inline: this thread computes the next element (outside the lock)
                if not any(t.is_alive() for t in self._threads):
                    raise RuntimeError(f"{self.stage}: worker threads stopped unexpectedly (a headrace defect; "
                                       "please report it with the pipeline)")
                self._consumer_waiting = True
                self._waiter_urgent = waiter_urgency()
                w0 = time.perf_counter()
                try:
                    cv.wait(WAIT_SLICE_S)
                finally:
                    self._consumer_waiting = False
                    waited += time.perf_counter() - w0
            if result is not None and self._room_waiting and (
                    not self._results or self._in_flight() <= self.refill_at):
                self._room.notify()  # the one worker waiting for room (it holds the input lock)
        self.consumer_wait_s += waited
        if result is None:
            return self._next_inline()
        self.delivered += 1
        if result.error is None:
            self.delivered_bytes += result.nbytes
            hand_off(self.account, result.nbytes, self.delivers_as)
            return result.value
        error, result = result.error, None
        try:
            raise error
        finally:
            del error  # no frame -> exception -> traceback -> frame cycle keeping the pipeline alive

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
        clock = time.perf_counter
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
                    with self._cv:
                        self._end_seq = seq
                        self._next_seq = seq
                    raise
                except Exception as e:
                    x, error = None, e
                if self.record_state and seq >= self._prepull_end:
                    # a replay event below (see delivered_epoch): this element is delivered now, in order
                    epoch = source.replay_epoch()
                    if epoch != self._replay_epoch:
                        with self._cv:
                            self._events.append((seq, max(0, epoch - self._replay_epoch)))
                        self._replay_epoch = epoch
            finally:
                raw_lock.release()
            skipped = bool(self._skip) and seq in self._skip
            value = None
            if skipped:  # delivered before the state this run was restored from
                if error is None and self.release_input is not None:
                    self.release_input(x)
                self._skip.discard(seq)
            elif error is None:
                t1, c1 = clock(), time.thread_time()
                try:
                    try:
                        value = self._inline_call(x, seq, stop)
                    finally:
                        if self.release_input is not None:
                            self.release_input(x)
                except Cancelled:
                    raise
                except Exception as e:
                    error = note_error(e, self.stage, self._index_base + seq)
                x = None
                stats.calls += 1
                stats.busy_s += clock() - t1
                stats.cpu_s += time.thread_time() - c1  # the tuner's CPU weight of the stage (cpu_budget)
            if not self._beyond and seq == self._prefix:
                self._prefix = seq + 1
            else:
                with self._cv:
                    self._beyond.add(seq)
                    self._roll_prefix()
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
            with self._cv:
                self._end_seq = seq
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

    def _sync_lean_epoch(self) -> None:
        """Input lock held: count the replay events that happened below while the lean path ran (see
        ``_next_lean``), as delivered with the last element it delivered."""
        self._epoch_stale = False
        if not self.record_state:
            return
        epoch = self.source.replay_epoch()
        if epoch != self._replay_epoch:
            with self._cv:
                self._events.append((self._prefix - 1, max(0, epoch - self._replay_epoch)))
            self._replay_epoch = epoch

    def _inline_call(self, x: Any, seq: int, stop: Flag) -> Any:
        """``fn(x)`` for the inline path: directly once the executor runs calls on threads for good (an
        ``"auto"`` executor that decided on threads: its call would only add layers to the same ``fn``),
        else the executor's call."""
        if self._inline_direct:
            return self.fn(x)
        executor = self.executor
        if executor.kind == "thread":  # final: an "auto" executor never moves on from threads
            self._inline_direct = True
            return self.fn(x)
        return executor.call(x, self._index_base + seq, stop)

    def _resnapshot_after_inline(self, seq: int) -> None:
        """Input lock held, nothing in flight: the inline calls took no snapshots; take one at ``seq``."""
        if self._epoch_stale:
            self._sync_lean_epoch()
        if seq < self._prepull_end:  # the input is ahead of seq: the restore's snapshot stays the base
            return
        if self._inline_dirty and self.record_state:
            snap = self.source.get_state()
            with self._cv:
                self._snaps = {seq: (snap, 0)}
                self._replay_epoch = self.source.replay_epoch()
        self._inline_dirty = False

    def stats(self) -> dict[str, Any]:
        """The counters (:class:`PoolStats` summed over the workers and the inline calls) and settings;
        ``worker_time_s``: the time the workers existed and were not parked (the denominator of shares)."""
        parts = [*self._worker_stats, self._inline_stats]
        now = time.monotonic()
        inline = self._inline_stats
        span = sum(now - p.t0 - p.parked_s for p in self._worker_stats[:len(self._threads)])
        span += inline.busy_s + inline.input_s  # the consumer's thread, while it computed inline
        return {
            "workers": self.active, "threads": len(self._threads), "window": self.window, "worker_time_s": span,
            "calls": sum(p.calls for p in parts), "busy_s": sum(p.busy_s for p in parts),
            "cpu_s": sum(p.cpu_s for p in parts), "input_s": sum(p.input_s for p in parts),
            "room_s": sum(p.room_s for p in parts), "budget_s": sum(p.budget_s for p in parts),
            "consumer_wait_s": self.consumer_wait_s, "delivered": self.delivered,
            "delivered_bytes": self.delivered_bytes, "elapsed_s": time.monotonic() - self.started_s,
        }

    def has_ready(self) -> bool:
        """Whether ``next()`` would return without waiting (a result is ready, or the stream ended)."""
        with self._cv:
            if self.active == 0 and self._in_flight() == 0:
                return True
            if self._end_seq is not None and self._prefix >= self._end_seq:
                return True
            return self._next_ready() is not None

    def _next_ready(self) -> int | None:
        """The sequence number to deliver next, if one is ready (lock held)."""
        if self._barrier is not None and self._prefix > self._barrier:
            self._barrier = None
        if self.deterministic:
            return self._prefix if self._prefix in self._results else None
        for seq in self._results:
            if self._barrier is None or seq < self._barrier or seq == self._prefix:
                return seq
        return None

    def _take_ready(self) -> _Result | None:
        seq = self._next_ready()
        if seq is None:
            return None
        result = self._results.pop(seq)
        self._beyond.add(seq)
        self._roll_prefix()
        return result

    def delivered_epoch(self) -> int:
        """The replay events below among the elements delivered so far. A downstream parallel stage
        snapshots this stage right after an event (``replay_epoch``); the event must count from the
        element produced after it, not from when a worker reading ahead saw it: this stage's state at a
        snapshot taken earlier names an input snapshot from before the event, and a restore from it would
        replay across the event (found by ``bench/promises.py``: ``shuffle -> map -> prefetch`` under a
        tight budget lost and repeated elements)."""
        if self._epoch_stale and self._acquire_input(self._stop):
            try:
                if self._epoch_stale:
                    self._sync_lean_epoch()
            finally:
                self._input_lock.release()
        if self._events:
            with self._cv:
                events = self._events
                while events and events[0][0] < self._prefix:
                    self._epoch_out += events.popleft()[1]
        return self._epoch_out

    # ---- state -------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        if not self.record_state:
            raise NotImplementedError(f"{self.stage}: its input does not support get_state()")
        if self._inline_dirty:
            inline = self._inline_state()
            if inline is not None:
                return inline
        with self._cv:
            prefix = self._prefix
            pos = max(p for p in self._snaps if p <= prefix)
            snap, forward = self._snaps[pos]
            beyond = sorted(s - prefix for s in self._beyond | self._skip) if self._beyond or self._skip else []
            return {"input": snap, "forward": forward + prefix - pos, "skip": beyond,
                    "index": self._index_base + prefix}

    def _inline_state(self) -> dict[str, Any] | None:
        """After inline calls and with nothing in flight, the input's position *is* the prefix's. Waiting for
        the input lock ends once a worker has taken it and snapshotted (``_resnapshot_after_inline``): the
        snapshots then say the state, and that worker may be waiting for budget room that only this consumer's
        progress frees (sweep seed 400 under load: ``get_state`` inside ``next()`` waited for ever)."""
        while not self._input_lock.acquire(timeout=WAIT_SLICE_S):
            if self._stop.is_set() or not self._inline_dirty:
                return None
        try:
            with self._cv:
                if (self._next_seq != self._prefix or self._beyond or self._results
                        or self._prefix < self._prepull_end):
                    return None
                skip = sorted(s - self._prefix for s in self._skip)
                index = self._index_base + self._prefix
            return {"input": self.source.get_state(), "forward": 0, "skip": skip, "index": index}
        finally:
            self._input_lock.release()

    def restore(self, state: dict[str, Any]) -> None:
        self.stop()
        deadline = time.monotonic() + RESTORE_WAIT_S
        while not self._input_lock.acquire(timeout=WAIT_SLICE_S):
            if time.monotonic() > deadline:
                raise StateError(f"{self.stage}: set_state() waited {RESTORE_WAIT_S:.0f} s for a worker still "
                                 f"inside the input ({', '.join(t.name for t in self.alive_threads())}); a "
                                 "function upstream does not return. Close this iterator and restore into a new one.")
        try:
            self.source.set_state(state["input"])
            forward = int(state.get("forward", 0))
            fast_forward(self.source, forward)
            skip = [int(s) for s in state["skip"]]
            self._reset_counters(int(state["index"]), state["input"], forward, skip)
            self._prepull(skip)
            if self.record_state:
                self._replay_epoch = self.source.replay_epoch()
        finally:
            self._input_lock.release()

    # ---- shutdown ----------------------------------------------------------------------------------
    def signal_stop(self) -> None:
        """Stop this generation's workers (never blocks; they exit at their next check)."""
        self._lean = False
        self._stop.set()
        if self._cv.lock.acquire(timeout=0.2):
            try:
                self._notify_all()
            finally:
                self._cv.lock.release()

    def join(self, deadline: float) -> None:
        join_threads(self._threads, max(0.0, deadline - time.monotonic()))

    def alive_threads(self) -> list[threading.Thread]:
        self._stale = [t for t in self._stale if t.is_alive()]
        return [t for t in self._threads if t.is_alive()] + self._stale

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop, join (``timeout_s``), drop held results and start a new generation."""
        self.signal_stop()
        self.join(time.monotonic() + timeout_s)
        with self._cv:
            self._gen += 1
            for r in self._results.values():
                if r.error is None:
                    self.account.release(r.nbytes)
            self._results.clear()
            self._crash = None
        self._stale += [t for t in self._threads if t.is_alive()]
        self._threads = []
        self._stop = Flag()


class PoolIterator(DatasetIterator):
    """The stage around a :class:`ParallelApplier` (parallel map, prefetch, parallel batch, interleave slots).

    ``account``: a shared account (interleave slots share their stage's); without it the stage opens its
    own with a demand of ``window`` elements. Other keywords go to :class:`ParallelApplier`.
    """

    def __init__(self, ctx: Any, source: DatasetIterator, fn: Callable[[Any], Any], stage: str, workers: int,
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
        self._tuning: Any = None
        if autotune and ctx.options.autotune_enabled is not False:
            self._tune(ctx, workers, window)

    # ---- AUTOTUNE (headrace._ops.tuner) ------------------------------------------------------------
    def _tune(self, ctx: Any, workers: int, window: int | Callable[[], int]) -> None:
        t = stage_tuning(ctx, self.stage, self.kind)
        if self.kind == "prefetch":
            t.knob("buffer", int(window) if isinstance(window, int) else 1, 0, MAX_BUFFER,
                   f"AUTOTUNE start: {window} elements")
        else:
            executor = self._pool.executor
            t.executor = executor
            hi = ctx.cpu_budget if getattr(executor, "kind", "") == "process" else MAX_WORKERS
            if ctx.options.max_parallelism:
                hi = min(hi, ctx.options.max_parallelism)
            taken = 0
            if "workers" not in t.knobs:  # the first stage made takes from what is left of the CPU budget
                taken = sum(k.value for u in list(ctx.tunings.values()) for k in u.knobs.values() if k.compute)
                workers = max(0, min(workers, ctx.cpu_budget - taken))
            why = workers_start_reason(workers, ctx.cpu_budget, ctx.options.cpu_budget is not None, taken=taken)
            t.knob("workers", workers, 0, hi, why, compute=True)
            if isinstance(window, int):
                t.knob("window", window, 1, MAX_WINDOW, f"AUTOTUNE start: {window // max(1, workers)} per worker")
        t.add(self)
        self._tuning = t
        for name, k in t.knobs.items():
            self.apply_knob(name, k.value, start=True)

    def apply_knob(self, name: str, value: int, *, start: bool = False) -> None:
        """Set knob ``name`` to ``value`` (the tuner thread; ``start``: its starting value, while building)."""
        pool = self._pool
        if name == "workers":
            pool.set_workers(value)
        elif name == "window":
            pool.set_window(value)
            if self._owns_account:
                self._account.set_demand(value, start=start)
        elif name == "buffer":
            pool.set_workers(1 if value > 0 else 0)
            if value > 0:
                pool.set_window(value)
                if self._owns_account:
                    self._account.set_demand(value, start=start)

    def tuning_stats(self) -> dict[str, Any]:
        return self._pool.stats()

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

    def replays_deterministically(self) -> bool:
        return self._pool.deterministic and self._source.replays_deterministically()

    def replay_epoch(self) -> int:
        pool = self._pool
        return pool.delivered_epoch() if pool.record_state else super().replay_epoch()

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

    def _children(self) -> list[DatasetIterator]:
        return [self._source]
