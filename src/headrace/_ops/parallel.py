"""A bounded, checkpointable thread pool applying a function to an input iterator's elements.

Used by parallel ``map``, ``prefetch`` (one worker, identity), parallel ``batch`` and the per-slot
readers of parallel ``interleave``.

Invariant (the "bounded work in flight" rule): the number of elements pulled from the input but not yet
handed to the consumer never exceeds ``window`` (plus at most ``num_workers - 1`` that race past the check),
and every finished result holds its bytes in the stage's memory account until it is handed on.

Ordering: with ``deterministic=True`` results are delivered in input order (sequence numbers); otherwise
in completion order.

State: each worker records the input's state right after pulling an element (under the input lock), so
the state after delivering result *s* is "input after element *s*". With out-of-order delivery the state
is the input state after the longest delivered prefix plus the sequence offsets delivered beyond it,
which the restored stage skips: exactly-once either way.

Errors: an exception from the input or from the function is stored as that sequence number's result and
re-raised by the consumer at its position, with a note naming the stage and element; the stage stays
usable afterwards.

Shutdown: ``close()`` (and ``reset()``) sets the generation's stop event; every wait is a timed wait on a
condition that re-checks it; threads are joined against a one-second deadline and results still held are
released from the memory account.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .._memory import WAIT_SLICE_S, Cancelled, StageAccount
from .._structure import nbytes
from .base import DatasetIterator, join_threads, note_error, start_thread

_END = object()


class _Result:
    __slots__ = ("error", "nbytes", "state", "value")

    def __init__(self, value: Any, n: int, state: Any, error: BaseException | None) -> None:
        self.value = value
        self.nbytes = n
        self.state = state
        self.error = error


class ParallelApplier:
    """Apply ``fn`` to elements of ``source`` in ``num_workers`` threads (see the module docstring).

    ``refill_at`` (default ``window - 1``): a worker waiting for room in the window is woken only once
    the elements in flight have dropped to this many (or nothing is ready for the consumer), so a fast
    producer (an interleave slot's reader) refills the window in bursts instead of being woken per element.
    ``release_input(x)`` (optional) is called once ``fn(x)`` has produced its result, to release bytes
    the input element held in another account (parallel batch). ``record_state`` turns off the per-element
    ``source.get_state()`` for stages that never checkpoint.
    """

    def __init__(self, source: DatasetIterator, fn: Callable[[Any], Any], *, num_workers: int, window: int,
                 deterministic: bool, account: StageAccount, stage: str, thread_name: str,
                 index_base: int = 0, release_input: Callable[[Any], None] | None = None,
                 record_state: bool = True, refill_at: int | None = None) -> None:
        self.source = source
        self.fn = fn
        self.num_workers = num_workers
        self.window = max(window, 1)
        self.refill_at = self.window - 1 if refill_at is None else min(max(refill_at, 0), self.window - 1)
        self.deterministic = deterministic
        self.account = account
        self.stage = stage
        self.thread_name = thread_name
        self.release_input = release_input
        self.record_state = record_state
        lock = threading.Lock()
        self._cv = threading.Condition(lock)        # the consumer waits here for a result
        self._room = threading.Condition(lock)      # a worker (holding the input lock) waits here for room
        self._consumer_waiting = False
        self._room_waiting = False
        self._input_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        if record_state:
            try:
                base_state = source.get_state()
            except NotImplementedError:
                self.record_state = False
        self._reset_counters(index_base, base_state if self.record_state else None, [])

    # ---- bookkeeping -------------------------------------------------------------------------------
    def _reset_counters(self, index_base: int, base_state: Any, skip: list[int]) -> None:
        self._index_base = index_base
        self._next_seq = 0            # next sequence number a worker will claim
        self._end_seq: int | None = None  # set when the input is exhausted
        self._results: dict[int, _Result] = {}
        self._prefix = 0              # every seq < prefix was delivered (or skipped)
        self._prefix_state = base_state
        self._beyond: dict[int, Any] = {}  # delivered or skipped seq beyond the prefix -> its state
        self._skip = set(skip)        # seq offsets to drop (restored out-of-order deliveries)
        self._started = False

    def _start(self) -> None:
        self._started = True
        stop = self._stop
        for i in range(self.num_workers):
            self._threads.append(start_thread(f"{self.thread_name}-{i}", lambda: self._work(stop)))

    # ---- worker side -------------------------------------------------------------------------------
    def _work(self, stop: threading.Event) -> None:
        cv = self._cv
        while not stop.is_set():
            with self._input_lock:
                with cv:
                    while (not stop.is_set() and self._end_seq is None
                           and self._next_seq - self._prefix - len(self._beyond) >= self.window):
                        self._room_waiting = True
                        self._room.wait(WAIT_SLICE_S)
                        self._room_waiting = False
                    if stop.is_set() or self._end_seq is not None:
                        return
                    seq = self._next_seq
                    self._next_seq += 1
                try:
                    x = self.source.__next__()
                    error = None
                except StopIteration:
                    with cv:
                        self._end_seq = seq
                        self._next_seq = seq
                        self._notify_all()
                    return
                except Exception as e:
                    x, error = _END, e
                state = self.source.get_state() if self.record_state else None
            if seq in self._skip:
                if error is None and self.release_input is not None:
                    self.release_input(x)
                with cv:
                    self._skip.discard(seq)
                    self._beyond[seq] = state
                    self._roll_prefix()
                    self._notify_all()
                continue
            value, n = None, 0
            if error is None:
                try:
                    try:
                        value = self.fn(x)
                    finally:  # the input's bytes go whether fn succeeded or not
                        if self.release_input is not None:
                            self.release_input(x)
                    n = nbytes(value)
                    self.account.acquire(n, stop, urgent=self._is_next_needed(seq))
                except Cancelled:
                    return
                except Exception as e:
                    error = note_error(e, self.stage, self._index_base + seq)
            with cv:
                if stop.is_set():
                    if error is None:
                        self.account.release(n)
                    return
                self._results[seq] = _Result(value, n, state, error)
                # ordered delivery: only the result the consumer waits for is worth waking it
                if self._consumer_waiting and (seq == self._prefix or not self.deterministic):
                    cv.notify()

    def _is_next_needed(self, seq: int) -> Callable[[], bool] | None:
        """For ordered delivery: true while ``seq`` is the result the consumer waits for."""
        if not self.deterministic:
            return None
        return lambda: self._prefix == seq

    def _notify_all(self) -> None:
        """Wake the consumer and any worker (end of input, skipped elements, stop); lock held."""
        self._cv.notify_all()
        self._room.notify_all()

    def _roll_prefix(self) -> None:
        while self._prefix in self._beyond:
            self._prefix_state = self._beyond.pop(self._prefix)
            self._prefix += 1

    # ---- consumer side -----------------------------------------------------------------------------
    def next(self) -> Any:
        if not self._started:
            self._start()
        cv = self._cv
        with cv:
            while True:
                result = self._take_ready()
                if result is not None:
                    break
                if self._end_seq is not None and self._prefix >= self._end_seq:
                    raise StopIteration
                if not any(t.is_alive() for t in self._threads):
                    raise RuntimeError(f"{self.stage}: worker threads stopped unexpectedly; see the log")
                self._consumer_waiting = True
                try:
                    cv.wait(WAIT_SLICE_S)
                finally:
                    self._consumer_waiting = False
            if self._room_waiting and (not self._results or self._next_seq - self._prefix - len(self._beyond)
                                       <= self.refill_at):
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
            return (self._prefix in self._results) if self.deterministic else bool(self._results)

    def _take_ready(self) -> _Result | None:
        if self.deterministic:
            seq = self._prefix
            result = self._results.pop(seq, None)
            if result is None:
                return None
        else:
            if not self._results:
                return None
            seq = next(iter(self._results))
            result = self._results.pop(seq)
        self._beyond[seq] = result.state
        self._roll_prefix()
        return result

    # ---- state -------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        if not self.record_state:
            raise NotImplementedError(f"{self.stage}: its input does not support get_state()")
        with self._cv:
            beyond = (sorted(s - self._prefix for s in set(self._beyond) | self._skip)
                      if self._beyond or self._skip else [])
            return {"input": self._prefix_state, "skip": beyond, "index": self._index_base + self._prefix}

    def restore(self, state: dict[str, Any]) -> None:
        self.stop()
        self.source.set_state(state["input"])
        self._reset_counters(int(state["index"]), state["input"], [int(s) for s in state["skip"]])

    # ---- shutdown ----------------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()
        with self._cv:
            self._notify_all()
        join_threads(self._threads)
        self._threads = []
        with self._cv:
            for r in self._results.values():
                if r.error is None:
                    self.account.release(r.nbytes)
            self._results.clear()
        self._stop = threading.Event()
