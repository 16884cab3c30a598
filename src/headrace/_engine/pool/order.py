"""The results window of a parallel stage (``headrace._engine.pool.parallel``): sequence numbers, the results waiting
for the consumer, and the order the consumer takes them in (``next()``, the consumer's side of the pool).

Every element pulled from the input gets the next sequence number (``_next_seq``, claimed under the input
lock), whoever computes it: a worker, or the consumer itself on the inline path (``headrace._engine.pool.inline``).
Elements pulled from the input but not yet handed to the consumer: at most ``window`` (``_in_flight``). Every
``seq < _prefix`` was delivered (or skipped); ``_beyond`` holds those delivered beyond the prefix, ``_skip``
those a restore drops (delivered before the state it restored), ``_end_seq`` the end of the input once seen.
A result waiting here holds its bytes in the stage's account until the consumer takes it (``hand_off``).

Ordering: ``deterministic=True`` delivers in input order (sequence numbers); otherwise in completion order,
except below another ``deterministic=False`` stage, where it delivers in order (see
``ParallelApplier.__init__``: the out-of-order part of a checkpoint names positions, which only a replaying
input can honour), and up to a replay event's barrier (``headrace._engine.pool.snapshots``).
Ordered pools with several workers keep one element of headroom in their share of the budget for the
element the consumer waits for (``urgent``), so results that finished early cannot starve it.

Errors: an exception from the input or from ``fn`` is stored as that sequence number's result and
re-raised by the consumer at its position, with a note naming the stage and element; the stage stays
usable afterwards. An exception in the pool's own machinery (a worker's crash) is re-raised to the consumer too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..._handoff import hand_off, waiter_urgency
from ..._memory import WAIT_SLICE_S, Cancelled
from ..._sync import Condition
from ..stage_support import detached
from .fields import PoolFields, Result


class ResultsWindow(PoolFields):
    """The window and ordering part of :class:`~headrace._engine.pool.parallel.ParallelApplier`
    (a part: its fields are listed in ``fields``)."""

    def _init_window(self, stage: str, window: int | Callable[[], int], refill_at: int | Callable[[], int] | None,
                     deterministic: bool, headroom: bool, urgent_when_waited: bool) -> None:
        self._window = window
        self._window_set = None
        self._refill_at = refill_at
        self.deterministic = deterministic
        self.headroom = headroom
        self.urgent_when_waited = urgent_when_waited
        self.delivers_as = self  # the iterator a reader above pulls from (PoolIterator sets itself)
        self._cv = Condition(f"{stage} results")            # the consumer waits here for a result
        self._room = Condition(f"{stage} room", self._cv.lock)  # a worker (holding the input lock) waits for room
        self._consumer_waiting = False
        self._waiter_urgent = None  # the waiting consumer's own urgency (_handoff)
        self._room_waiting = False
        self.consumer_wait_s = 0.0
        self.delivered = 0
        self.delivered_bytes = 0

    def _reset_window(self, index_base: int, skip: list[int]) -> None:
        self._index_base = index_base
        self._next_seq = 0            # next sequence number a worker will claim
        self._end_seq = None          # set when the input is exhausted
        self._results = {}
        self._prefix = 0              # every seq < prefix was delivered (or skipped)
        self._beyond = set()          # delivered or skipped seq beyond the prefix
        self._skip = set(skip)        # seq to drop (restored out-of-order deliveries)
        self._barrier = None          # out-of-order delivery stops at this seq until the prefix passes it

    # ---- settings ----------------------------------------------------------------------------------
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

    def _in_flight(self) -> int:
        return self._next_seq - self._prefix - len(self._beyond)

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

    def _notify_all(self) -> None:
        """Wake the consumer and any worker (end of input, skipped elements, stop); lock held."""
        self._cv.notify_all()
        self._room.notify_all()

    # ---- the consumer ------------------------------------------------------------------------------
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

    def _take_ready(self) -> Result | None:
        seq = self._next_ready()
        if seq is None:
            return None
        result = self._results.pop(seq)
        self._advance(seq)
        return result
