"""The worker threads of a parallel stage (``headrace._engine.pool.parallel``): their loop, their reservations and
their shutdown.

A worker claims the next sequence numbers under the input lock once the window has room (a run of them once the
element size is known, with ``fn`` on threads or the run in one message to a worker process: docs/design/pool.md),
reserves, pulls, applies ``fn`` outside the lock and stores the results in the results window
(``headrace._engine.pool.order``), each step once per run; the
steps themselves live in ``headrace._engine.pool.steps``. Every element in flight is covered by the stage's memory
account *before it exists* (as torchdata's ``_SingleThreadedMapper`` bounds work in flight, in bytes as well as
count): a worker reserves its input's and output's largest sizes before it pulls, settles to the real output size
when ``fn`` returns, and the result holds its bytes until the consumer takes it; an input that delivers charged
hands its element into the reservation (``headrace._handoff``). Workers above ``active`` park, holding nothing.
``signal_stop()`` never blocks; every wait is timed and re-checks the stop event; a defect in the pool's own
machinery is stored (``crash``) and re-raised to the consumer.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..._errors import MemoryBudgetError
from ..._handoff import delivers_charged, pulling_for
from ..._memory import READ_AHEAD, TOP_UP, WAIT_SLICE_S, Cancelled, Reservation
from ..._structure import nbytes
from ..._sync import Flag
from ..stage_support import join_threads, mark_crash, start_thread
from .order import DONE, urgency
from .stats import PoolStats

if TYPE_CHECKING:
    from .inline import InlinePath
    from .order import ResultsWindow
    from .parallel import ParallelApplier
    from .snapshots import InputSnapshots
    from .steps import ElementSteps


class WorkerThreads:
    """The worker threads of one :class:`~headrace._engine.pool.parallel.ParallelApplier`: this generation's
    threads and stop flag, the largest input seen, the workers' kinds of reservation and their counters."""

    def __init__(self, pool: ParallelApplier) -> None:
        self.pool = pool
        self.threads: list[threading.Thread] = []
        self._stale: list[threading.Thread] = []  # threads of stopped generations still inside user code
        self.stop_flag = Flag()  # this generation's stop event
        self.gen = 0
        self.crash: BaseException | None = None  # a defect in the pool's machinery, re-raised to the consumer
        self.started = False  # the threads were started (first next())
        self._in_max = 0  # the largest input seen (the reservation's input part)
        # at a stall, a process map whose worker, call and one result cannot fit is refused, not overdrawn
        self._policy = replace(READ_AHEAD.with_headroom(pool.window.headroom), refuse=self._stall_refusal)
        self._top_up_policy = replace(TOP_UP, refuse=self._stall_refusal)
        self._run_policy = replace(self._policy, unit=False)  # a run: several units of the stage's work at once
        self.stats: list[PoolStats] = []

    def wire(self) -> None:
        """Bind the pool's other parts (built after this one)."""
        pool = self.pool
        self.window: ResultsWindow = pool.window
        self.inline: InlinePath = pool.inline
        self.snapshots: InputSnapshots = pool.snapshots
        self.steps: ElementSteps = pool.steps

    def reset(self) -> None:
        """A new run: the threads start at the first ``next()``."""
        self.started = False

    def start(self) -> None:
        self.started = True
        self.ensure_threads(self.pool.active)

    def ensure_threads(self, n: int) -> None:
        """Threads 0..n-1 of this generation exist (a thread parks while its index >= ``active``)."""
        gen, stop = self.gen, self.stop_flag
        while len(self.threads) < n:
            i = len(self.threads)
            while len(self.stats) <= i:
                self.stats.append(PoolStats())
            stats = self.stats[i]
            stats.t0, stats.parked_s = time.monotonic(), 0.0
            self.threads.append(start_thread(f"{self.pool.thread_name}-{i}",
                                             functools.partial(self._work, gen, stop, i, stats), stop))

    def any_alive(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    def _need(self, out: int) -> int:
        """The bytes one call holds at once for an output of ``out`` bytes (its input too, unless charged
        elsewhere, and the executor's extra)."""
        pool = self.pool
        extra = 0 if self.inline.direct else pool.executor.extra_bytes(out)
        return out + extra if (pool.identity or pool.input_charged) else out + extra + self._in_max

    def _estimate(self) -> int:
        need = self._need(self.pool.account.estimate())
        if not self.inline.direct:
            self.pool.executor.check_fits(need)  # worker processes: one worker and one call must fit the budget
        return need

    def _stall_refusal(self, holders: str, total: int) -> str | None:
        """(The budget's lock held, at a stall: ``Policy.refuse``.) On worker processes, a call waits for
        memory that a finished result holds: where one worker, one call and that result cannot fit, the
        stall breaker's overdraft would come back at every such wait, so the stage is refused; else None
        (it overdraws)."""
        if self.inline.direct:
            return None
        out = self.pool.account.max_element_bytes
        return self.pool.executor.refusal(self._need(out), out) if out else None

    # ---- the loop ----------------------------------------------------------------------------------
    def _work(self, gen: int, stop: Flag, index: int, stats: PoolStats) -> None:
        try:
            self._work_loop(gen, stop, index, stats)
        except Cancelled:
            return
        except BaseException as e:  # a defect in the pool itself: the consumer must see it, not hang
            with self.window.cv:
                if gen == self.gen and self.crash is None:
                    self.crash = mark_crash(e)
                self.window.notify_all()

    def acquire_input(self, stop: Flag) -> bool:
        """The input lock, taken in timed slices; False once ``stop`` is set."""
        while not self.pool.input_lock.acquire(timeout=WAIT_SLICE_S):
            if stop.is_set():
                return False
        return True

    def _park(self, stop: Flag, index: int) -> None:
        """Wait (timed) while this worker is above the active count (``set_workers``)."""
        pool = self.pool
        if index < pool.active:
            return
        t0 = time.monotonic()
        window = self.window
        with window.cv:
            while index >= pool.active and not stop.is_set():
                window.room.wait(WAIT_SLICE_S)
        self.stats[index].parked_s += time.monotonic() - t0

    def _work_loop(self, gen: int, stop: Flag, index: int, stats: PoolStats) -> None:
        pool, window, snapshots = self.pool, self.window, self.snapshots
        input_lock = pool.input_lock
        clock = time.perf_counter
        while not stop.is_set():
            self._park(stop, index)
            t0 = clock()
            if not self.acquire_input(stop):
                return
            reservation = None
            try:
                t1 = clock()
                (mode, most), run = self.steps.run_mode(self._estimate), list[Any]()
                seq, count = (window.claim_with_room(stop, index, most, functools.partial(self._fit, run))
                              if mode else window.claim_with_room(stop, index))
                if seq < 0:
                    if seq == DONE:
                        return
                    continue  # parked meanwhile: give the input lock back (below) and park
                if snapshots.inline_dirty:
                    snapshots.resnapshot_after_inline(seq)
                t2 = clock()
                reservation, charged, ready, urgent = self._reserve(seq, stop, run)
                t3 = clock()
                with pulling_for(urgent):
                    pulled, ended = self.steps.pull_run(gen, seq, count, None if charged is None else reservation)
                if not pulled:
                    reservation.cancel()
                    return
            except BaseException:
                if reservation is not None:
                    reservation.cancel()
                raise
            finally:
                input_lock.release()
            t4 = clock()
            stats.room_s += t2 - t1
            stats.budget_s += t3 - t2
            stats.input_s += (t1 - t0) + (t4 - t3)
            self._finish(gen, stop, seq, pulled, reservation, stats, ready, mode)
            pulled = []  # no reference to the elements while this worker waits for room
            if ended:
                return

    def _sizes(self) -> tuple[int, int | None]:
        """What one element reserves now and what of it the input hands in charged (``_handoff``: room for that
        is checked against this stage's share only, not taken from the budget again), or None."""
        pool = self.pool
        estimate = self._estimate()
        charged = (estimate if pool.identity else self._in_max) if (
            not pool.input_charged and delivers_charged(pool.source)) else None
        return estimate - (charged or 0), charged

    def _fit(self, run: list[Any], seq: int, count: int) -> int:
        """(``claim_with_room``'s ``fit``, the input and results locks held.) One reservation for a run of ``count``,
        halved until the budget admits it at once (appended to ``run`` with the charged size), else 1. Never the
        budget's reserve or the consumer's headroom (that element waits alone: ``_reserve``), never a unit size."""
        account = self.pool.account
        own, charged = self._sizes()
        limit = account.budget.limit_bytes
        while count > 1 and own <= account.max_reserved_bytes:
            if own * count <= limit:
                reservation = account.try_reserve(own * count, self._run_policy, charged_in=(charged or 0) * count)
                if reservation is not None:
                    run += (reservation, charged)
                    return count
            count //= 2
        return 1

    def _reserve(self, seq: int, stop: Flag, run: list[Any]
                 ) -> tuple[Reservation, int | None, Callable[[bool], bool] | None, Callable[[], bool]]:
        """Input lock held, numbers claimed from ``seq``: the run's reservation (``_fit``) or one element's, waited
        for as ever: ``(reservation, charged per element, ready, urgency)``."""
        urgent = urgency(self.window, seq)
        if run:
            return run[0], run[1], None, urgent
        account = self.pool.account
        seen = account.seen
        own, charged = self._sizes()
        reservation = account.reserve(own, stop, self._policy, urgent=urgent, charged_in=charged or 0)
        ready = None
        if not seen:  # taken on a guess: topped up to the probe's size once known, before the call
            ready = self._topping_up(reservation, charged or 0, stop, urgent)
            if account.seen:
                ready(True)
                ready = None
        return reservation, charged, ready, urgent

    def _topping_up(self, reservation: Reservation, charged: int, stop: Flag, urgent: Any
                    ) -> Callable[[bool], bool]:
        """For a reservation taken on the estimate of a stage that had no element yet: the top-up to the size
        its first element (the probe) gave, once known, run right before the call (``Executor.call``'s
        ``ready``: calls admitted while the first one still started its worker process wait for a worker
        inside the executor). The output would otherwise be charged only once it exists (4 calls of 12 MiB
        outputs under a 16 MiB budget held 24 MiB; 24 MiB outputs on 4 processes under 128 MiB, 131 MiB)."""
        account = self.pool.account

        def top_up(wait: bool) -> bool:
            more = self._estimate() - charged - reservation.nbytes if account.seen else 0
            if more <= 0:
                return True
            if not wait:
                return reservation.try_top_up(more, urgent=urgent())
            reservation.top_up(more, stop, urgent=urgent, policy=self._top_up_policy)
            return True
        return top_up

    def _finish(self, gen: int, stop: Flag, seq: int, pulled: list[Any], reservation: Reservation,
                stats: PoolStats, ready: Callable[[bool], bool] | None, mode: int) -> None:
        """Apply ``fn`` to the run pulled from ``seq`` as ``mode`` says (``ElementSteps.run_mode``), settle its
        reservation once and store its results in the window under one lock (numbers a restore skips are dropped
        first)."""
        pool, window = self.pool, self.window
        skip, measure = window.skip, not (pool.identity or pool.input_charged)
        for i, entry in enumerate(pulled):
            x, error = entry
            if skip and seq + i in skip:  # delivered before the state this run was restored from
                if error is None and pool.release_input is not None:
                    pool.release_input(x)
                window.drop_skipped(seq + i)
                pulled[i] = None
            elif measure and error is None:
                n_in = nbytes(x)
                if n_in > self._in_max:
                    self._in_max = n_in
            x = entry = None
        try:
            results = self.steps.apply_pulled(pulled, seq, stop, stats, ready, mode)
        except (Cancelled, MemoryBudgetError):
            reservation.cancel()
            raise
        if results is None:  # stopped inside the run
            reservation.cancel()
            return
        stored = [(seq + i, r) for i, r in enumerate(results) if r is not None]
        sizes = [r.nbytes for _, r in stored if r.error is None]
        done, total, largest = len(sizes), sum(sizes), max(sizes, default=0)
        if done:
            try:  # a call that needs more than the whole budget is refused before its excess is charged
                reservation.settle(total, count=done, largest=largest, need=self._need(largest))
            except MemoryBudgetError:
                reservation.cancel()
                raise
        else:
            reservation.cancel()
        with window.cv:
            if gen != self.gen or stop.is_set():
                if done:
                    pool.account.release(total, done)
                return
            window.store(seq, len(results), stored)

    # ---- shutdown ----------------------------------------------------------------------------------
    def signal_stop(self) -> None:
        """Stop this generation's workers (never blocks; they exit at their next check)."""
        window = self.window
        window.leave_lean()
        self.stop_flag.set()
        if window.cv.lock.acquire(timeout=0.2):
            try:
                window.notify_all()
            finally:
                window.cv.lock.release()

    def join(self, deadline: float) -> None:
        join_threads(self.threads, max(0.0, deadline - time.monotonic()))

    def alive_threads(self) -> list[threading.Thread]:
        self._stale = [t for t in self._stale if t.is_alive()]
        return [t for t in self.threads if t.is_alive()] + self._stale

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop, join (``timeout_s``), drop held results and start a new generation."""
        self.signal_stop()
        self.join(time.monotonic() + timeout_s)
        with self.window.cv:
            self.gen += 1
            self.window.drop_results()
            self.crash = None
        self._stale += [t for t in self.threads if t.is_alive()]
        self.threads = []
        self.stop_flag = Flag()
