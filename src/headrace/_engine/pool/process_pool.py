"""Worker processes for ``map`` functions that hold the GIL: start, call, crash detection, shutdown.

The coordinator stays :class:`~headrace._engine.pool.parallel.ParallelApplier` (ordering, window, reservations,
state, stop flags): each of its worker threads hands its element, or a run of consecutive elements in one
message (:meth:`_Proc.run`), to a worker process checked out of :class:`ProcessWorkers` and waits, in timed
slices, for the results. This module is the function side.

Processes
---------
A worker is a fresh interpreter running ``proc_child.py`` (``subprocess`` ``exec``: the *spawn* start
method; the threaded parent is never forked into Python code), started by ``proc_child.child_command`` with
no headrace directory and no working directory on its ``sys.path`` (a user's ``random.py`` in the working
directory cannot shadow ``random``): it runs in any working directory, venv or installed wheel, and gets
the parent's environment and working directory unchanged. It receives the pickled function
(``cloudpickle``: lambdas and closures work), the parent's ``sys.path`` and ``sys.argv`` **once**, in its
``init`` message (what ``multiprocessing``'s spawn gives a child, but the main module: the function is
pickled by value when it is defined there, and the script's top level is not run again); elements then
cross as described in :mod:`headrace._engine.pool.process_child` (numpy data through its shared-memory segments, the
rest pickled with protocol 5). Workers belong to the iterator, not to the
stage: the stage made again for each ``repeat`` epoch reuses them (started once per iteration).

Memory (every byte charged to the pipeline's budget, ``headrace._memory``)
-------------------------------------------------------------------------
A worker (its RSS and its shared-memory segments) is charged before it exists, a further worker starts
only where its charge fits the budget now and the workers of all stages stay within half of it, a
segment that must grow ends idle workers before it waits for room, and a stall of the budget ends an idle
worker beyond the stage's first before anything is overdrawn: :mod:`headrace._engine.pool.process_memory`.
An element's own bytes are in the parallel stage's account as with threads, plus one more output for the
copy the worker holds while it is sent (``process_extra_bytes``). So the sum of the parent's and the
workers' RSS stays inside the budget.

Reliability
-----------
- A call waits for its result in ``WAIT_SLICE_S`` slices, checking the stop flag and whether the process
  is alive: a worker that dies raises :class:`~headrace.WorkerError` naming the stage, the element (in a run:
  the one its progress word names) and the signal (or exit status) within a slice or two of the death, never
  a hang. The dead worker is reaped and replaced on the next call.
- An exception in the function comes back as the same type (``cloudpickle``; else ``RuntimeError`` with
  its type and message) with the worker's traceback as ``__cause__`` (:class:`~headrace.RemoteTraceback`).
- A call abandoned by ``close()`` / ``set_state()`` kills its worker (its answer would be out of step).
- ``close()`` (and interpreter exit, via the iterator) ends every worker: ``exit`` message, then
  ``SIGKILL`` for any still running after ``EXIT_GRACE_S``, and reaps them (``waitpid``). Segment names
  never outlive their creation (unlinked at once; the pages go with the last file descriptor), so
  nothing is left in ``/dev/shm`` even after a ``SIGKILL`` of the parent; a worker whose parent died
  exits by itself (end of file on its socket, or its parent pid changes).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..._errors import MemoryBudgetError, WorkerError
from ..._memory import WAIT_SLICE_S, Cancelled, MemoryBudget, Reservation
from ..._sync import Condition
from .process_memory import WorkerMemory
from .process_worker import START_TIMEOUT_S, RunResult, _Proc, _reap, _RunFault, end_all

__all__ = ["EXIT_GRACE_S", "RETIRE_S", "START_TIMEOUT_S", "ProcessWorkers", "RunResult", "_Proc", "_RunFault"]

EXIT_GRACE_S = 0.2
RETIRE_S = 5.0
"""Idle workers beyond a lowered ``target`` end after this long (see ``ProcessWorkers.set_target``)."""


# ---- the workers of one stage ------------------------------------------------------------------------
class ProcessWorkers:
    """The worker processes of one ``map`` stage: checked out by the pool's threads one call at a time.

    ``target`` (adjustable: the autotuner sets it) is how many may compute at once; a call takes an idle
    one while fewer are busy, starts one when none is idle, fewer exist and the budget has room for it
    (``proc_memory``: asked first, never overdrawn for a further worker), else waits (timed) for one to
    come back. Lowering ``target`` keeps the idle workers beyond it for ``RETIRE_S`` (the tuner often puts
    it back), then ends them. Thread-safe.
    """

    def __init__(self, fn: Callable[..., Any], stage: str, budget: MemoryBudget, owner: object,
                 target: int, fn_bytes: bytes, *, warnings: Any = None, refuse_growth: bool = True) -> None:
        """``warnings``: where the workers' budget warnings queue (``headrace._warn``); ``refuse_growth``
        (``proc_memory``): False for an ``"auto"`` stage, which goes back to threads instead."""
        self.fn = fn
        self.stage = stage
        self.fn_bytes = fn_bytes
        self.target = max(1, int(target))
        self.memory = WorkerMemory(budget, stage, owner)
        self.memory.account.warnings = warnings
        self.memory.refuse_growth = refuse_growth
        self._cv = Condition(f"{stage} worker processes")
        self._idle: list[_Proc] = []
        self._all: list[_Proc] = []
        self._starting = 0
        self._closed = False
        self._draining = False  # no more calls will come (an "auto" executor went back to threads)
        self._excess_since: float | None = None  # when target went below the workers that exist
        self.started = 0
        self.crashes = 0
        self.cpu_s = 0.0
        self.elements = 0  # computed (their CPU time is cpu_s)
        self.runs = 0      # messages that carried them
        self.start_s: list[float] = []
        self.memory.shed_by(self.shed_idle)

    # -- memory (what each worker is charged: ``self.memory``) ------------------------------------------
    def shed_idle(self) -> int:
        """At a stall of the budget (``MemoryBudget.shed``, its lock let go): end an idle worker beyond the
        stage's first (``_shed``); the bytes given back (0: this lock is busy, none is idle, or one is left)."""
        lock = self._cv.lock
        if not lock.acquire(False):  # (never waits: the thread at the stall may hold it)
            return 0
        try:
            if self._closed or not self._idle or len(self._all) < 2:
                return 0
            return self._shed(self._idle.pop(0))
        finally:
            lock.release()

    def _shed(self, proc: _Proc) -> int:
        """Lock held: end ``proc`` (idle, or its run done) for lack of budget, at most the others from now on
        (``WorkerMemory.shed_to``); the bytes it gave back."""
        freed = proc.footprint
        if proc in self._all:
            self._all.remove(proc)
        self._drop(proc, graceful=True)
        self.memory.shed_to(len(self._all))
        return freed

    def retire_one_idle(self) -> bool:
        """End one idle worker (its bytes go back); False when none is idle."""
        with self._cv:
            if not self._idle:
                return False
            proc = self._idle.pop(0)
            self._all.remove(proc)
            self._drop(proc, graceful=True)
            return True

    def _admit(self) -> tuple[bool, Reservation | None]:
        """Lock held: whether one more worker may start, and its reservation (None: the stage's first
        worker, which waits for its reservation in ``_start``)."""
        cap = self.target if self.memory.cap is None else min(self.target, self.memory.cap)
        if len(self._all) + self._starting >= cap:
            return False, None
        if not self._all and not self._starting:
            return True, None
        reserved = self.memory.try_reserve_another()
        return reserved is not None, reserved

    def _start(self, stop: Any, reserved: Reservation | None) -> _Proc | None:
        """Start one worker (``reserved`` for it by ``_admit``, else reserved now: the stage's first) and wait
        until it has loaded the function; None when it came out larger than what fits (``WorkerMemory.started``:
        it is ended)."""
        mem = self.memory
        floor = reserved is not None
        if reserved is None:
            reserved = mem.reserve_first(stop)
        t0 = time.monotonic()
        try:
            proc = _Proc(self)
        except BaseException:
            reserved.cancel()
            raise
        try:
            proc.wait_ready(stop)
        except BaseException:
            reserved.cancel()
            proc.kill()
            _reap(proc)
            raise
        with self._cv:
            alone = not self._all and self._starting <= 1
        if not mem.started(proc, reserved, proc.rss() or reserved.nbytes, floor, alone):
            proc.kill()
            _reap(proc)
            return None
        self.started += 1
        self.start_s.append(time.monotonic() - t0)
        return proc

    # -- checkout -------------------------------------------------------------------------------------
    def checkout(self, stop: Any, wait: bool = True) -> _Proc | None:
        """An idle worker; a new one when none is idle and fewer than ``target`` exist; else wait (timed,
        until ``stop``) or, with ``wait=False``, None; None once draining (``drain``)."""
        while True:
            with self._cv:
                while True:
                    if self._closed:
                        raise Cancelled()
                    if self._draining:
                        return None
                    self._retire_excess()
                    if self._idle and len(self._all) - len(self._idle) < self.target:
                        return self._idle.pop()
                    may, reserved = self._admit()
                    if may:
                        self._starting += 1
                        self.memory.set_workers(len(self._all) + self._starting)
                        break
                    if not wait:
                        return None
                    if stop is not None and stop.is_set():
                        raise Cancelled()
                    self._cv.wait(WAIT_SLICE_S)
            proc = self._start_counted(stop, reserved)
            if proc is None:
                continue  # it came out too large to start beside the others: wait for one of them
            with self._cv:
                if self._closed:
                    self._drop(proc)
                    raise Cancelled()
                self._all.append(proc)
            return proc

    def _start_counted(self, stop: Any, reserved: Reservation | None) -> _Proc | None:
        """``_start``, counted in ``_starting`` while it runs (the caller counted it in)."""
        try:
            proc = self._start(stop, reserved)
        finally:
            with self._cv:
                self._starting -= 1
                self.memory.set_workers(len(self._all) + self._starting)
                self._cv.notify_all()
        return proc

    def prestart(self, stop: Any) -> bool:
        """Start one more idle worker if fewer than ``target`` exist; False when none was started."""
        with self._cv:
            may, reserved = (False, None) if self._closed else self._admit()
            if not may:
                return False
            self._starting += 1
            self.memory.set_workers(len(self._all) + self._starting)
        proc = self._start_counted(stop, reserved)
        if proc is None:
            return False
        with self._cv:
            if self._closed:
                self._drop(proc)
                return False
            self._all.append(proc)
            self._idle.append(proc)
            self._cv.notify()
        return True

    def checkin(self, proc: _Proc) -> None:
        with self._cv:
            if self._closed or self._draining:
                self._all.remove(proc)
                self._drop(proc, graceful=True)
            else:
                self._idle.append(proc)
                self._retire_excess()
            self._cv.notify()

    def drain(self) -> None:
        """No more calls will come: the idle workers end now, the busy ones when their call is done."""
        with self._cv:
            self._draining = True
            while self._idle:
                proc = self._idle.pop()
                self._all.remove(proc)
                self._drop(proc, graceful=True)

    def _retire_excess(self) -> None:
        """Lock held: end idle workers beyond ``target`` once it has been lower for ``RETIRE_S`` (the tuner's
        trial of fewer workers is often undone: a worker kept idle meanwhile saves a 0.3-1 s restart)."""
        since = self._excess_since
        if since is None or time.monotonic() - since < RETIRE_S:
            return
        while self._idle and len(self._all) > self.target:
            proc = self._idle.pop(0)
            self._all.remove(proc)
            self._drop(proc, graceful=True)
        if len(self._all) <= self.target:
            self._excess_since = None

    def discard(self, proc: _Proc) -> None:
        """A worker that died or was abandoned mid-call: kill, reap, give its bytes back."""
        with self._cv:
            if proc in self._all:
                self._all.remove(proc)
            self._drop(proc)
            self._cv.notify_all()

    def _drop(self, proc: _Proc, graceful: bool = False) -> None:
        if graceful:
            proc.ask_exit()
        else:
            proc.kill()
        _reap(proc, EXIT_GRACE_S if graceful else 0.0)
        self.memory.release(proc)
        self.memory.set_workers(len(self._all) + self._starting)

    # -- the call -------------------------------------------------------------------------------------
    def call(self, x: Any, index: int, stop: Any) -> Any:
        """``fn(x)`` in a worker process (tuples unpacked into arguments, as threads call it)."""
        proc = self.checkout(stop)
        if proc is None:  # draining: only an "auto" executor drains, and it does not call this
            raise Cancelled()
        values, errors, _times = self.run_on(proc, [x], [index], stop)
        if errors:
            raise errors[0]
        return values[0]

    def run_on(self, proc: _Proc, xs: list[Any], indices: list[int], stop: Any) -> RunResult:
        """``proc.run`` on a checked-out worker, which is checked in again (or discarded: it died, the call was
        abandoned, or it grew past the budget)."""
        try:
            out = proc.run(xs, indices, stop)
        except _RunFault as fault:
            if isinstance(fault.error, WorkerError):
                self.crashes += 1
                self.discard(proc)
            else:  # nothing was sent: the worker is fine
                self.checkin(proc)
            raise
        except BaseException:
            self.discard(proc)
            raise
        if self._remeasure(proc):
            self.checkin(proc)
        return out

    def _remeasure(self, proc: _Proc) -> bool:
        """``proc.remeasure()``: whether it stays. One grown past what fits beside the others now is ended when
        the stage has another (``_shed``); one grown past what the budget can hold (``MemoryBudgetError``) too."""
        with self._cv:
            alone = len(self._all) < 2
        try:
            if proc.remeasure(alone):
                return True
        except MemoryBudgetError:
            self.discard(proc)
            raise
        with self._cv:
            self._shed(proc)
        return False

    # -- reporting / shutdown -------------------------------------------------------------------------
    def pids(self) -> list[int]:
        with self._cv:
            return [p.pid for p in self._all]

    def rss_bytes(self) -> int:
        with self._cv:
            procs = list(self._all)
        return sum(p.rss() for p in procs)

    def set_target(self, n: int) -> None:
        """At most ``n`` workers compute from now on; idle ones beyond it end after ``RETIRE_S``."""
        with self._cv:
            self.target = max(1, int(n))
            if len(self._all) > self.target:
                if self._excess_since is None:
                    self._excess_since = time.monotonic()
            else:
                self._excess_since = None
            self._cv.notify_all()

    def close(self) -> None:
        """Stop and reap every worker (``exit``, then ``SIGKILL`` after ``EXIT_GRACE_S``); idempotent."""
        with self._cv:
            self._closed = True
            procs, self._all, self._idle = list(self._all), [], []
            self._cv.notify_all()
        end_all(procs, EXIT_GRACE_S)
        self.memory.close()
