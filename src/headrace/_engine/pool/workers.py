"""The worker threads of a parallel stage (``headrace._engine.pool.parallel``): their loop, their reservations and
their shutdown.

A worker claims the next sequence number under the input lock once the window has room, reserves, pulls,
applies ``fn`` outside the lock and stores the result for the consumer (``headrace._engine.pool.order``); the
steps themselves live in ``headrace._engine.pool.steps``.

Memory ("bounded work in flight", as torchdata's ``_SingleThreadedMapper``, in bytes as well as count): every
element in flight is covered by the stage's memory account *before it exists*: a worker reserves the stage's
estimate (its input's largest size plus its output's largest size; one element for ``identity``, the output
only for ``input_charged``) before it pulls, settles the reservation to the real output size when ``fn``
returns, and the result holds its bytes until the consumer takes it (see ``headrace._memory``). Results waiting
for the consumer are therefore counted, and so is the input a worker holds while ``fn`` runs. An input that
delivers its element charged hands it into the reservation (``headrace._handoff``).

Executor (``headrace._engine.pool.executor.Executor``; default: ``ThreadExecutor(fn)``): while it runs the calls on
threads for good, a worker calls ``fn(x)`` itself; otherwise (worker processes, ``"auto"`` measuring) it calls
``executor.call(x, index, stop)``, and the reservation adds ``executor.extra_bytes(out)`` (a process call
holds one more copy of the output).

Workers above ``active`` (``set_workers``) park, holding nothing; threads are started when needed.

Shutdown: ``signal_stop()`` sets the generation's stop event and wakes every waiter (never blocks);
``join(deadline)`` joins the threads; ``alive_threads()`` lists those still inside user code after it;
``stop()`` also drops the held results and starts a new generation. Every wait is a timed wait that re-checks
the stop event. A defect in the pool's own machinery is stored (``_crash``) and re-raised to the consumer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..._errors import MemoryBudgetError
from ..._handoff import delivers_charged, pulling_for, taking
from ..._memory import READ_AHEAD, TOP_UP, WAIT_SLICE_S, Cancelled, Reservation
from ..._structure import nbytes
from ..._sync import Flag
from ..stage_support import join_threads, mark_crash, start_thread
from .fields import PoolFields, Result
from .stats import PoolStats


class WorkerThreads(PoolFields):
    """The worker side of :class:`~headrace._engine.pool.parallel.ParallelApplier`
    (a part: its fields are listed in ``fields``)."""

    def _init_workers(self) -> None:
        self._threads = []
        self._stale = []  # threads of stopped generations still inside user code
        self._stop = Flag()
        self._gen = 0
        self._crash = None
        self._in_max = 0  # the largest input seen (the reservation's input part)
        # at a stall, a process map whose worker, call and one result cannot fit is refused, not overdrawn
        self._policy = replace(READ_AHEAD.with_headroom(self.headroom), refuse=self._stall_refusal)
        self._top_up_policy = replace(TOP_UP, refuse=self._stall_refusal)
        self._worker_stats = []

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

    def _need(self, out: int) -> int:
        """The bytes one call holds at once for an output of ``out`` bytes (its input too, unless charged
        elsewhere, and the executor's extra)."""
        extra = 0 if self._inline_direct else self.executor.extra_bytes(out)
        return out + extra if (self.identity or self.input_charged) else out + extra + self._in_max

    def _estimate(self) -> int:
        need = self._need(self.account.estimate())
        if not self._inline_direct:
            self.executor.check_fits(need)  # worker processes: one worker and one call must fit the budget
        return need

    def _stall_refusal(self, holders: str, total: int) -> str | None:
        """(The budget's lock held, at a stall: ``Policy.refuse``.) On worker processes, a call waits for
        memory that a finished result holds: where one worker, one call and that result cannot fit, the
        stall breaker's overdraft would come back at every such wait, so the stage is refused; else None
        (it overdraws)."""
        if self._inline_direct:
            return None
        out = self.account.max_element_bytes
        return self.executor.refusal(self._need(out), out) if out else None

    # ---- the loop ----------------------------------------------------------------------------------
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
            reservation = None
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
                seen = self.account.seen
                estimate = self._estimate()
                # an input that delivers its element charged hands it into this reservation (_handoff):
                # room for it is checked against this stage's share only, not taken from the budget again
                charged = (estimate if self.identity else self._in_max) if (
                    not self.input_charged and delivers_charged(self.source)) else None
                urgent = self._urgent(seq)
                reservation = self.account.reserve(estimate - (charged or 0), stop, self._policy, urgent=urgent,
                                                   charged_in=charged or 0)
                ready = None
                if not seen:  # taken on a guess: topped up to the probe's size once known, before the call
                    ready = self._topping_up(reservation, charged or 0, stop, urgent)
                    if self.account.seen:
                        ready(True)
                        ready = None
                t3 = clock()
                with pulling_for(urgent):
                    if charged is None:
                        x, error, ended = self._pull(gen, stop, seq)
                    else:
                        with taking(reservation, self.source):  # (it grows by the element handed in)
                            x, error, ended = self._pull(gen, stop, seq)
                if ended:
                    reservation.cancel()
                    return
            except BaseException:
                if reservation is not None:
                    reservation.cancel()
                raise
            finally:
                self._input_lock.release()
            t4 = clock()
            stats.room_s += t2 - t1
            stats.budget_s += t3 - t2
            stats.input_s += (t1 - t0) + (t4 - t3)
            self._finish(gen, stop, seq, x, error, reservation, stats, ready)
            x = error = None  # no reference to the element while this worker waits for room

    def _topping_up(self, reservation: Reservation, charged: int, stop: Flag, urgent: Any
                    ) -> Callable[[bool], bool]:
        """For a reservation taken on the estimate of a stage that had no element yet: the top-up to the size
        its first element (the probe) gave, once known, run right before the call (``Executor.call``'s
        ``ready``: calls admitted while the first one still started its worker process wait for a worker
        inside the executor). The output would otherwise be charged only once it exists (4 calls of 12 MiB
        outputs under a 16 MiB budget held 24 MiB; 24 MiB outputs on 4 processes under 128 MiB, 131 MiB)."""
        def top_up(wait: bool) -> bool:
            more = self._estimate() - charged - reservation.nbytes if self.account.seen else 0
            if more <= 0:
                return True
            if not wait:
                return reservation.try_top_up(more, urgent=urgent())
            reservation.top_up(more, stop, urgent=urgent, policy=self._top_up_policy)
            return True
        return top_up

    def _pull(self, gen: int, stop: Flag, seq: int) -> tuple[Any, BaseException | None, bool]:
        """Input lock held: snapshot if due, pull element ``seq``; ``(x, error, ended)``."""
        prepulled = seq < self._prepull_end
        if self.record_state and self._every > 1 and seq % self._every == 0 and seq and not prepulled:
            self._snapshot_at(gen, seq)
        try:
            x = self._next_input(seq, gen)
        except StopIteration:
            return None, None, True
        except Exception as e:
            # an element that raised is a position too: a replay event while pulling it counts from it
            if self.record_state and not prepulled:
                self._snapshot_after_replay_event(gen, seq)
            return None, e, False
        if self.record_state and not prepulled:
            self._snapshot_after_replay_event(gen, seq)
        return x, None, False

    def _finish(self, gen: int, stop: Flag, seq: int, x: Any, error: BaseException | None,
                reservation: Reservation, stats: PoolStats, ready: Callable[[bool], bool] | None = None) -> None:
        cv = self._cv
        if seq in self._skip:  # delivered before the state this run was restored from
            reservation.cancel()
            if error is None and self.release_input is not None:
                self.release_input(x)
            with cv:
                self._skip.discard(seq)
                self._advance(seq)
                self._notify_all()
            return
        value, n = None, 0
        if error is None:
            if not (self.identity or self.input_charged):
                n_in = nbytes(x)
                if n_in > self._in_max:
                    self._in_max = n_in
            try:
                value, n, error = self._apply(x, seq, stop, stats, ready=ready)
            except (Cancelled, MemoryBudgetError):
                reservation.cancel()
                raise
            x = None
        if error is None:
            try:  # a call that needs more than the whole budget is refused before its excess is charged
                reservation.settle(n, need=self._need(n))
            except MemoryBudgetError:
                reservation.cancel()
                raise
        else:
            reservation.cancel()
        with cv:
            if gen != self._gen or stop.is_set():
                if error is None:
                    self.account.release(n)
                return
            self._results[seq] = Result(value, n, error)
            # ordered delivery: only the result the consumer waits for is worth waking it
            if self._consumer_waiting and (seq == self._prefix or not self.deterministic):
                cv.notify()

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
