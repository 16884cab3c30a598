"""The results window of a parallel stage (``headrace._engine.pool.parallel``): the sequence numbers, the results
waiting for the consumer, the order the consumer takes them in (``next()``), and its fast path with no worker
(the lean path). Every field of the window is written here only; the workers, the inline path and the
snapshots change it through the methods below. Why it is built so, with a picture: docs/design/pool.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._handoff import hand_off, waiter_urgency
from ..._memory import WAIT_SLICE_S, Cancelled
from ..._sync import Condition, Flag
from ..stage_support import detached, note_error

if TYPE_CHECKING:
    from .inline import InlinePath
    from .parallel import ParallelApplier
    from .snapshots import InputSnapshots
    from .workers import WorkerThreads

LEAN_TIMING_EVERY = 8
"""The lean path times one call in this many; that one stands for them all."""
LEAN_TIMING_MASK = LEAN_TIMING_EVERY - 1
PARK, DONE = -1, -2
"""What :meth:`ResultsWindow.claim_with_room` returns instead of a sequence number."""


class Result:
    """One sequence number's outcome: its value and bytes, or its error."""

    __slots__ = ("error", "nbytes", "value")

    def __init__(self, value: Any, n: int, error: BaseException | None) -> None:
        self.value = value
        self.nbytes = n
        self.error = error


class ResultsWindow:
    """Sequence numbers, results and ordering of one :class:`~headrace._engine.pool.parallel.ParallelApplier`.

    Every element pulled gets the next sequence number (under the input lock), whoever computes it; at most
    :attr:`size` are in flight. Every ``seq < prefix`` was delivered (or skipped), ``beyond`` those delivered
    past it, ``skip`` those a restore drops. An error from the input or ``fn`` is that number's result,
    re-raised at its position. ``cv`` (with ``room`` on its lock) guards these fields between threads.
    """

    def __init__(self, pool: ParallelApplier, window: int | Callable[[], int],
                 refill_at: int | Callable[[], int] | None, deterministic: bool, headroom: bool,
                 urgent_when_waited: bool) -> None:
        self.pool = pool
        self._window = window
        self._window_set: int | None = None
        self._refill_at = refill_at
        self.deterministic = deterministic
        self.headroom = headroom
        self.urgent_when_waited = urgent_when_waited
        self.cv = Condition(f"{pool.stage} results")  # the consumer waits here for a result
        self.room = Condition(f"{pool.stage} room", self.cv.lock)  # a worker (holding the input lock) waits for room
        self.consumer_waiting = False
        self.room_waiting = False  # a worker (holding the input lock) waits for room
        self.waiter_urgent: Callable[[], bool] | None = None  # the waiting consumer's own urgency (_handoff)
        self.consumer_wait_s = 0.0
        self.delivered = 0
        self.delivered_bytes = 0
        self.lean = False  # the inline path's steady state (see next_lean)
        self.reset(0, [])

    def wire(self) -> None:
        """Bind the pool's other parts (built after this one)."""
        self.workers: WorkerThreads = self.pool.workers
        self.inline: InlinePath = self.pool.inline
        self.snapshots: InputSnapshots = self.pool.snapshots

    def reset(self, index_base: int, skip: list[int]) -> None:
        """A new run: sequence number 0 is element ``index_base``; ``skip``: offsets a restore drops."""
        self.index_base = index_base
        self.next_seq = 0            # next sequence number to claim
        self.end_seq: int | None = None  # set when the input is exhausted
        self.results: dict[int, Result] = {}  # computed, waiting for the consumer
        self.prefix = 0              # every seq < prefix was delivered (or skipped)
        self.beyond: set[int] = set()  # delivered or skipped seq beyond the prefix
        self.skip = set(skip)        # seq to drop (restored out-of-order deliveries)
        self.barrier: int | None = None  # out-of-order delivery stops at this seq until the prefix passes it
        self.lean = False

    # ---- settings ----------------------------------------------------------------------------------
    def set_window(self, n: int) -> None:
        """At most ``n`` elements in flight from now on."""
        with self.cv:
            self._window_set = max(1, int(n))
            self.notify_all()

    @property
    def size(self) -> int:
        """The elements in flight allowed now."""
        if self._window_set is not None:
            return self._window_set
        w = self._window
        return max(1, w() if callable(w) else w)

    @property
    def refill_at(self) -> int:
        r, most = self._refill_at, self.size - 1
        return most if r is None else min(max(r() if callable(r) else r, 0), most)

    def leave_lean(self) -> None:  # the next next() takes the general path (workers woken, a stop)
        self.lean = False

    # ---- the sequence numbers (the workers' and the inline path's side) ----------------------------
    def in_flight(self) -> int:
        return self.next_seq - self.prefix - len(self.beyond)

    def claim_with_room(self, stop: Flag, index: int, most: int = 1,
                        fit: Callable[[int, int], int] | None = None) -> tuple[int, int]:
        """Input lock held (worker ``index``): wait (timed) for room, claim up to ``most`` numbers (``fit(first,
        count)``: how many the budget admits): ``(first, count)``; ``(PARK, 0)`` above ``active``, ``(DONE, 0)``."""
        with self.cv:
            while (not stop.is_set() and self.end_seq is None and index < self.pool.active
                   and self.in_flight() >= self.size):
                self.room_waiting = True
                self.room.wait(WAIT_SLICE_S)
                self.room_waiting = False
            if stop.is_set() or self.end_seq is not None:
                return DONE, 0
            if index >= self.pool.active:
                return PARK, 0
            seq = self.next_seq
            count = 1 if most == 1 else min(most, self.size - self.in_flight())
            if count > 1 and fit is not None:
                count = fit(seq, count)
            self.next_seq = seq + count
            return seq, count

    def claim_inline(self) -> int:
        """Input lock held, the consumer's thread, nothing in flight: the next number, or ``StopIteration``."""
        if self.end_seq is not None:
            raise StopIteration
        self.next_seq += 1
        return self.next_seq - 1

    def end_at(self, seq: int, gen: int | None = None) -> None:
        """The input ended at ``seq``; ``gen``: a worker's generation, ignored once it is stale or stopping
        (``None``: the consumer's thread, always the current one)."""
        workers = self.workers
        with self.cv:
            if gen is None or (gen == workers.gen and not workers.stop_flag.is_set()):
                self.end_seq = seq
                self.next_seq = seq
            self.notify_all()

    def advance(self, seq: int) -> None:
        """``seq`` was delivered or skipped: move the prefix past every such number (lock held)."""
        beyond = self.beyond
        beyond.add(seq)
        while self.prefix in beyond:
            beyond.discard(self.prefix)
            self.prefix += 1

    def done_inline(self, seq: int, skipped: bool) -> None:
        """The consumer's thread computed (or ``skipped``) ``seq`` inline: advance past it and count it."""
        if skipped:
            self.skip.discard(seq)
        if not self.beyond and seq == self.prefix:
            self.prefix = seq + 1  # nothing in flight: no worker moves the prefix meanwhile
        else:
            with self.cv:
                self.advance(seq)
        if not skipped:
            self.delivered += 1

    def drop_skipped(self, seq: int) -> None:
        """A worker pulled ``seq``, delivered before the state this run was restored from: drop it."""
        with self.cv:
            self.skip.discard(seq)
            self.advance(seq)
            self.notify_all()

    def store(self, seq: int, count: int, results: list[tuple[int, Result]]) -> None:
        """Lock held: a run's ``results`` wait; the consumer is woken if it waits for one (in order: that one only)."""
        self.results.update(results)
        if self.consumer_waiting and (not self.deterministic or seq <= self.prefix < seq + count):
            self.cv.notify()

    def drop_results(self) -> None:
        """Lock held: drop the results waiting (a stop), giving their bytes back."""
        held = [r.nbytes for r in self.results.values() if r.error is None]
        if held:
            self.pool.account.release(sum(held), len(held))
        self.results.clear()

    def set_barrier(self, seq: int) -> None:
        """Lock held: deliver from ``seq`` on in order until the prefix passes it (a replay may differ there)."""
        self.barrier = seq if self.barrier is None else min(self.barrier, seq)

    def notify_all(self) -> None:
        """Wake the consumer and any worker (end of input, skipped elements, stop); lock held."""
        self.cv.notify_all()
        self.room.notify_all()

    # ---- the consumer ------------------------------------------------------------------------------
    def next(self) -> Any:
        if self.lean:
            raw = self.pool.raw_input_lock
            if raw.acquire(False):
                if self.pool.active == 0 and self.lean:
                    return self.next_lean(raw)
                raw.release()
            self.lean = False
        workers = self.workers
        if not workers.started:
            workers.start()
        if self.pool.active == 0 and self.next_seq == self.prefix and not self.results and workers.crash is None:
            return self._inline()  # inline, nothing in flight (see InlinePath.next_inline)
        cv = self.cv
        waited = 0.0
        with cv:
            gen = workers.gen
            while True:
                if workers.crash is not None:
                    raise detached(workers.crash)  # kept to raise again: the consumer's frames stay off it
                result = self._take_ready()
                if result is not None:
                    break
                if self.end_seq is not None and self.prefix >= self.end_seq:
                    raise StopIteration
                if workers.stop_flag.is_set() or workers.gen != gen:  # (stop() from close(): a new generation)
                    raise Cancelled()
                if self.pool.active == 0 and self.in_flight() == 0:
                    break  # inline: this thread computes the next element (outside the lock)
                if not workers.any_alive():
                    raise RuntimeError(f"{self.pool.stage}: worker threads stopped unexpectedly (a headrace "
                                       "defect; please report it with the pipeline)")
                self.consumer_waiting = True
                self.waiter_urgent = waiter_urgency()
                w0 = time.perf_counter()
                try:
                    cv.wait(WAIT_SLICE_S)
                finally:
                    self.consumer_waiting = False
                    waited += time.perf_counter() - w0
            if result is not None and self.room_waiting and (
                    not self.results or self.in_flight() <= self.refill_at):
                self.room.notify()  # the one worker waiting for room (it holds the input lock)
        self.consumer_wait_s += waited
        if result is None:
            return self._inline()
        self.delivered += 1
        if result.error is None:
            self.delivered_bytes += result.nbytes
            hand_off(self.pool.account, result.nbytes, self.pool.delivers_as)
            return result.value
        error, result = result.error, None
        try:
            raise error
        finally:
            del error  # no frame -> exception -> traceback -> frame cycle keeping the pipeline alive

    def _inline(self) -> Any:
        value = self.inline.next_inline()
        self.lean = self.inline.may_go_lean()
        return value

    def has_ready(self) -> bool:
        """Whether ``next()`` would return without waiting (a result is ready, or the stream ended)."""
        with self.cv:
            if self.pool.active == 0 and self.in_flight() == 0:
                return True
            if self.end_seq is not None and self.prefix >= self.end_seq:
                return True
            return self._next_ready() is not None

    def _next_ready(self) -> int | None:
        """The sequence number to deliver next, if one is ready (lock held)."""
        if self.barrier is not None and self.prefix > self.barrier:
            self.barrier = None
        if self.deterministic:
            return self.prefix if self.prefix in self.results else None
        for seq in self.results:
            if self.barrier is None or seq < self.barrier or seq == self.prefix:
                return seq
        return None

    def _take_ready(self) -> Result | None:
        seq = self._next_ready()
        if seq is not None:
            self.advance(seq)
            return self.results.pop(seq)
        return None

    # ---- the lean path: no worker, nothing in flight -------------------------------------------------
    def next_lean(self, raw: threading.Lock) -> Any:
        """The inline path's steady state (``lean``; the input lock ``raw`` held on entry): nothing in flight,
        held, skipped or read ahead, ``fn`` called directly; anything else (workers, a restore, a stop, the end,
        an error) leaves it. Replay events below are counted when next asked (``mark_lean``)."""
        pool = self.pool
        snapshots = self.snapshots
        seq = self.next_seq
        try:
            x = pool.source.__next__()
        except StopIteration:
            self.lean = False
            raw.release()
            self.end_at(seq)
            raise
        except Exception:  # the input's element raised: delivered (as the error) in its place
            self.lean = False
            self.next_seq = self.prefix = seq + 1
            if not snapshots.epoch_stale:
                snapshots.mark_lean()
            raw.release()
            self.delivered += 1
            raise
        except BaseException:  # KeyboardInterrupt, Cancelled: nothing was claimed
            self.lean = False
            raw.release()
            raise
        self.next_seq = self.prefix = seq + 1
        if not snapshots.epoch_stale:
            snapshots.mark_lean()
        raw.release()
        self.delivered += 1
        stats = self.inline.stats
        calls = stats.calls = stats.calls + 1
        try:
            if calls & LEAN_TIMING_MASK:
                return pool.fn(x)
            # one call in LEAN_TIMING_EVERY is timed and stands for them all (the tuner needs the time per
            # call and its CPU share; clock reads per call would cost a tenth of a cheap map's time)
            t1, c1 = time.perf_counter(), time.thread_time()
            try:
                return pool.fn(x)
            finally:
                stats.busy_s += (time.perf_counter() - t1) * LEAN_TIMING_EVERY
                stats.cpu_s += (time.thread_time() - c1) * LEAN_TIMING_EVERY
        except Exception as e:
            note_error(e, pool.stage, self.index_base + seq)
            raise



def urgency(window: ResultsWindow, seq: int) -> Callable[[], bool]:
    """Whether a worker's reservation for ``seq`` is urgent (may use the headroom), asked while it waits."""
    if window.urgent_when_waited:
        return lambda: window.consumer_waiting and window.prefix == seq and _waited_urgently(window)
    if window.deterministic:
        return lambda: window.prefix == seq
    return lambda: window.consumer_waiting and not window.results and _waited_urgently(window)


def _waited_urgently(window: ResultsWindow) -> bool:
    """Whether the consumer waiting on this pool pulls for an element its own consumer waits for."""
    w = window.waiter_urgent
    return w is None or w()
