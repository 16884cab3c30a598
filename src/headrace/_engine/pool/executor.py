"""Where a parallel ``map`` runs its function: threads, worker processes, or ``"auto"`` (measured).

``map(fn, num_parallel_calls=..., executor=...)`` / ``Options(map_executor=...)``:

- ``"thread"``: the pool's threads call ``fn`` (functions that release the GIL: numpy, OpenCV, decoders);
- ``"process"``: each pool thread hands its element to a worker process (:mod:`headrace._engine.pool.process_pool`)
  and waits for the result: for functions that hold the GIL (pure-Python loops, tokenizers, PIL chains);
- ``"auto"`` (the default for ``num_parallel_calls=AUTOTUNE``; an explicit number means threads): the
  first calls are measured on threads, then the function stays on threads or moves to processes.

``"auto"``'s measurement (:class:`AutoExecutor`), on the first elements the stage computes anyway (after
one warm-up call, not counted): *solo*: ``SOLO_CALLS`` calls one at a time, timing each call's wall time
and the CPU time of the calling thread; *pair*: ``PAIR_CALLS`` calls two at a time. From these: the CPU
share of a call (``cpu / wall``, the wall time less what the thread waited for a core while other processes
loaded the machine: :func:`run_delay_s`), how many calls really ran at once in the pair phase (``sum of walls
/ elapsed``), how much of the pair phase some call was running (``busy``: union of the calls / elapsed) and
the *slowdown* of a call when two run together (median pair wall / median solo wall).
Meanwhile a *GIL probe* thread sleeps 1 ms again and again and notes how late it wakes while a call runs:
a call that holds the GIL gives it up only after the switch interval (5 ms late), one that released it
(C code) lets the probe run at once (~0.1 ms). The probe decides "holds the GIL" (the slowdown only when
it got fewer than 5 samples): timings of the calls change with the machine's load, the probe's does not.
Processes are chosen when all of these hold (otherwise threads, and the report says which failed):

- the stage has at least 2 workers and ``Options(cpu_budget)`` is at least 2;
- a call is CPU work (``cpu / wall >= CPU_BOUND_SHARE``): a function that waits (I/O, sleep) overlaps on
  threads;
- two calls really overlapped (``>= MIN_OVERLAP``), or they ran back to back (``busy >= BACK_TO_BACK``):
  serialized, as calls shorter than the switch interval of a function that holds the GIL are; else the
  input is slower than the function (it leaves gaps between the calls);
- the calls hold the GIL (the probe waited ``>= GIL_HELD_SHARE`` of the switch interval);
- a call takes at least ``MIN_PROCESS_CALL_S`` (a process round trip costs about 0.1-0.3 ms);
- the function pickles (cloudpickle), and a worker process fits the memory budget (half of it for the
  estimate before a worker started; once one has computed, it and one call must fit the budget beside one
  worker of every other process stage, else the stage goes back to threads: the calls in flight finish on
  their processes, which then end).

The decision and its figures are kept for the iteration (the stage made again for each ``repeat`` epoch
reuses them and the workers) and reported by ``Iterator.explain()``. The worker processes start side
by side (0.3-1 s); calls wait for them (computing on threads meanwhile would slow their start down).

Every executor is an :class:`Executor` (:class:`ThreadExecutor`, :class:`ProcessExecutor`,
:class:`AutoExecutor`): the calls the pool (``headrace._engine.pool.parallel``), the tuner and ``explain()`` make.
Results of worker processes are normalized here, then go through the stage's ``finish`` (its
``output_signature`` conversion or traced-spec check), in the parent.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Protocol

from ..._errors import MemoryBudgetError
from ..._memory import WAIT_SLICE_S, Cancelled
from ..._structure import normalize
from ..._sync import Condition, Flag
from ..context import IteratorContext
from ..stage_support import join_threads, start_thread
from .process_memory import WORKER_ESTIMATE_BYTES, process_extra_bytes
from .process_pool import ProcessWorkers

EXECUTORS = ("auto", "thread", "process")
"""The values of ``map(executor=...)`` / ``Options(map_executor=...)``."""
THREAD_WHY = "executor='thread' or an explicit num_parallel_calls"
SOLO_CALLS = 4
PAIR_CALLS = 8
CPU_BOUND_SHARE = 0.25
"""A call below this CPU share waits (sleep, I/O: ~0.01-0.1). The share is of the time the thread could run
(``run_delay_s``: the time it waited for a core while other processes loaded the machine is left out), so a
CPU-bound call shows ~1.0 however loaded the machine is (uncorrected, it fell to 0.12 beside 3 busy
processes on 2 cores, and "auto" took a GIL-bound function for one that waits)."""
MIN_OVERLAP = 1.3
"""Two calls of a function that holds the GIL for longer than the switch interval run in 5 ms slices and
start staggered: their overlap is 1.45-2.0 with a fast input. Below it, either the input is slower than the
function (gaps between the calls) or the calls were serialized: a call shorter than the switch interval
holds the GIL from start to end, so two never run at once, back to back (``BACK_TO_BACK``)."""
BACK_TO_BACK = 0.8
"""Calls covering this share of the pair phase's span (the union of their intervals) ran back to back:
serialized, not starved by a slow input."""
GIL_SLOWDOWN = 1.4
MIN_PROCESS_CALL_S = 200e-6
GIL_PROBE_S = 0.001
GIL_HELD_SHARE = 0.4
"""The probe thread (module docstring) waking this share of ``sys.getswitchinterval()`` late or more (the
median) means the calls hold the GIL."""
MEASURE_MAX_S = 3.0
"""Past this long without two overlapping calls (a slow input), the measurement stops: threads."""


def validate_executor(value: object, what: str) -> None:
    if value is not None and value not in EXECUTORS:
        raise ValueError(f"{what}={value!r}: expected one of 'auto', 'thread', 'process' (or None for the "
                         "default: 'auto' with num_parallel_calls=AUTOTUNE, else 'thread')")


def pickle_function(fn: Callable[..., Any], stage: str) -> bytes:
    """``cloudpickle.dumps(fn)``, or ``TypeError`` naming the stage and the fix."""
    import cloudpickle

    try:
        return cloudpickle.dumps(fn)
    except Exception as e:
        raise TypeError(f"{stage}: the function cannot be sent to a worker process ({type(e).__name__}: {e}); "
                        "make it picklable (no open files, locks or sockets in its closure) or use "
                        "executor='thread'") from e


class ExecutorKind(StrEnum):
    """Where an executor runs the calls now."""

    THREAD = "thread"
    PROCESS = "process"
    MEASURING = "measuring"
    """``"auto"`` before its decision: the calls run on threads, measured."""


Ready = Callable[[bool], bool] | None
"""Called by ``Executor.call`` right before ``fn`` runs (the pool tops up a reservation taken on a guess):
``ready(wait)`` is True once the call may run; with ``wait=False`` it never blocks (False: not yet), so a call
holding a worker process gives it back before it waits for memory."""

Finish = Callable[[Any], Any]
"""A stage's conversion of each result in the parent (``output_signature``, the traced-spec check)."""


class Executor(Protocol):
    """Where a parallel ``map`` runs its calls. The pool calls ``call``, ``extra_bytes``, ``check_fits``
    and ``set_workers``; the tuner reads ``kind``, ``settling`` and ``memory_limited``; ``explain()``
    ``report()``; an executor kept as the iteration's resource (``IteratorContext.resource``) is asked for
    its ``rss_bytes()`` and ``threads()`` and closed with the iterator."""

    @property
    def kind(self) -> ExecutorKind: ...

    @property
    def settling(self) -> bool:
        """Still measuring, or starting worker processes: the tuner leaves the stage alone meanwhile."""
        ...

    def call(self, x: Any, index: int, stop: Flag | None, ready: Ready = None) -> Any:
        """The stage's result for element ``x`` (number ``index``); ``stop``: the pool's stop flag; ``ready``:
        called once a call that waited for a worker process has one, before ``fn`` starts (threads ignore it:
        their calls start at once)."""
        ...

    def extra_bytes(self, out_bytes: int) -> int:
        """Bytes a call holds beyond its input and output (a process call: one more output)."""
        ...

    def check_fits(self, call_bytes: int) -> None:
        """Raise ``MemoryBudgetError`` (or move back to threads) when a call of ``call_bytes`` cannot fit."""
        ...

    def refusal(self, call_bytes: int, result_bytes: int) -> str | None:
        """(The budget's lock held, at a stall.) Why the pipeline cannot run in its budget when one worker,
        one call of ``call_bytes`` and one result of ``result_bytes`` waiting for the consumer do not fit
        (the stall breaker then refuses instead of overdrawing); None when they fit or no process runs."""
        ...

    def set_workers(self, n: int) -> None:
        """The pool runs ``n`` workers from now on."""
        ...

    def memory_limited(self, within_s: float) -> bool:
        """A worker start was refused for lack of budget in the last ``within_s`` s (the tuner adds none)."""
        ...

    def report(self) -> dict[str, Any]: ...

    def rss_bytes(self) -> int: ...

    def threads(self) -> list[threading.Thread]: ...

    def close(self) -> None: ...


class ThreadExecutor:
    """Calls ``fn`` (the stage's whole call, ``finish`` included) in the pool's own threads."""

    kind = ExecutorKind.THREAD
    settling = False

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def call(self, x: Any, index: int, stop: Flag | None, ready: Ready = None) -> Any:
        return self.fn(x)  # (a thread starts its call at once: nothing waits between reserve and call)

    def extra_bytes(self, out_bytes: int) -> int:
        return 0

    def check_fits(self, call_bytes: int) -> None:
        return None

    def refusal(self, call_bytes: int, result_bytes: int) -> str | None:
        return None

    def set_workers(self, n: int) -> None:
        return None

    def memory_limited(self, within_s: float) -> bool:
        return False

    def report(self) -> dict[str, Any]:
        return {"executor": str(self.kind), "why": THREAD_WHY}

    def rss_bytes(self) -> int:
        return 0

    def threads(self) -> list[threading.Thread]:
        return []

    def close(self) -> None:
        return None


class ProcessExecutor:
    """Calls ``fn`` in worker processes (created lazily by the first calls), then ``finish`` in the parent.

    ``finish`` is set by each build of the stage (``map``: the same conversion every time); one kept as a
    resource serves every ``repeat`` epoch of its stage."""

    kind = ExecutorKind.PROCESS
    settling = False

    def __init__(self, fn: Callable[..., Any], stage: str, ctx: IteratorContext, workers: int,
                 why: str = "executor='process'", measured: dict[str, Any] | None = None, *,
                 finish: Finish | None = None, refuse_growth: bool = True) -> None:
        self.stage = stage
        self.why = why
        self.measured = measured or {}
        self.finish = finish
        self.workers = ProcessWorkers(fn, stage, ctx.budget, ctx.tree, workers, pickle_function(fn, stage),
                                      warnings=ctx.tree.warnings, refuse_growth=refuse_growth)

    def call(self, x: Any, index: int, stop: Flag | None, ready: Ready = None) -> Any:
        y = self.compute(x, index, stop, ready=ready)
        return y if self.finish is None else self.finish(y)

    def compute(self, x: Any, index: int, stop: Flag | None, fallback: Callable[[Any], Any] | None = None,
                ready: Ready = None) -> Any:
        """``fn(x)`` in a worker process, normalized (not finished). Once the workers drain (``drain``):
        ``fallback(x)``, or ``Cancelled`` without one. ``ready()`` runs once a worker is checked out (a call
        waits here while the first ones start the workers: what it reserves is settled only now)."""
        proc = self._checkout_ready(stop, ready)
        if proc is None:
            if fallback is None:
                raise Cancelled()
            return fallback(x)
        return normalize(self.workers.call_on(proc, x, index, stop), self.stage)

    def _checkout_ready(self, stop: Flag | None, ready: Ready) -> Any:
        """A worker for a call that ``ready`` lets run: one that must wait for memory gives its worker back
        meanwhile (holding it would keep the call whose result frees the memory from starting)."""
        while True:
            proc = self.workers.checkout(stop)
            if ready is None:
                return proc
            try:
                if ready(proc is None):
                    return proc
            except BaseException:
                if proc is not None:
                    self.workers.checkin(proc)
                raise
            if proc is not None:
                self.workers.checkin(proc)
            ready(True)
            ready = None

    def prestart(self, stop: Flag) -> bool:
        """Start one more idle worker if fewer than the target exist (False: none was started)."""
        return self.workers.prestart(stop)

    def drain(self) -> None:
        """No more calls will come: the workers end as their calls finish."""
        self.workers.drain()

    def extra_bytes(self, out_bytes: int) -> int:
        return process_extra_bytes(out_bytes)

    def set_workers(self, n: int) -> None:
        self.workers.set_target(n)

    def check_fits(self, call_bytes: int) -> None:
        """``MemoryBudgetError`` when one worker and one call's bytes cannot fit the budget at all."""
        self.workers.check_fits(call_bytes)

    def refusal(self, call_bytes: int, result_bytes: int) -> str | None:
        return self.workers.memory.refusal(call_bytes, result_bytes)

    def memory_limited(self, within_s: float) -> bool:
        return self.workers.memory_limited(within_s)

    def report(self) -> dict[str, Any]:
        w = self.workers
        return {"executor": str(self.kind), "why": self.why, "measured": self.measured, "processes": len(w.pids()),
                "target_processes": w.target, "started": w.started, "crashes": w.crashes,
                "start_s": [round(s, 3) for s in w.start_s], "worker_rss_bytes": w.rss_bytes(),
                "worker_cpu_s": round(w.cpu_s, 3)}

    def rss_bytes(self) -> int:
        return self.workers.rss_bytes()

    def threads(self) -> list[threading.Thread]:
        return []

    def close(self) -> None:
        self.workers.close()


def run_delay_s() -> float:
    """Seconds the calling thread has waited for a core so far (Linux ``/proc/thread-self/schedstat``, its
    second field: time runnable on a run queue, not running); 0.0 where the system does not say."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def covered(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals (seconds)."""
    total, reach = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e > reach:
            total += e - max(s, reach)
            reach = e
    return total


class AutoExecutor:
    """Measure the first calls on threads, then stay on threads or move to processes (module docstring).
    ``thread_fn``: the call on a thread (normalized); ``finish`` as for :class:`ProcessExecutor`."""

    def __init__(self, fn: Callable[..., Any], thread_fn: Callable[[Any], Any], stage: str, ctx: IteratorContext,
                 workers: int, cpu_budget: int, *, finish: Finish | None = None) -> None:
        self.fn = fn
        self.thread_fn = thread_fn
        self.finish = finish
        self.stage = stage
        self.ctx = ctx
        self.max_workers = workers
        self.cpu_budget = cpu_budget
        self.kind = ExecutorKind.MEASURING
        self.why = "measuring the first calls"
        self.measured: dict[str, Any] = {}
        self._cv = Condition(f"{stage} executor measurement")
        self._running = 0
        self._warm = False
        self._probe: Any = None
        self._probe_late: list[float] = []  # how late the probe thread woke while a call ran
        self._solo: list[tuple[float, float, float]] = []   # (wall, cpu, runnable) per call
        self._pair: list[tuple[float, float, float]] = []  # (start, end, cpu)
        self._t0 = time.monotonic()
        self._procs: ProcessExecutor | None = None
        self._starters: list[Any] = []
        self._stop_start = Flag()
        if workers < 2 or cpu_budget < 2:
            self._on_threads(f"{min(workers, cpu_budget)} worker(s) may compute at once (num_parallel_calls="
                                   f"{workers}, cpu_budget={cpu_budget}): nothing to scale")

    # ---- calls -----------------------------------------------------------------------------------------
    def call(self, x: Any, index: int, stop: Flag | None, ready: Ready = None) -> Any:
        kind = self.kind
        procs = self._procs
        if kind is ExecutorKind.PROCESS and procs is not None:
            # While the workers start, calls wait for them: computing on threads meanwhile would take the cores
            # (and the GIL) the starting interpreters need, and start them 3-4x slower. Once it went back to
            # threads (the workers drain), on a thread.
            y = procs.compute(x, index, stop, self.thread_fn, ready=ready)
        else:  # (on a thread the call starts at once: ``ready`` is for a call that waited for a worker)
            y = self.thread_fn(x) if kind is not ExecutorKind.MEASURING else self._measured_call(x, stop)
        finish = self.finish
        return y if finish is None else finish(y)

    def _measured_call(self, x: Any, stop: Any) -> Any:
        cv = self._cv
        with cv:
            while self.kind is ExecutorKind.MEASURING and self._running >= (1 if len(self._solo) < SOLO_CALLS else 2):
                if stop is not None and stop.is_set():
                    raise Cancelled()
                cv.wait(WAIT_SLICE_S)
            solo = len(self._solo) < SOLO_CALLS
            self._running += 1
        w0, c0, d0 = time.perf_counter(), time.thread_time(), run_delay_s()
        try:
            return self.thread_fn(x)
        finally:
            w1, cpu = time.perf_counter(), time.thread_time() - c0
            # the wall time the thread could run: without the time it waited for a core (machine load)
            runnable = w1 - w0 - min(w1 - w0 - cpu, max(0.0, run_delay_s() - d0))
            with cv:
                self._running -= 1
                if not self._warm:  # the first call (imports, caches, lazy set-up) is not a typical one
                    self._warm = True
                    self._probe = start_thread(f"{self.stage}-gil-probe", self._probe_gil, None)
                elif self.kind is ExecutorKind.MEASURING:
                    if solo:
                        self._solo.append((w1 - w0, cpu, runnable))
                    else:
                        self._pair.append((w0, w1, cpu))
                    self._maybe_decide()
                cv.notify_all()

    def _probe_gil(self) -> None:
        """Sleep ``GIL_PROBE_S`` again and again while the calls are measured, noting how late it wakes while
        a call runs: a woken thread needs the GIL, which a call holding it gives up only after the switch
        interval (5 ms); a call in C code that released it lets the probe run at once. Unlike timing the
        calls, this does not change when other processes load the machine (a sleeper is woken promptly)."""
        late = self._probe_late
        deadline = time.monotonic() + MEASURE_MAX_S + 5.0
        while self.kind is ExecutorKind.MEASURING and not self._stop_start.is_set() and time.monotonic() < deadline:
            running = self._running > 0
            t = time.perf_counter()
            time.sleep(GIL_PROBE_S)
            if running and self._running > 0:
                late.append(time.perf_counter() - t - GIL_PROBE_S)

    # ---- the decision ----------------------------------------------------------------------------------
    def _maybe_decide(self) -> None:
        """Lock held."""
        solo = self._solo
        if not solo:
            return
        wall1 = statistics.median(w for w, _, _ in solo)  # medians: a call preempted by another process is an outlier
        share = sum(c for _, c, _ in solo) / max(1e-9, sum(r for _, _, r in solo))
        m = self.measured
        m.update(calls_measured=len(solo) + len(self._pair), solo_call_ms=round(wall1 * 1e3, 3),
                 cpu_share=round(share, 3))
        if len(solo) < SOLO_CALLS:
            return
        if share < CPU_BOUND_SHARE:
            self._on_threads(f"a call spends {share:.0%} of its time on the CPU (it waits: threads overlap it)")
            return
        if wall1 < MIN_PROCESS_CALL_S:
            self._on_threads(f"a call takes {wall1 * 1e6:.0f} us, less than a process round trip "
                                   f"(~{MIN_PROCESS_CALL_S * 1e6:.0f} us)")
            return
        pair = self._pair
        if len(pair) < PAIR_CALLS:
            if time.monotonic() - self._t0 > MEASURE_MAX_S:
                self._on_threads("two calls never ran at once while measuring (the input is slower than "
                                       "the function)")
            return
        t0 = min(s for s, _, _ in pair)
        t1 = max(e for _, e, _ in pair)
        walls = [e - s for s, e, _ in pair]
        overlap = sum(walls) / max(1e-9, t1 - t0)
        slowdown = statistics.median(walls) / max(1e-9, wall1)
        share2 = sum(c for _, _, c in pair) / max(1e-9, sum(walls))
        m.update(overlap=round(overlap, 2), slowdown=round(slowdown, 2), pair_cpu_share=round(share2, 3),
                 thread_speedup=round(overlap / slowdown, 2))
        late = list(self._probe_late)
        gil_wait = statistics.median(late) if len(late) >= 5 else None
        held = gil_wait is not None and gil_wait >= GIL_HELD_SHARE * sys.getswitchinterval()
        if gil_wait is not None:
            m.update(gil_wait_ms=round(gil_wait * 1e3, 2), gil_probes=len(late))
        busy = covered([(s, e) for s, e, _ in pair]) / max(1e-9, t1 - t0)
        m.update(busy=round(busy, 2))
        # calls that never ran at once but back to back were serialized (a call shorter than the switch
        # interval holds the GIL throughout), not starved by a slow input (which leaves gaps between them)
        serialized = overlap < MIN_OVERLAP and busy >= BACK_TO_BACK
        if overlap < MIN_OVERLAP and not serialized:
            self._on_threads(f"two calls overlapped only {overlap:.2f}x while measuring (the input is slower "
                                   "than the function)")
            return
        if gil_wait is not None and not held:
            self._on_threads(f"a thread waiting for the GIL got it after {gil_wait * 1e3:.2f} ms while a call "
                                   f"ran (it releases the GIL; 2 threads ran it {overlap / slowdown:.2f}x as fast "
                                   "as 1)")
            return
        if gil_wait is None and not serialized and slowdown < GIL_SLOWDOWN:
            self._on_threads(f"2 threads run it {overlap / slowdown:.2f}x as fast as 1 (it releases the GIL)")
            return
        how = (f"two calls never ran at once, back to back ({busy:.0%} of the time)" if serialized
               else f"a call slows {slowdown:.2f}x when two run")
        waited = f"; a thread waited {gil_wait * 1e3:.1f} ms for it" if held and gil_wait is not None else ""
        why = (f"2 threads run it only {overlap / slowdown:.2f}x as fast as 1 ({how}: it holds the GIL{waited}) "
               f"and a call is {share:.0%} CPU")
        try:
            fn_bytes_ok = self._make_processes(why)
        except (TypeError, MemoryBudgetError) as e:
            self._on_threads(f"would use processes ({why}) but {e}")
            return
        if fn_bytes_ok:
            self._decide(ExecutorKind.PROCESS, why)

    def _make_processes(self, why: str) -> bool:
        budget = self.ctx.budget
        if budget.limit_bytes * 0.5 < WORKER_ESTIMATE_BYTES:
            raise MemoryBudgetError(f"a worker process (~{WORKER_ESTIMATE_BYTES >> 20} MiB) does not fit half of "
                                    f"the memory budget ({budget.limit_bytes >> 20} MiB)")
        workers = min(self.max_workers, self.cpu_budget)
        # refuse_growth=False: a worker that grows past the budget sends this stage back to threads
        procs = self._procs = ProcessExecutor(self.fn, self.stage, self.ctx, workers, why, self.measured,
                                              refuse_growth=False)
        stop = self._stop_start

        def start_one() -> None:
            try:
                if not stop.is_set():
                    procs.prestart(stop)
            except Exception:  # a start-up failure surfaces in the calls (they start workers again)
                return

        # one thread per worker: the interpreters start side by side (each takes 0.3-1 s)
        self._starters = [start_thread(f"{self.stage}-process-start-{i}", start_one, None) for i in range(workers)]
        return True

    def _on_threads(self, why: str) -> None:
        self._decide(ExecutorKind.THREAD, why)

    def _decide(self, kind: ExecutorKind, why: str) -> None:
        self.why = why
        self.kind = kind
        self.measured["decided_after_s"] = round(time.monotonic() - self._t0, 3)

    # ---- the rest of the executor interface -------------------------------------------------------------
    @property
    def settling(self) -> bool:
        """Still measuring, or moved to processes that are still starting (the tuner waits meanwhile)."""
        return self.kind is ExecutorKind.MEASURING or any(t.is_alive() for t in self._starters)

    def extra_bytes(self, out_bytes: int) -> int:
        return process_extra_bytes(out_bytes) if self.kind is ExecutorKind.PROCESS else 0

    def set_workers(self, n: int) -> None:
        if self._procs is not None:
            self._procs.set_workers(min(n, self.cpu_budget))

    def refusal(self, call_bytes: int, result_bytes: int) -> str | None:
        procs = self._procs
        if self.kind is not ExecutorKind.PROCESS or procs is None:
            return None
        return procs.refusal(call_bytes, result_bytes)

    def check_fits(self, call_bytes: int) -> None:
        """A worker process that turned out not to fit the budget (measured, with one call): back to threads
        (the calls in flight finish on their processes, which then end)."""
        procs = self._procs
        if self.kind is not ExecutorKind.PROCESS or procs is None:
            return
        try:
            procs.check_fits(call_bytes)
        except MemoryBudgetError as e:
            with self._cv:
                if self.kind is ExecutorKind.PROCESS:
                    self._on_threads(f"moved back to threads: {e}")
            procs.drain()

    def memory_limited(self, within_s: float) -> bool:
        return self._procs is not None and self._procs.memory_limited(within_s)

    def report(self) -> dict[str, Any]:
        if self.kind is ExecutorKind.PROCESS and self._procs is not None:
            return {**self._procs.report(), "why": f"auto: {self.why}"}
        return {"executor": str(self.kind), "why": f"auto: {self.why}", "measured": dict(self.measured)}

    def rss_bytes(self) -> int:
        return self._procs.rss_bytes() if self._procs is not None else 0

    def threads(self) -> list[threading.Thread]:
        return [t for t in [*self._starters, self._probe] if t is not None and t.is_alive()]

    def close(self) -> None:
        self._stop_start.set()
        join_threads([t for t in [*self._starters, self._probe] if t is not None], 1.0)
        if self._procs is not None:
            self._procs.close()

