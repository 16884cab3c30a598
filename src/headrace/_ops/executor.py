"""Where a parallel ``map`` runs its function: threads, worker processes, or ``"auto"`` (measured).

``map(fn, num_parallel_calls=..., executor=...)`` / ``Options(map_executor=...)``:

- ``"thread"``: the pool's threads call ``fn`` (functions that release the GIL: numpy, OpenCV, decoders);
- ``"process"``: each pool thread hands its element to a worker process (:mod:`headrace._ops.proc_pool`)
  and waits for the result: for functions that hold the GIL (pure-Python loops, tokenizers, PIL chains);
- ``"auto"`` (the default for ``num_parallel_calls=AUTOTUNE``; an explicit number means threads): the
  first calls are measured on threads, then the function stays on threads or moves to processes.

``"auto"``'s measurement (:class:`AutoExecutor`), on the first elements the stage computes anyway (after
one warm-up call, not counted): *solo*: ``SOLO_CALLS`` calls one at a time, timing each call's wall time
and the CPU time of the calling thread; *pair*: ``PAIR_CALLS`` calls two at a time. From these: the CPU
share of a call (``cpu / wall``), how many calls really ran at once in the pair phase (``sum of walls /
elapsed``) and the *slowdown* of a call when two run together (median pair wall / median solo wall).
Meanwhile a *GIL probe* thread sleeps 1 ms again and again and notes how late it wakes while a call runs:
a call that holds the GIL gives it up only after the switch interval (5 ms late), one that released it
(C code) lets the probe run at once (~0.1 ms). The probe decides "holds the GIL" (the slowdown only when
it got fewer than 5 samples): timings of the calls change with the machine's load, the probe's does not.
Processes are chosen when all of these hold (otherwise threads, and the report says which failed):

- the stage has at least 2 workers and ``Options(cpu_budget)`` is at least 2;
- a call is CPU work (``cpu / wall >= CPU_BOUND_SHARE``): a function that waits (I/O, sleep) overlaps on
  threads;
- two calls really overlapped (``>= MIN_OVERLAP``): else the input is slower than the function;
- the calls hold the GIL (the probe waited ``>= GIL_HELD_SHARE`` of the switch interval);
- a call takes at least ``MIN_PROCESS_CALL_S`` (a process round trip costs about 0.1-0.3 ms);
- the function pickles (cloudpickle), and a worker process fits the memory budget (half of it for the
  estimate before a worker started; once one has computed, it and one call must fit the budget beside one
  worker of every other process stage, else the stage goes back to threads: the calls in flight finish on
  their processes, which then end).

The decision and its figures are kept for the iteration (the stage made again for each ``repeat`` epoch
reuses them and the workers) and reported by ``Iterator.explain()``. The worker processes start side
by side (0.3-1 s); calls wait for them (computing on threads meanwhile would slow their start down).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from .._errors import MemoryBudgetError
from .._memory import WAIT_SLICE_S, Cancelled
from .._structure import normalize
from .._sync import Condition, Flag
from .base import IteratorContext, join_threads, start_thread
from .proc_memory import WORKER_ESTIMATE_BYTES, process_extra_bytes
from .proc_pool import ProcessWorkers

EXECUTORS = ("auto", "thread", "process")
SOLO_CALLS = 4
PAIR_CALLS = 8
CPU_BOUND_SHARE = 0.25
"""A call below this CPU share waits (sleep, I/O: ~0.01-0.1); a CPU-bound call on a loaded machine still
shows 0.3-0.6 (it is preempted), so the line sits well below 0.5."""
MIN_OVERLAP = 1.3
"""Two calls of a function that holds the GIL run in 5 ms slices and start staggered: their overlap is
1.45-2.0 with a fast input; an input slower than the function keeps it near 1.0-1.2."""
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


class ProcessExecutor:
    """Calls ``fn`` in worker processes (created lazily by the first calls)."""

    kind = "process"

    def __init__(self, fn: Callable[..., Any], stage: str, ctx: IteratorContext, workers: int,
                 why: str = "executor='process'", measured: dict[str, Any] | None = None) -> None:
        self.stage = stage
        self.why = why
        self.measured = measured or {}
        self.workers = ProcessWorkers(fn, stage, ctx.budget, ctx.owner, workers, pickle_function(fn, stage))
        self.workers.memory.account.warnings = ctx.warnings  # queued for the consumer (headrace._warn)

    def call(self, x: Any, index: int, stop: Any) -> Any:
        return normalize(self.workers.call(x, index, stop), self.stage)

    def extra_bytes(self, out_bytes: int) -> int:
        return process_extra_bytes(out_bytes)

    def set_workers(self, n: int) -> None:
        self.workers.set_target(n)

    def check_fits(self, call_bytes: int) -> None:
        """``MemoryBudgetError`` when one worker and one call's bytes cannot fit the budget at all."""
        self.workers.memory.check_fits(call_bytes)

    def memory_limited(self, within_s: float) -> bool:
        """A worker start was refused for lack of budget in the last ``within_s`` s (the tuner adds none)."""
        return self.workers.memory.memory_limited(within_s)

    def report(self) -> dict[str, Any]:
        w = self.workers
        return {"executor": "process", "why": self.why, "measured": self.measured, "processes": len(w.pids()),
                "target_processes": w.target, "started": w.started, "crashes": w.crashes,
                "start_s": [round(s, 3) for s in w.start_s], "worker_rss_bytes": w.rss_bytes(),
                "worker_cpu_s": round(w.cpu_s, 3)}

    def rss_bytes(self) -> int:
        return self.workers.rss_bytes()

    def close(self) -> None:
        self.workers.close()


class AutoExecutor:
    """Measure the first calls on threads, then stay on threads or move to processes (module docstring)."""

    def __init__(self, fn: Callable[..., Any], thread_fn: Callable[[Any], Any], stage: str, ctx: IteratorContext,
                 workers: int, cpu_budget: int) -> None:
        self.fn = fn
        self.thread_fn = thread_fn
        self.stage = stage
        self.ctx = ctx
        self.max_workers = workers
        self.cpu_budget = cpu_budget
        self.kind = "measuring"
        self.why = "measuring the first calls"
        self.measured: dict[str, Any] = {}
        self._cv = Condition(f"{stage} executor measurement")
        self._running = 0
        self._warm = False
        self._probe: Any = None
        self._probe_late: list[float] = []  # how late the probe thread woke while a call ran
        self._solo: list[tuple[float, float]] = []   # (wall, cpu) per call
        self._pair: list[tuple[float, float, float]] = []  # (start, end, cpu)
        self._t0 = time.monotonic()
        self._procs: ProcessExecutor | None = None
        self._starters: list[Any] = []
        self._stop_start = Flag()
        if workers < 2 or cpu_budget < 2:
            self._decide("thread", f"{min(workers, cpu_budget)} worker(s) may compute at once (num_parallel_calls="
                                   f"{workers}, cpu_budget={cpu_budget}): nothing to scale")

    # ---- calls -----------------------------------------------------------------------------------------
    def call(self, x: Any, index: int, stop: Any) -> Any:
        kind = self.kind
        if kind == "thread":
            return self.thread_fn(x)
        if kind == "process":
            procs = self._procs
            if procs is not None:
                # While the workers start, calls wait for them: computing on threads meanwhile would take the
                # cores (and the GIL) the starting interpreters need, and start them 3-4x slower.
                proc = procs.workers.checkout(stop)
                if proc is not None:  # None: it went back to threads meanwhile
                    return normalize(procs.workers.call_on(proc, x, index, stop), self.stage)
            return self.thread_fn(x)
        return self._measured_call(x, stop)

    def _measured_call(self, x: Any, stop: Any) -> Any:
        cv = self._cv
        with cv:
            while self.kind == "measuring" and self._running >= (1 if len(self._solo) < SOLO_CALLS else 2):
                if stop is not None and stop.is_set():
                    raise Cancelled()
                cv.wait(WAIT_SLICE_S)
            solo = len(self._solo) < SOLO_CALLS
            self._running += 1
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            return self.thread_fn(x)
        finally:
            w1, cpu = time.perf_counter(), time.thread_time() - c0
            with cv:
                self._running -= 1
                if not self._warm:  # the first call (imports, caches, lazy set-up) is not a typical one
                    self._warm = True
                    self._probe = start_thread(f"{self.stage}-gil-probe", self._probe_gil, None)
                elif self.kind == "measuring":
                    if solo:
                        self._solo.append((w1 - w0, cpu))
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
        while self.kind == "measuring" and not self._stop_start.is_set() and time.monotonic() < deadline:
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
        wall1 = statistics.median(w for w, _ in solo)  # medians: a call preempted by another process is an outlier
        share = sum(c for _, c in solo) / max(1e-9, sum(w for w, _ in solo))
        m = self.measured
        m.update(calls_measured=len(solo) + len(self._pair), solo_call_ms=round(wall1 * 1e3, 3),
                 cpu_share=round(share, 3))
        if len(solo) < SOLO_CALLS:
            return
        if share < CPU_BOUND_SHARE:
            self._decide("thread", f"a call spends {share:.0%} of its time on the CPU (it waits: threads overlap it)")
            return
        if wall1 < MIN_PROCESS_CALL_S:
            self._decide("thread", f"a call takes {wall1 * 1e6:.0f} us, less than a process round trip "
                                   f"(~{MIN_PROCESS_CALL_S * 1e6:.0f} us)")
            return
        pair = self._pair
        if len(pair) < PAIR_CALLS:
            if time.monotonic() - self._t0 > MEASURE_MAX_S:
                self._decide("thread", "two calls never ran at once while measuring (the input is slower than "
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
        if overlap < MIN_OVERLAP:
            self._decide("thread", f"two calls overlapped only {overlap:.2f}x while measuring (the input is slower "
                                   "than the function)")
            return
        if gil_wait is not None and not held:
            self._decide("thread", f"a thread waiting for the GIL got it after {gil_wait * 1e3:.2f} ms while a call "
                                   f"ran (it releases the GIL; 2 threads ran it {overlap / slowdown:.2f}x as fast "
                                   "as 1)")
            return
        if gil_wait is None and slowdown < GIL_SLOWDOWN:
            self._decide("thread", f"2 threads run it {overlap / slowdown:.2f}x as fast as 1 (it releases the GIL)")
            return
        why = (f"2 threads run it only {overlap / slowdown:.2f}x as fast as 1 (a call slows {slowdown:.2f}x when "
               f"two run: it holds the GIL" + (f"; a thread waited {gil_wait * 1e3:.1f} ms for it" if held else "")
               + f") and a call is {share:.0%} CPU")
        try:
            fn_bytes_ok = self._make_processes(why)
        except (TypeError, MemoryBudgetError) as e:
            self._decide("thread", f"would use processes ({why}) but {e}")
            return
        if fn_bytes_ok:
            self._decide("process", why)

    def _make_processes(self, why: str) -> bool:
        budget = self.ctx.budget
        if budget.limit_bytes * 0.5 < WORKER_ESTIMATE_BYTES:
            raise MemoryBudgetError(f"a worker process (~{WORKER_ESTIMATE_BYTES >> 20} MiB) does not fit half of "
                                    f"the memory budget ({budget.limit_bytes >> 20} MiB)")
        workers = min(self.max_workers, self.cpu_budget)
        self._procs = ProcessExecutor(self.fn, self.stage, self.ctx, workers, why, self.measured)
        procs = self._procs.workers
        procs.memory.refuse_growth = False  # a worker that grows past the budget sends this stage back to threads
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

    def _decide(self, kind: str, why: str) -> None:
        self.why = why
        self.kind = kind
        self.measured["decided_after_s"] = round(time.monotonic() - self._t0, 3)

    # ---- the rest of the executor interface -------------------------------------------------------------
    @property
    def settling(self) -> bool:
        """Still measuring, or moved to processes that are still starting (the tuner waits meanwhile)."""
        return self.kind == "measuring" or any(t.is_alive() for t in self._starters)

    def extra_bytes(self, out_bytes: int) -> int:
        return process_extra_bytes(out_bytes) if self.kind == "process" else 0

    def set_workers(self, n: int) -> None:
        if self._procs is not None:
            self._procs.set_workers(min(n, self.cpu_budget))

    def check_fits(self, call_bytes: int) -> None:
        """A worker process that turned out not to fit the budget (measured, with one call): back to threads
        (the calls in flight finish on their processes, which then end)."""
        procs = self._procs
        if self.kind != "process" or procs is None:
            return
        try:
            procs.check_fits(call_bytes)
        except MemoryBudgetError as e:
            with self._cv:
                if self.kind == "process":
                    self._decide("thread", f"moved back to threads: {e}")
            procs.workers.drain()

    def memory_limited(self, within_s: float) -> bool:
        return self._procs is not None and self._procs.memory_limited(within_s)

    def report(self) -> dict[str, Any]:
        if self.kind == "process" and self._procs is not None:
            return {**self._procs.report(), "why": f"auto: {self.why}"}
        return {"executor": self.kind, "why": f"auto: {self.why}", "measured": dict(self.measured)}

    def rss_bytes(self) -> int:
        return self._procs.rss_bytes() if self._procs is not None else 0

    def threads(self) -> list[Any]:
        return [t for t in [*self._starters, self._probe] if t is not None and t.is_alive()]

    def close(self) -> None:
        self._stop_start.set()
        join_threads([t for t in [*self._starters, self._probe] if t is not None], 1.0)
        if self._procs is not None:
            self._procs.close()

