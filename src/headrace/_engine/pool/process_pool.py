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
only where its charge fits the budget now and the workers of all stages stay within half of it, and a
segment that must grow ends idle workers before it waits for room: :mod:`headrace._engine.pool.process_memory`.
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

import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import psutil

from ..._errors import MemoryBudgetError, RemoteTraceback, WorkerError
from ..._memory import WAIT_SLICE_S, Cancelled, MemoryBudget, Reservation
from ..._sync import Condition
from .process_child import PROGRESS_BYTES, child_command, encode, receive_frames, send_value
from .process_memory import REMEASURE_S, WorkerMemory, create_segment, read_into, segment_size, write_all

START_TIMEOUT_S = 60.0
"""A worker that has not loaded the function after this long fails the call (``WorkerError``)."""
EXIT_GRACE_S = 0.2
RETIRE_S = 5.0
"""Idle workers beyond a lowered ``target`` end after this long (see ``ProcessWorkers.set_target``)."""


def _signal_text(code: int) -> tuple[str, int | None, int | None]:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}", -code, None
    return f"exited with status {code}", None, code


RunResult = tuple[list[Any], dict[int, BaseException], tuple[float, float]]
"""A run's results, its errors by position, and the worker's ``(cpu_s, delay_s)`` for it (``_Proc.run``)."""


class RunFault(Exception):
    """(Internal, never raised to the user.) The element at ``position`` of a run lost the run: the worker died
    computing it (``error``: its ``WorkerError``), or it could not be sent (``error``: why). The run's other
    elements were not lost by their own doing: the executor computes them again."""

    def __init__(self, position: int, error: BaseException) -> None:
        super().__init__(str(error))
        self.position = position
        self.error = error


def _unpicklable(xs: list[Any]) -> int:
    """The position of the first element of ``xs`` that does not pickle (0 if each does alone)."""
    for j, x in enumerate(xs):
        try:
            pickle.dumps(x, protocol=5)
        except Exception:
            return j
    return 0


def rebuild_exception(payload: bytes, type_name: str, message: str, text: str) -> BaseException:
    """The worker's exception (same type when it unpickles) with its traceback as ``__cause__``."""
    exc: BaseException | None = None
    if payload:
        try:
            exc = pickle.loads(payload)
        except Exception:
            exc = None
    if not isinstance(exc, BaseException):
        exc = RuntimeError(f"{type_name}: {message}")
    exc.__cause__ = RemoteTraceback(text)
    return exc


# ---- one worker --------------------------------------------------------------------------------------
class _Proc:
    """One worker process, its socket and its two segments (see ``proc_child``)."""

    def __init__(self, owner: ProcessWorkers) -> None:
        self.owner = owner
        parent, child = socket.socketpair()
        self.sock = parent
        self.conn = Connection(os.dup(parent.fileno()))
        # the progress word (process_child): where in its run the worker is, read after it died
        self.progress_fd = os.memfd_create("headrace-progress", os.MFD_CLOEXEC)
        os.ftruncate(self.progress_fd, PROGRESS_BYTES)
        env = dict(os.environ)
        if env.get("HEADRACE_MALLOC", "").lower() not in ("keep", "0", "off", "no"):
            env.setdefault("MALLOC_MMAP_THRESHOLD_", str(4 << 20))
            env.setdefault("MALLOC_TRIM_THRESHOLD_", str(4 << 20))
            env.setdefault("MALLOC_ARENA_MAX", "4")
        try:
            # a process group of its own: a Ctrl-C in the terminal (SIGINT to the foreground group) reaches the
            # parent, which decides, and never a worker still importing (which would die with a traceback)
            self.popen = subprocess.Popen(child_command(child.fileno(), self.progress_fd),
                                          pass_fds=[child.fileno(), self.progress_fd],
                                          stdin=subprocess.DEVNULL, env=env, close_fds=True, process_group=0)
        except BaseException:
            os.close(self.progress_fd)
            raise
        finally:
            child.close()
        self.pid = self.popen.pid
        self.segments: dict[str, tuple[int, int]] = {}  # role -> (fd, size)
        self.footprint = 0   # bytes charged in the owner's workers account
        self.floor = 0       # reserved on an estimate until the first call is measured (proc_memory)
        self.own = 0         # RSS without the segments
        self.ready = False
        self.cpu_s = 0.0
        self.calls = 0
        self._measured_s = 0.0
        try:
            self.conn.send_bytes(pickle.dumps(("init", list(sys.path), list(sys.argv), owner.fn_bytes, owner.stage),
                                              protocol=5))
        except OSError:
            pass  # it died while starting (killed, OOM): wait_ready's receive sees the EOF and says how

    # -- messages -------------------------------------------------------------------------------------
    def _recv(self, stop: Any, index: int | None, deadline: float | None = None,
              run: list[int] | None = None) -> Any:
        """The next message; a death raises ``WorkerError`` for element ``index`` (in a ``run``: the element it
        was computing, as ``RunFault``)."""
        while True:
            try:
                if self.conn.poll(WAIT_SLICE_S):
                    return pickle.loads(self.conn.recv_bytes())
            except (EOFError, OSError):
                raise self._crash(index, run) from None
            if stop is not None and stop.is_set():
                raise Cancelled()
            if self.popen.poll() is not None:
                raise self._crash(index, run)
            if deadline is not None and time.monotonic() > deadline:
                raise WorkerError(f"{self.owner.stage}: worker process {self.pid} did not load the function within "
                                  f"{START_TIMEOUT_S:.0f} s", stage=self.owner.stage, index=index)

    def _crash(self, index: int | None, run: list[int] | None) -> BaseException:
        """The death as ``WorkerError`` (outside a run), or as ``RunFault`` naming the element of ``run`` the
        worker was computing (its progress word)."""
        if run is None:
            return self._died(index)
        try:
            pos = min(max(0, int.from_bytes(os.pread(self.progress_fd, PROGRESS_BYTES, 0), sys.byteorder, signed=True)),
                      len(run) - 1)
        except OSError:
            pos = 0
        return RunFault(pos, self._died(run[pos]))

    def _died(self, index: int | None) -> WorkerError:
        try:
            code = self.popen.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            code = self.popen.wait(timeout=2.0)
        how, sig, status = _signal_text(code)
        where = f"while computing element {index}" if index is not None else "while starting"
        return WorkerError(
            f"{self.owner.stage}: worker process {self.pid} {how} {where} (a crash in native code, the OOM "
            "killer or os._exit in the function); the element is lost and the next element gets a new worker",
            stage=self.owner.stage, index=index, signal=sig, exitcode=status)

    def wait_ready(self, stop: Any) -> None:
        if self.ready:
            return
        msg = self._recv(stop, None, time.monotonic() + START_TIMEOUT_S)
        if msg[0] == "init_error":
            raise WorkerError(f"{self.owner.stage}: the worker process could not load the function:\n{msg[1]}"
                              "\nA process executor needs a function that pickles (cloudpickle) and modules "
                              "importable from sys.path; use map_executor='thread' otherwise",
                              stage=self.owner.stage)
        self.ready = True

    def send_segment(self, role: str, size: int, stop: Any, run: list[int]) -> None:
        """Replace the ``role`` segment by a new one of ``size`` bytes (reserved first); a worker that died
        meanwhile raises its ``RunFault`` (computing an element of ``run``)."""
        old = self.segments.get(role)
        grow = self.owner.memory.segment_need(self, size - (old[1] if old else 0))
        self.owner.charge(self, grow, stop)
        try:
            fd = create_segment(size, self.owner.stage, self.owner.target)
        except BaseException:
            self.owner.uncharge(self, grow)
            raise
        try:
            self.conn.send_bytes(pickle.dumps(("seg", role, size), protocol=5))
            socket.send_fds(self.sock, [b"S"], [fd])
        except OSError:
            os.close(fd)
            self.owner.uncharge(self, grow)
            raise self._crash(None, run) from None
        self.segments[role] = (fd, size)
        if old is not None:
            os.close(old[0])

    # -- a run --------------------------------------------------------------------------------------
    def run(self, xs: list[Any], indices: list[int], stop: Any) -> RunResult:
        """``fn`` of each element of ``xs`` (numbers ``indices``) in one message each way: ``(results,
        errors, (cpu_s, delay_s))``, ``errors`` by position (the function raised; None in ``results`` there),
        the worker's CPU time for the run and the time it waited for a core meanwhile. A death raises
        ``RunFault`` naming the element being computed."""
        try:
            header, places, frames, parts, need = encode(xs)
        except Exception as e:
            raise RunFault(_unpicklable(xs), e) from e
        seg = self.segments.get("in")
        if need and (seg is None or seg[1] < need):
            self.send_segment("in", segment_size(need), stop, indices)
            seg = self.segments["in"]
        for off, data in parts:
            write_all(seg[0], data, off)  # type: ignore[index]
        del parts
        try:
            os.pwrite(self.progress_fd, bytes(PROGRESS_BYTES), 0)
            send_value(self.conn, ("run", header, places), frames)
        except OSError:
            raise self._crash(None, indices) from None
        del frames, header
        while True:
            msg = self._recv(stop, None, run=indices)
            tag = msg[0]
            if tag == "grow":
                self.send_segment("out", segment_size(msg[1]), stop, indices)
                continue
            if tag == "error":  # the run's elements could not be read: each element's error
                self._account_cpu(msg[5], len(xs))
                return [None] * len(xs), {j: rebuild_exception(*msg[1:5]) for j in range(len(xs))}, (msg[5], 0.0)
            _tag, out_header, out_places, cpu, delay, errors = msg
            self._account_cpu(cpu, len(xs))
            out_fd = self.segments["out"][0] if "out" in self.segments else -1
            try:
                buffers = receive_frames(self.conn, out_places,
                                         lambda off, n, fd=out_fd: read_into(fd, n, off))
            except (EOFError, OSError):
                raise self._crash(None, indices) from None
            return (pickle.loads(out_header, buffers=buffers), {j: rebuild_exception(*e) for j, e in errors.items()},
                    (cpu, delay))

    def _account_cpu(self, cpu: float, elements: int) -> None:
        self.cpu_s += cpu
        self.owner.cpu_s += cpu
        self.owner.elements += elements
        self.owner.runs += 1

    def rss(self) -> int:
        try:
            return int(psutil.Process(self.pid).memory_info().rss)
        except psutil.Error:
            return 0

    def remeasure(self) -> None:
        """Charge the worker's real size after a call: always after its first, then at most every
        ``REMEASURE_S`` (``WorkerMemory.remeasure``)."""
        self.calls += 1
        now = time.monotonic()
        if self.calls > 1 and now - self._measured_s < REMEASURE_S:
            return
        self._measured_s = now
        self.owner.memory.remeasure(self, first=self.calls == 1)

    def kill(self) -> None:
        try:
            self.popen.kill()
        except OSError:
            pass

    def close_files(self) -> None:
        for fd, _size in self.segments.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.segments.clear()
        for f in (self.conn, self.sock):
            try:
                f.close()
            except OSError:
                pass
        if self.progress_fd >= 0:
            os.close(self.progress_fd)
            self.progress_fd = -1


def _reap(proc: _Proc, grace_s: float = 0.0) -> None:
    """Close ``proc``'s files and wait for it (``grace_s``, then ``SIGKILL``)."""
    proc.close_files()
    try:
        proc.popen.wait(timeout=max(grace_s, 0.001))
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.popen.wait(timeout=2.0)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
            pass


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

    # -- memory ---------------------------------------------------------------------------------------
    def check_fits(self, call_bytes: int) -> None:
        """``MemoryBudgetError`` when one worker and one call's bytes cannot fit the budget at all."""
        self.memory.check_fits(call_bytes)

    def memory_limited(self, within_s: float) -> bool:
        """A worker start was refused for lack of budget in the last ``within_s`` s."""
        return self.memory.memory_limited(within_s)

    def charge(self, proc: _Proc, nbytes: int, stop: Any) -> None:
        """Reserve ``nbytes`` for a segment of ``proc`` before it is created (idle workers end first when the
        budget is short)."""
        self.memory.charge(proc, nbytes, stop, self._retire_one_idle)

    def uncharge(self, proc: _Proc, nbytes: int) -> None:
        self.memory.uncharge(proc, nbytes)

    def _retire_one_idle(self) -> bool:
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
        if len(self._all) + self._starting >= self.target:
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
            try:
                proc.conn.send_bytes(pickle.dumps(("exit",)))
            except OSError:
                pass
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
        except RunFault as fault:
            if isinstance(fault.error, WorkerError):
                self.crashes += 1
                self.discard(proc)
            else:  # nothing was sent: the worker is fine
                self.checkin(proc)
            raise
        except BaseException:
            self.discard(proc)
            raise
        self._remeasure(proc)
        self.checkin(proc)
        return out

    def _remeasure(self, proc: _Proc) -> None:
        """``proc.remeasure()``; a worker grown past what the budget can hold (``MemoryBudgetError``) is ended."""
        try:
            proc.remeasure()
        except MemoryBudgetError:
            self.discard(proc)
            raise

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
        for p in procs:
            try:
                p.conn.send_bytes(pickle.dumps(("exit",)))
            except OSError:
                pass
        deadline = time.monotonic() + EXIT_GRACE_S
        for p in procs:
            try:
                p.popen.wait(timeout=max(0.001, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
        for p in procs:
            _reap(p)
            p.footprint = 0
        self.memory.close()
