"""Where a parallel ``map`` runs its function: threads, worker processes, or ``"auto"`` (measured).

``map(fn, num_parallel_calls=..., executor=...)`` / ``Options(map_executor=...)``:

- ``"thread"``: the pool's threads call ``fn`` (functions that release the GIL: numpy, OpenCV, decoders);
- ``"process"``: each pool thread hands its element to a worker process (:mod:`headrace._engine.pool.process_pool`)
  and waits for the result: for functions that hold the GIL (pure-Python loops, tokenizers, PIL chains);
- ``"auto"`` (the default for ``num_parallel_calls=AUTOTUNE``; an explicit number means threads): the
  first calls are measured on threads, then the function stays on threads or moves to processes.

``"auto"``'s measurement and decision: :mod:`headrace._engine.pool.auto_executor` and
:mod:`headrace._engine.pool.executor_choice`. On worker processes, a pool thread hands over a *run* of
consecutive elements in one message (``run_length``: about ``RUN_TARGET_S`` of calls), each element keeping
its own sequence number, reservation and result (``call_run``).

Every executor is an :class:`Executor` (:class:`ThreadExecutor`, :class:`ProcessExecutor`,
:class:`~headrace._engine.pool.auto_executor.AutoExecutor`): the calls the pool
(``headrace._engine.pool.parallel``), the tuner and ``explain()`` make.
Results of worker processes are normalized here, then go through the stage's ``finish`` (its
``output_signature`` conversion or traced-spec check), in the parent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Protocol

from ..._memory import Cancelled
from ..._structure import normalize
from ..._sync import Flag, Lock
from ..context import IteratorContext
from .executor_choice import CPU_BOUND_SHARE, Run
from .process_memory import process_extra_bytes
from .process_pool import ProcessWorkers, _RunFault

__all__ = ["CPU_BOUND_SHARE", "EXECUTORS", "THREAD_WHY", "Executor", "ExecutorKind", "Finish", "Outcome",
           "ProcessExecutor", "Ready", "RunLog", "ThreadExecutor", "finished", "outcome", "pickle_function",
           "run_delay_s", "validate_executor"]

EXECUTORS = ("auto", "thread", "process")
"""The values of ``map(executor=...)`` / ``Options(map_executor=...)``."""
THREAD_WHY = "executor='thread' or an explicit num_parallel_calls"
RUN_TARGET_S = 0.016
"""A run of elements sent to a worker process in one message carries about this much computing (its
elements' measured CPU time): the round trip, the pickling and the wake-ups are paid once per run. With 4 ms
runs, two workers of a 1.4 ms loop computed 1.80 cores' worth and the parent took 0.17 of a core (its thread's
round trips); with 20 ms runs 1.90 and 0.08 (runs are also held to a worker's part of the window)."""
MAX_RUN = 64
RUN_MAX_BYTES = 8 * 1024**2
"""A run's elements (inputs and outputs, as reserved) stay below this many bytes: large elements go one by one."""


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

Outcome = tuple[Any, BaseException | None]
"""One element's outcome in a run: ``(result, None)`` or ``(None, error)``."""


class RunLog:
    """The runs a process executor completed while ``recording`` (``executor_choice.Run`` each: what
    ``executor_choice.processes_wrong`` judges). Thread-safe."""

    def __init__(self, name: str) -> None:
        self._lock = Lock(name)
        self.recording = False
        self.runs: list[Run] = []

    def note(self, run: Run) -> None:
        if self.recording:
            with self._lock:
                self.runs.append(run)

    def take(self) -> list[Run]:
        """The runs noted so far (the log starts empty again)."""
        with self._lock:
            runs, self.runs = self.runs, []
        return runs


def finished(outs: list[Outcome], finish: Finish | None) -> list[Outcome]:
    """``finish`` of each result of a run (what it raises is that element's error)."""
    if finish is None:
        return outs
    done: list[Outcome] = []
    for y, error in outs:
        if error is None:
            try:
                y = finish(y)
            except Exception as e:
                y, error = None, e
        done.append((y, error))
    return done


def outcome(fn: Callable[[Any], Any], x: Any) -> Outcome:
    """``(fn(x), None)``, or ``(None, error)`` when it raises an ``Exception``."""
    try:
        return fn(x), None
    except Exception as e:
        return None, e


class Executor(Protocol):
    """Where a parallel ``map`` runs its calls. The pool calls ``call``, ``call_run``, ``run_length``,
    ``extra_bytes``, ``check_fits`` and ``set_workers`` and reads ``final``; the tuner reads ``kind``,
    ``settling`` and ``memory_limited``; ``explain()``
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

    @property
    def final(self) -> bool:
        """The calls run on threads for good: the pool may call the function directly."""
        ...

    def call_run(self, xs: list[Any], indices: list[int], stop: Flag | None) -> list[Outcome]:
        """``call`` of each element of a run (numbers ``indices``), one ``Outcome`` each, in order; the whole
        run raises only ``Cancelled`` or what the pool's machinery raises (``MemoryBudgetError``)."""
        ...

    def run_length(self, call_bytes: int) -> int:
        """How many elements a pool thread should hand over at once (1: one by one), ``call_bytes`` each."""
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
    final = True

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def call(self, x: Any, index: int, stop: Flag | None, ready: Ready = None) -> Any:
        return self.fn(x)  # (a thread starts its call at once: nothing waits between reserve and call)

    def call_run(self, xs: list[Any], indices: list[int], stop: Flag | None) -> list[Outcome]:
        return [outcome(self.fn, x) for x in xs]

    def run_length(self, call_bytes: int) -> int:
        return 1

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
    final = False

    def __init__(self, fn: Callable[..., Any], stage: str, ctx: IteratorContext, workers: int,
                 why: str = "executor='process'", measured: dict[str, Any] | None = None, *,
                 finish: Finish | None = None, refuse_growth: bool = True) -> None:
        self.stage = stage
        self.why = why
        self.measured = measured or {}
        self.finish = finish
        self.workers = ProcessWorkers(fn, stage, ctx.budget, ctx.tree, workers, pickle_function(fn, stage),
                                      warnings=ctx.tree.warnings, refuse_growth=refuse_growth)
        self.runs = RunLog(f"{stage} runs")

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
        [(y, error)] = self._run_on(proc, [x], [index], stop, fallback)
        if error is not None:
            raise error
        return y

    def call_run(self, xs: list[Any], indices: list[int], stop: Flag | None) -> list[Outcome]:
        """``call`` of each element of a run (``xs``, numbers ``indices``) in one message each way: one
        ``(result, None)`` or ``(None, error)`` per element, in order."""
        return finished(self.compute_run(xs, indices, stop), self.finish)

    def compute_run(self, xs: list[Any], indices: list[int], stop: Flag | None,
                    fallback: Callable[[Any], Any] | None = None) -> list[Outcome]:
        """``compute`` of each element of a run on one worker. Once the workers drain: ``fallback`` of each."""
        proc = self.workers.checkout(stop)
        if proc is None:
            if fallback is None:
                raise Cancelled()
            return [outcome(fallback, x) for x in xs]
        return self._run_on(proc, xs, indices, stop, fallback)

    def _run_on(self, proc: Any, xs: list[Any], indices: list[int], stop: Flag | None,
                fallback: Callable[[Any], Any] | None) -> list[Outcome]:
        """The run on the checked-out ``proc``, normalized. An element that lost the run (the worker died on it,
        or it does not pickle): it gets that error, the others are computed again (they were not at fault)."""
        t0 = time.perf_counter()
        try:
            values, errors, (cpu, delay) = self.workers.run_on(proc, xs, indices, stop)
        except _RunFault as fault:
            j = fault.position
            rest = [i for i in range(len(xs)) if i != j]
            again = self.compute_run([xs[i] for i in rest], [indices[i] for i in rest], stop, fallback) if rest else []
            return [*again[:j], (None, fault.error), *again[j:]]
        self.runs.note((t0, time.perf_counter(), len(xs), cpu, delay))
        stage = self.stage
        outs: list[Outcome] = []
        for j, y in enumerate(values):
            error = errors.get(j)
            if error is None:
                try:
                    y = normalize(y, stage)
                except Exception as e:
                    y, error = None, e
            outs.append((y, error))
        return outs

    def run_length(self, call_bytes: int) -> int:
        """How many elements one message should carry: enough for ``RUN_TARGET_S`` of calls (as measured on
        the workers so far; 1 before any was), at most ``MAX_RUN`` and ``RUN_MAX_BYTES`` of elements."""
        w = self.workers
        if not w.elements:
            return 1
        per_call = w.cpu_s / w.elements
        k = int(RUN_TARGET_S / max(per_call, 1e-6))
        return max(1, min(k, MAX_RUN, RUN_MAX_BYTES // max(1, call_bytes)))

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
        self.workers.memory.check_fits(call_bytes)

    def refusal(self, call_bytes: int, result_bytes: int) -> str | None:
        return self.workers.memory.refusal(call_bytes, result_bytes)

    def memory_limited(self, within_s: float) -> bool:
        return self.workers.memory.memory_limited(within_s)

    def report(self) -> dict[str, Any]:
        w = self.workers
        return {"executor": str(self.kind), "why": self.why, "measured": self.measured, "processes": len(w.pids()),
                "target_processes": w.target, "started": w.started, "crashes": w.crashes,
                "start_s": [round(s, 3) for s in w.start_s], "worker_rss_bytes": w.rss_bytes(),
                "worker_cpu_s": round(w.cpu_s, 3), "elements": w.elements, "runs": w.runs,
                **({"shed_for_memory": w.memory.shed} if w.memory.shed else {})}

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
