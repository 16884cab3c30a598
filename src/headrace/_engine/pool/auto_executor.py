"""``executor="auto"`` (the default for ``map(num_parallel_calls=AUTOTUNE)``): the function's first calls are
measured on threads, then it stays on threads or moves to worker processes; the choice is checked again
while the stage runs and undone when it proved wrong. The figures and rules: :mod:`executor_choice`
(``headrace._engine.pool.executor_choice``); why: docs/design/pool.md.

The first measurement, on the first elements the stage computes anyway (after one warm-up call, not
counted): ``SOLO_CALLS`` calls one at a time, then calls two at a time for ``PAIR_MIN_S`` (at least ``PAIR_CALLS``,
each thread's first left out; ``first_verdict``). Processes are chosen when the stage has at least 2 workers and
``Options(cpu_budget)`` is at least 2, a call is CPU work and long enough, its two threads got no more than
``RELEASED_CORES`` together, and its calls on two threads waited for the GIL (``GIL_WAIT_SHARE``), got less than
``THREAD_SCALING`` times the CPU one call alone got, or ran back to back
(the GIL serialized them), the function pickles (cloudpickle) and a worker process fits the memory budget
(half of it for the estimate before a worker started; once one has computed, it and one call must fit the
budget beside one worker of every other process stage, else the stage goes back to threads for good).

The checks, every ``RECHECK_S`` for ``CHECK_S``, up to ``MAX_SWITCHES`` moves: on threads with 2 or more
workers, every call in the window is timed and the threads' cores judged again (``threads_wrong``: a
function that began to hold the GIL, or whose input sped up); on processes, the runs' rate against one
thread's and against the threads' measured rate (``processes_wrong``: below it, processes were wrong). A
move to threads drains the workers (the runs in flight finish there); a move to processes starts them side by
side (0.3-1 s) while the calls wait for them (computing on threads meanwhile would slow their start down).

The decision, its figures and each move are kept for the iteration (the stage made again for each ``repeat``
epoch reuses them and the workers) and reported by ``Iterator.explain()``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..._errors import MemoryBudgetError
from ..._memory import WAIT_SLICE_S, Cancelled
from ..._sync import Condition, Flag
from ..context import IteratorContext
from ..stage_support import join_threads, start_thread
from .executor import ExecutorKind, Finish, Outcome, ProcessExecutor, Ready, finished, outcome, run_delay_s
from .executor_choice import Call, CallLog, Solo, first_verdict, processes_wrong, threads_wrong
from .process_memory import WORKER_ESTIMATE_BYTES, process_extra_bytes

SOLO_CALLS = 4
PAIR_CALLS = 8
PAIR_MIN_S = 0.25
"""The calls two at a time are judged once they span this long (and number ``PAIR_CALLS``): the stage's first
tens of milliseconds are its pipeline's start (other stages filling, a thread's first call), in which two threads
of a JPEG decode that releases the GIL got 0.8-0.99 of a core together in 12 calls and looked GIL-bound."""
MEASURE_MAX_S = 3.0
"""Past this long without two overlapping calls (a slow input), the first measurement stops: threads."""
RECHECK_S = 2.0
"""Seconds between the end of one check (or the decision) and the next."""
CHECK_S = 0.5
"""How long a check times the calls (or runs); it is judged once it has ``CHECK_MIN`` of them."""
CHECK_MIN = 8
MAX_SWITCHES = 2
"""Moves after the first decision (threads -> processes -> threads at most): a stage does not flap."""


class AutoExecutor:
    """Measure the first calls on threads, then stay on threads or move to processes, checked again while the
    stage runs (module docstring). ``thread_fn``: the call on a thread (normalized); ``finish`` as for
    :class:`~headrace._engine.pool.executor.ProcessExecutor`."""

    def __init__(self, fn: Callable[..., Any], thread_fn: Callable[[Any], Any], stage: str, ctx: IteratorContext,
                 workers: int, cpu_budget: int, *, finish: Finish | None = None) -> None:
        self.fn, self.thread_fn, self.finish = fn, thread_fn, finish
        self.stage, self.ctx = stage, ctx
        self.max_workers = self.active = workers
        self.cpu_budget = cpu_budget
        self.kind = ExecutorKind.MEASURING
        self.why = "measuring the first calls"
        self.measured: dict[str, Any] = {}
        self.moves: list[str] = []
        self._cv = Condition(f"{stage} executor measurement")
        self._running = 0
        self._warm = False
        self._solo = Solo()
        self._pair = CallLog(f"{stage} pair calls")
        self._check = CallLog(f"{stage} checked calls")
        self._check_from = float("inf")  # perf_counter: the current check window's start (inf: none due)
        self._switches = MAX_SWITCHES    # no checks until a measured decision allows them
        self._t0 = time.monotonic()
        self._procs: ProcessExecutor | None = None
        self._retired: list[ProcessExecutor] = []  # drained workers (their runs in flight finish there)
        self._starters: list[threading.Thread] = []
        self._stop_start = Flag()
        if workers < 2 or cpu_budget < 2:
            self._decide(ExecutorKind.THREAD, f"{min(workers, cpu_budget)} worker(s) may compute at once (num_parallel_"
                                              f"calls={workers}, cpu_budget={cpu_budget}): nothing to scale")

    # ---- calls -----------------------------------------------------------------------------------------
    def call(self, x: Any, index: int, stop: Flag | None, ready: Ready = None) -> Any:
        kind = self.kind
        procs = self._procs
        if kind is ExecutorKind.PROCESS and procs is not None:
            # While the workers start, calls wait for them; once drained (back to threads), on a thread.
            y = procs.compute(x, index, stop, self.thread_fn, ready=ready)
            self._maybe_check(procs)
        elif kind is ExecutorKind.MEASURING:
            y = self._measured_call(x, stop)
        elif time.perf_counter() >= self._check_from:
            y = self._checked_call(x)
        else:  # (on a thread the call starts at once: ``ready`` is for a call that waited for a worker)
            y = self.thread_fn(x)
        finish = self.finish
        return y if finish is None else finish(y)

    def call_run(self, xs: list[Any], indices: list[int], stop: Flag | None) -> list[Outcome]:
        procs = self._procs
        if self.kind is ExecutorKind.PROCESS and procs is not None:
            outs = procs.compute_run(xs, indices, stop, self.thread_fn)
            self._maybe_check(procs)
        else:
            outs = [outcome(self.thread_fn, x) for x in xs]
        return finished(outs, self.finish)

    def run_length(self, call_bytes: int) -> int:
        procs = self._procs
        return procs.run_length(call_bytes) if self.kind is ExecutorKind.PROCESS and procs is not None else 1

    def _timed(self, x: Any, log: CallLog | None) -> Any:
        """``thread_fn(x)``, timed: into ``log`` (start, end, cpu, run delay) or, without one, as a solo call."""
        w0, c0, d0 = time.perf_counter(), time.thread_time(), run_delay_s()
        try:
            return self.thread_fn(x)
        finally:
            w1, cpu, d1 = time.perf_counter(), time.thread_time() - c0, run_delay_s()
            if log is not None:
                log.add(w0, w1, cpu, d0, d1, threading.get_ident())
            else:  # the wall time the thread could run: without the time it waited for a core (machine load)
                self._solo.calls.append((w1 - w0, cpu, w1 - w0 - min(w1 - w0 - cpu, max(0.0, d1 - d0))))

    def _measured_call(self, x: Any, stop: Any) -> Any:
        cv = self._cv
        with cv:
            while self.kind is ExecutorKind.MEASURING and self._running >= (
                    1 if len(self._solo.calls) < SOLO_CALLS else 2):
                if stop is not None and stop.is_set():
                    raise Cancelled()
                cv.wait(WAIT_SLICE_S)
            warm, solo = self._warm, len(self._solo.calls) < SOLO_CALLS
            self._warm = True  # the first call (imports, caches, lazy set-up) is not a typical one
            self._running += 1
        try:
            return self.thread_fn(x) if not warm else self._timed(x, None if solo else self._pair)
        finally:
            with cv:
                self._running -= 1
                if warm and self.kind is ExecutorKind.MEASURING:
                    self._maybe_decide()
                cv.notify_all()

    def _checked_call(self, x: Any) -> Any:
        """A call on threads during a check window, timed; the window judged once it is over."""
        try:
            return self._timed(x, self._check)
        finally:
            if time.perf_counter() >= self._check_from + CHECK_S and len(self._check.calls) >= CHECK_MIN:
                with self._cv:
                    if self.kind is ExecutorKind.THREAD and time.perf_counter() >= self._check_from:
                        taken, threads = self._check.take()
                        calls = [c for c in taken if c[0] >= self._check_from]
                        self._check_from = self._next_check()
                        self._judge_threads(calls, threads)

    def _maybe_check(self, procs: ProcessExecutor) -> None:
        """On processes: open a check window when one is due, judge it once it is over."""
        now = time.perf_counter()
        if now < self._check_from:
            return
        log = procs.runs
        if not log.recording:
            with self._cv:
                if not log.recording:
                    log.take()
                    self._check_from = now
                    log.recording = True
            return
        if now < self._check_from + CHECK_S or len(log.runs) < CHECK_MIN:
            return
        with self._cv:
            if not log.recording or self._procs is not procs:
                return
            log.recording = False
            runs = log.take()
            self._check_from = self._next_check()
            wrong, why, figures = processes_wrong(runs, self._solo, self.measured.get("thread_rate"))
            self.measured["last_check"] = figures
            if wrong:
                self._to_threads(f"moved back to threads: {why}")

    def _next_check(self) -> float:
        return time.perf_counter() + RECHECK_S if self._switches < MAX_SWITCHES else float("inf")

    def _judge_threads(self, calls: list[Call], threads: int) -> None:
        """Lock held: a check window on threads is over (``threads``: how many threads made the ``calls``;
        one, e.g. the consumer's on the inline path, has nothing to scale)."""
        if threads < 2 or len(calls) < CHECK_MIN:
            return
        wrong, why, figures = threads_wrong(calls, self._solo)
        self.measured["last_check"] = figures
        if wrong:
            self._to_processes(f"moved to processes: {why}")

    # ---- the decision ----------------------------------------------------------------------------------
    def _maybe_decide(self) -> None:
        """Lock held."""
        solo = self._solo
        if len(solo.calls) < SOLO_CALLS:
            return
        pair = self._pair.settled(PAIR_CALLS, PAIR_MIN_S)  # (the lock: no adds now)
        kind, why, figures = first_verdict(solo, pair)
        self.measured.update(figures, calls_measured=len(solo.calls) + len(self._pair.calls))
        if kind is None:
            if time.monotonic() - self._t0 > MEASURE_MAX_S:
                self._switches = 0
                self._decide(ExecutorKind.THREAD, "two calls never ran at once while measuring (the input is "
                                                  "slower than the function)")
            return
        if pair:  # decided on how threads ran it: checked while the stage runs (a call that waits, or one too
            self._switches = 0  # short for a process, stays on threads for good: its calls go direct, lean)
        if kind == "thread":
            self._decide(ExecutorKind.THREAD, why)
        else:
            self._to_processes(why)

    def _to_processes(self, why: str) -> None:
        """Lock held: start worker processes (the calls wait for them), or stay on threads saying why not."""
        try:
            self._make_processes(why)
        except (TypeError, MemoryBudgetError) as e:
            self._switches = MAX_SWITCHES
            self._decide(ExecutorKind.THREAD, f"would use processes ({why}) but {e}")
            return
        self._decide(ExecutorKind.PROCESS, why)

    def _to_threads(self, why: str) -> None:
        """Lock held: back to threads; the workers drain (the runs in flight finish on them, then they end)."""
        procs = self._procs
        self._decide(ExecutorKind.THREAD, why)
        if procs is not None:
            self._procs = None
            self._retired.append(procs)
            procs.drain()

    def _make_processes(self, why: str) -> None:
        budget = self.ctx.budget
        if budget.limit_bytes * 0.5 < WORKER_ESTIMATE_BYTES:
            raise MemoryBudgetError(f"a worker process (~{WORKER_ESTIMATE_BYTES >> 20} MiB) does not fit half of "
                                    f"the memory budget ({budget.limit_bytes >> 20} MiB)")
        workers = min(self.max_workers, self.cpu_budget)
        # refuse_growth=False: a worker that grows past the budget sends this stage back to threads
        procs = self._procs = ProcessExecutor(self.fn, self.stage, self.ctx, workers, why, self.measured,
                                              refuse_growth=False)
        procs.set_workers(min(max(1, self.active), self.cpu_budget))
        stop = self._stop_start

        def start_one() -> None:
            try:
                if not stop.is_set():
                    procs.prestart(stop)
            except Exception:  # a start-up failure surfaces in the calls (they start workers again)
                return

        # one thread per worker: the interpreters start side by side (each takes 0.3-1 s)
        self._starters = [start_thread(f"{self.stage}-process-start-{i}", start_one, None) for i in range(workers)]

    def _decide(self, kind: ExecutorKind, why: str) -> None:
        first = self.kind is ExecutorKind.MEASURING
        self.why = why
        self.kind = kind
        if first:
            self.measured["decided_after_s"] = round(time.monotonic() - self._t0, 3)
        else:
            self._switches += 1
            self.moves.append(f"after {time.monotonic() - self._t0:.1f} s: {why}")
        self._check_from = self._next_check()

    # ---- the rest of the executor interface -------------------------------------------------------------
    @property
    def settling(self) -> bool:
        """Still measuring, or moved to processes that are still starting (the tuner waits meanwhile)."""
        return self.kind is ExecutorKind.MEASURING or any(t.is_alive() for t in self._starters)

    @property
    def final(self) -> bool:
        """On threads for good (no check will move it): the pool may call the function directly."""
        return self.kind is ExecutorKind.THREAD and self._switches >= MAX_SWITCHES

    def extra_bytes(self, out_bytes: int) -> int:
        return process_extra_bytes(out_bytes) if self.kind is ExecutorKind.PROCESS else 0

    def set_workers(self, n: int) -> None:
        self.active = n
        if self._procs is not None:
            self._procs.set_workers(min(n, self.cpu_budget))

    def refusal(self, call_bytes: int, result_bytes: int) -> str | None:
        procs = self._procs
        if self.kind is not ExecutorKind.PROCESS or procs is None:
            return None
        return procs.refusal(call_bytes, result_bytes)

    def check_fits(self, call_bytes: int) -> None:
        """A worker process that turned out not to fit the budget (measured, with one call): back to threads
        for good (the calls in flight finish on their processes, which then end)."""
        procs = self._procs
        if self.kind is not ExecutorKind.PROCESS or procs is None:
            return
        try:
            procs.check_fits(call_bytes)
        except MemoryBudgetError as e:
            with self._cv:
                if self.kind is ExecutorKind.PROCESS:
                    self._switches = MAX_SWITCHES - 1
                    self._to_threads(f"moved back to threads: {e}")

    def memory_limited(self, within_s: float) -> bool:
        procs = self._procs
        return procs is not None and procs.memory_limited(within_s)

    def report(self) -> dict[str, Any]:
        moves = {"moves": list(self.moves)} if self.moves else {}
        procs = self._procs
        if self.kind is ExecutorKind.PROCESS and procs is not None:
            return {**procs.report(), "why": f"auto: {self.why}", **moves}
        return {"executor": str(self.kind), "why": f"auto: {self.why}", "measured": dict(self.measured), **moves}

    def rss_bytes(self) -> int:
        return sum(p.rss_bytes() for p in self._all_procs())

    def threads(self) -> list[threading.Thread]:
        return [t for t in self._starters if t.is_alive()]

    def _all_procs(self) -> list[ProcessExecutor]:
        return [*self._retired, *([self._procs] if self._procs is not None else [])]

    def close(self) -> None:
        self._stop_start.set()
        join_threads(self._starters, 1.0)
        for procs in self._all_procs():
            procs.close()
