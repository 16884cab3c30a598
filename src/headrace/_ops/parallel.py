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
cost of asking the input for its state per element.

Errors: an exception from the input or from ``fn`` is stored as that sequence number's result and
re-raised by the consumer at its position, with a note naming the stage and element; the stage stays
usable afterwards. An exception in the pool's own machinery is re-raised to the consumer too.

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

from .._errors import StateError
from .._memory import WAIT_SLICE_S, Cancelled, StageAccount
from .._structure import nbytes
from .._sync import Condition, Flag
from .._sync import Lock as TimedLock
from .base import DatasetIterator, check_state, join_threads, note_error, start_thread

SNAPSHOT_EVERY = 16
"""Pulls between two snapshots of the input's state (restore re-reads at most this many elements)."""
RESTORE_WAIT_S = 60.0
"""How long ``set_state`` waits for a worker stuck in the input (a slow user function) to leave it."""


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
                 urgent_when_waited: bool = False, headroom: bool | None = None) -> None:
        self.source = source
        self.fn = fn
        self.num_workers = num_workers
        self._window = window
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
        self._cv = Condition(f"{stage} results")            # the consumer waits here for a result
        self._room = Condition(f"{stage} room", self._cv.lock)  # a worker (holding the input lock) waits for room
        self._consumer_waiting = False
        self._room_waiting = False
        self._input_lock = TimedLock(f"{stage} input")  # held around source.__next__ (timed acquisitions)
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
        self._events: deque[tuple[int, int]] = deque()  # (seq, epoch increase) of replay events not delivered
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
        self._barrier: int | None = None  # out-of-order delivery stops at this seq until the prefix passes it
        self._events.clear()
        self._started = False

    def _start(self) -> None:
        self._started = True
        gen, stop = self._gen, self._stop
        for i in range(self.num_workers):
            self._threads.append(start_thread(f"{self.thread_name}-{i}", lambda: self._work(gen, stop), stop))

    @property
    def window(self) -> int:
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
            return lambda: self._consumer_waiting and self._prefix == seq
        if self.deterministic:
            return lambda: self._prefix == seq
        return lambda: self._consumer_waiting and not self._results

    def _estimate(self) -> int:
        out = self.account.estimate()
        return out if (self.identity or self.input_charged) else out + self._in_max

    def _in_flight(self) -> int:
        return self._next_seq - self._prefix - len(self._beyond)

    # ---- worker side -------------------------------------------------------------------------------
    def _work(self, gen: int, stop: Flag) -> None:
        try:
            self._work_loop(gen, stop)
        except Cancelled:
            return
        except BaseException as e:  # a defect in the pool itself: the consumer must see it, not hang
            with self._cv:
                if gen == self._gen and self._crash is None:
                    self._crash = e
                self._notify_all()

    def _acquire_input(self, stop: Flag) -> bool:
        while not self._input_lock.acquire(timeout=WAIT_SLICE_S):
            if stop.is_set():
                return False
        return True

    def _work_loop(self, gen: int, stop: Flag) -> None:
        cv = self._cv
        source = self.source
        while not stop.is_set():
            if not self._acquire_input(stop):
                return
            reserved = 0
            try:
                with cv:
                    while (not stop.is_set() and self._end_seq is None
                           and self._in_flight() >= self.window):
                        self._room_waiting = True
                        self._room.wait(WAIT_SLICE_S)
                        self._room_waiting = False
                    if stop.is_set() or self._end_seq is not None:
                        return
                    seq = self._next_seq
                    self._next_seq += 1
                reserved = self.account.reserve(self._estimate(), stop, urgent=self._urgent(seq),
                                                headroom=self.headroom)
                if self.record_state and self._every > 1 and seq % self._every == 0 and seq:
                    snap = source.get_state()
                    with cv:
                        if gen == self._gen:
                            self._snaps[seq] = (snap, 0)
                try:
                    x = source.__next__()
                    error = None
                    if self.record_state:
                        self._snapshot_after_replay_event(gen, seq)
                except StopIteration:
                    self.account.cancel(reserved)
                    reserved = 0
                    with cv:
                        if gen == self._gen and not stop.is_set():
                            self._end_seq = seq
                            self._next_seq = seq
                        self._notify_all()
                    return
                except Exception as e:
                    x, error = None, e
            except BaseException:
                if reserved:
                    self.account.cancel(reserved)
                raise
            finally:
                self._input_lock.release()
            self._finish(gen, stop, seq, x, error, reserved)
            x = error = None  # no reference to the element while this worker waits for room

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

    def _finish(self, gen: int, stop: Flag, seq: int, x: Any, error: BaseException | None,
                reserved: int) -> None:
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
            if not (self.identity or self.input_charged):
                n_in = nbytes(x)
                if n_in > self._in_max:
                    self._in_max = n_in
            try:
                try:
                    value = self.fn(x)
                finally:  # the input's bytes go whether fn succeeded or not
                    if self.release_input is not None:
                        self.release_input(x)
                x = None
                n = nbytes(value)
            except Exception as e:
                error = note_error(e, self.stage, self._index_base + seq)
        if error is None:
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
        if not self._started:
            self._start()
        cv = self._cv
        with cv:
            while True:
                if self._crash is not None:
                    raise self._crash
                result = self._take_ready()
                if result is not None:
                    break
                if self._end_seq is not None and self._prefix >= self._end_seq:
                    raise StopIteration
                if self._stop.is_set():
                    raise Cancelled()
                if not any(t.is_alive() for t in self._threads):
                    raise RuntimeError(f"{self.stage}: worker threads stopped unexpectedly (a headrace defect; "
                                       "please report it with the pipeline)")
                self._consumer_waiting = True
                try:
                    cv.wait(WAIT_SLICE_S)
                finally:
                    self._consumer_waiting = False
            if self._room_waiting and (not self._results or self._in_flight() <= self.refill_at):
                self._room.notify()  # the one worker waiting for room (it holds the input lock)
        if result.error is None:
            self.account.release(result.nbytes)
            return result.value
        error, result = result.error, None
        try:
            raise error
        finally:
            del error  # no frame -> exception -> traceback -> frame cycle keeping the pipeline alive

    def has_ready(self) -> bool:
        """Whether ``next()`` would return without waiting (a result is ready, or the stream ended)."""
        with self._cv:
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
        with self._cv:
            prefix = self._prefix
            pos = max(p for p in self._snaps if p <= prefix)
            snap, forward = self._snaps[pos]
            beyond = sorted(s - prefix for s in self._beyond | self._skip) if self._beyond or self._skip else []
            return {"input": snap, "forward": forward + prefix - pos, "skip": beyond,
                    "index": self._index_base + prefix}

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
            if self.record_state:
                self._replay_epoch = self.source.replay_epoch()
        finally:
            self._input_lock.release()
        self._reset_counters(int(state["index"]), state["input"], forward, [int(s) for s in state["skip"]])

    # ---- shutdown ----------------------------------------------------------------------------------
    def signal_stop(self) -> None:
        """Stop this generation's workers (never blocks; they exit at their next check)."""
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
                 account: StageAccount | None = None, warn_shrink: bool = True, **pool_options: Any) -> None:
        super().__init__(ctx)
        self.kind = kind
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

    def __next__(self) -> Any:
        return self._pool.next()

    def has_ready(self) -> bool:
        return self._pool.has_ready()

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
        self._pool.stop(timeout_s=0.0)
        if self._owns_account:
            self._account.close()

    def _children(self) -> list[DatasetIterator]:
        return [self._source]
