"""Worker processes for ``map`` functions that hold the GIL: start, call, crash detection, shutdown.

The coordinator stays :class:`~headrace._ops.parallel.ParallelApplier` (ordering, window, reservations,
state, stop flags): each of its worker threads hands its element to a worker process checked out of
:class:`ProcessWorkers` and waits, in timed slices, for the result. This module is the function side.

Processes
---------
A worker is a fresh interpreter running ``proc_child.py`` (``subprocess`` ``exec``: the *spawn* start
method; the threaded parent is never forked into Python code), started by ``proc_child.child_command`` with
no headrace directory and no working directory on its ``sys.path`` (a user's ``random.py`` in the working
directory cannot shadow ``random``): it runs in any working directory, venv or installed wheel, and gets
the parent's environment unchanged. It receives the pickled function
(``cloudpickle``: lambdas and closures work) and the parent's ``sys.path`` **once**, in its ``init``
message; elements then cross as described in :mod:`headrace._ops.proc_child` (numpy data through its
shared-memory segments, the rest pickled with protocol 5). Workers belong to the iterator, not to the
stage: the stage made again for each ``repeat`` epoch reuses them (started once per iteration).

Memory (every byte charged to the pipeline's budget, ``headrace._memory``)
-------------------------------------------------------------------------
Each stage has a *workers* account (mandatory, one unit per worker): a worker's footprint is its RSS once
started (reserved before it is started: the largest footprint seen, ``WORKER_ESTIMATE_BYTES`` for the
first) plus its segments (reserved before they are created); the footprint is re-measured after calls
and an increase charged at once. An element's own bytes are in the parallel stage's account as with
threads, plus one more output for the copy the worker holds while it is sent
(:func:`process_extra_bytes`). So the sum of the parent's and the workers' RSS stays inside the budget.

Shared memory is bounded by the budget and checked against free space in ``/dev/shm`` before any segment
is made (:class:`~headrace.SharedMemoryError` names the need, the free space and the fixes); pages are
allocated up front (``posix_fallocate``), so a full ``/dev/shm`` is an error, never a ``SIGBUS``.

Reliability
-----------
- A call waits for its result in ``WAIT_SLICE_S`` slices, checking the stop flag and whether the process
  is alive: a worker that dies raises :class:`~headrace.WorkerError` naming the stage, the element and the
  signal (or exit status) within a slice or two of the death, never a hang. The dead worker is reaped and
  replaced on the next call.
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

import itertools
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

import numpy as np
import psutil

from .._errors import RemoteTraceback, SharedMemoryError, WorkerError
from .._memory import WAIT_SLICE_S, Cancelled, MemoryBudget, StageAccount, format_bytes
from .._sync import Condition
from .proc_child import child_command, encode, receive_frames, send_value

SHM_DIR_ENV = "HEADRACE_SHM_DIR"
WORKER_ESTIMATE_BYTES = 48 * 1024**2
"""Reserved for the first worker of a stage before it starts (then: the largest measured footprint)."""
MIN_SEGMENT_BYTES = 1024**2
START_TIMEOUT_S = 60.0
"""A worker that has not loaded the function after this long fails the call (``WorkerError``)."""
MAX_BUDGET_SHARE = 0.5
"""Worker processes (RSS + segments) never take more than this share of the memory budget."""
EXIT_GRACE_S = 0.2
RETIRE_S = 5.0
"""Idle workers beyond a lowered ``target`` end after this long (see ``ProcessWorkers.set_target``)."""
REMEASURE_S = 0.5
_names = itertools.count()


# ---- shared memory ---------------------------------------------------------------------------------
def shm_dir() -> str:
    return os.environ.get(SHM_DIR_ENV, "/dev/shm")


def shm_free_bytes(path: str | None = None) -> int:
    """Bytes free in the shared-memory file system (``statvfs``)."""
    st = os.statvfs(path or shm_dir())
    return st.f_bavail * st.f_frsize


def check_shm(need: int, stage: str, workers: int) -> None:
    """Raise :class:`~headrace.SharedMemoryError` unless ``need`` bytes fit in ``/dev/shm`` now."""
    path = shm_dir()
    if not os.path.isdir(path):
        raise SharedMemoryError(
            f"{stage}: the process executor needs a shared-memory file system at {path} (Linux /dev/shm), "
            f"which does not exist here; use map_executor='thread' (or set {SHM_DIR_ENV} to a tmpfs directory)")
    free = shm_free_bytes(path)
    if need > free:
        raise SharedMemoryError(
            f"{stage}: the process executor needs {format_bytes(need)} of shared memory for {workers} worker "
            f"process(es) but {path} has {format_bytes(free)} free; enlarge it (docker run --shm-size=2g, or "
            "mount -o remount,size=2G /dev/shm), lower num_parallel_calls or the element size, or use "
            "map_executor='thread'")


def create_segment(size: int, stage: str, workers: int) -> int:
    """A file of ``size`` bytes in ``/dev/shm`` with its pages allocated, already unlinked: its fd."""
    check_shm(size, stage, workers)
    path = os.path.join(shm_dir(), f"headrace-{os.getpid()}-{next(_names)}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.unlink(path)
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        os.close(fd)
        raise SharedMemoryError(
            f"{stage}: could not allocate a {format_bytes(size)} shared-memory segment in {shm_dir()} ({e}); "
            "enlarge /dev/shm (docker run --shm-size=2g), lower num_parallel_calls or the element size, or "
            "use map_executor='thread'") from e
    return fd


def segment_size(need: int) -> int:
    """Grow by a quarter beyond the need (fewer re-creations), whole MiB."""
    want = max(MIN_SEGMENT_BYTES, need + need // 4)
    return -(-want // MIN_SEGMENT_BYTES) * MIN_SEGMENT_BYTES


def _write_all(fd: int, data: memoryview, offset: int) -> None:
    view = data.cast("B") if data.format != "B" or data.ndim != 1 else data
    done = 0
    while done < view.nbytes:
        done += os.pwritev(fd, [view[done:]], offset + done)


def _read_into(fd: int, n: int, offset: int) -> np.ndarray:
    dest = np.empty(n, np.uint8)
    done = 0
    while done < n:
        got = os.preadv(fd, [dest[done:]], offset + done)
        if got <= 0:
            raise OSError(f"short read from a shared-memory segment at offset {offset + done}")
        done += got
    return dest


def process_extra_bytes(out_bytes: int) -> int:
    """Bytes a process call holds beyond the thread executor's input + output: the worker's own copy of
    the output while it is written to shared memory and read back."""
    return out_bytes


def _signal_text(code: int) -> tuple[str, int | None, int | None]:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}", -code, None
    return f"exited with status {code}", None, code


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
        env = dict(os.environ)
        if env.get("HEADRACE_MALLOC", "").lower() not in ("keep", "0", "off", "no"):
            env.setdefault("MALLOC_MMAP_THRESHOLD_", str(4 << 20))
            env.setdefault("MALLOC_TRIM_THRESHOLD_", str(4 << 20))
            env.setdefault("MALLOC_ARENA_MAX", "4")
        try:
            self.popen = subprocess.Popen(child_command(child.fileno()), pass_fds=[child.fileno()],
                                          stdin=subprocess.DEVNULL, env=env, close_fds=True)
        finally:
            child.close()
        self.pid = self.popen.pid
        self.segments: dict[str, tuple[int, int]] = {}  # role -> (fd, size)
        self.footprint = 0   # bytes charged in the owner's workers account
        self.ready = False
        self.cpu_s = 0.0
        self._measured_s = 0.0
        try:
            self.conn.send_bytes(pickle.dumps(("init", list(sys.path), owner.fn_bytes, owner.stage), protocol=5))
        except OSError:
            pass  # it died while starting (killed, OOM): wait_ready's receive sees the EOF and says how

    # -- messages -------------------------------------------------------------------------------------
    def _recv(self, stop: Any, index: int | None, deadline: float | None = None) -> Any:
        while True:
            try:
                if self.conn.poll(WAIT_SLICE_S):
                    return pickle.loads(self.conn.recv_bytes())
            except (EOFError, OSError):
                raise self._died(index) from None
            if stop is not None and stop.is_set():
                raise Cancelled()
            if self.popen.poll() is not None:
                raise self._died(index)
            if deadline is not None and time.monotonic() > deadline:
                raise WorkerError(f"{self.owner.stage}: worker process {self.pid} did not load the function within "
                                  f"{START_TIMEOUT_S:.0f} s", stage=self.owner.stage, index=index)

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

    def send_segment(self, role: str, size: int, stop: Any, index: int) -> None:
        """Replace the ``role`` segment by a new one of ``size`` bytes (reserved first); a worker that died
        meanwhile raises its WorkerError (for element ``index``)."""
        old = self.segments.get(role)
        grow = size - (old[1] if old else 0)
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
            raise self._died(index) from None
        self.segments[role] = (fd, size)
        if old is not None:
            os.close(old[0])

    # -- a call ---------------------------------------------------------------------------------------
    def call(self, x: Any, index: int, stop: Any) -> Any:
        header, places, frames, parts, need = encode(x)
        seg = self.segments.get("in")
        if need and (seg is None or seg[1] < need):
            self.send_segment("in", segment_size(need), stop, index)
            seg = self.segments["in"]
        for off, data in parts:
            _write_all(seg[0], data, off)  # type: ignore[index]
        del parts
        try:
            send_value(self.conn, ("call", header, places), frames)
        except OSError:
            raise self._died(index) from None
        del frames, header
        while True:
            msg = self._recv(stop, index)
            tag = msg[0]
            if tag == "grow":
                self.send_segment("out", segment_size(msg[1]), stop, index)
                continue
            if tag == "error":
                self._account_cpu(msg[5])
                raise rebuild_exception(msg[1], msg[2], msg[3], msg[4])
            _tag, out_header, out_places, cpu = msg
            self._account_cpu(cpu)
            out_fd = self.segments["out"][0] if "out" in self.segments else -1
            try:
                buffers = receive_frames(self.conn, out_places,
                                         lambda off, n, fd=out_fd: _read_into(fd, n, off))
            except (EOFError, OSError):
                raise self._died(index) from None
            return pickle.loads(out_header, buffers=buffers)

    def _account_cpu(self, cpu: float) -> None:
        self.cpu_s += cpu
        self.owner.cpu_s += cpu

    def rss(self) -> int:
        try:
            return int(psutil.Process(self.pid).memory_info().rss)
        except psutil.Error:
            return 0

    def remeasure(self) -> None:
        """Charge an increase of the worker's RSS beyond its footprint (at most every ``REMEASURE_S``)."""
        now = time.monotonic()
        if now - self._measured_s < REMEASURE_S:
            return
        self._measured_s = now
        segs = sum(size for _fd, size in self.segments.values())
        # The segments are mapped with MAP_POPULATE, so they are inside the RSS already.
        grown = max(self.rss(), segs) - self.footprint
        if grown > 0:
            self.owner.force(self, grown)

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


# ---- the workers of one stage ------------------------------------------------------------------------
class ProcessWorkers:
    """The worker processes of one ``map`` stage: checked out by the pool's threads one call at a time.

    ``target`` (adjustable: the autotuner sets it) is how many may compute at once; a call takes an idle
    one while fewer are busy, starts one when none is idle and fewer exist, else waits (timed) for one to
    come back. Lowering ``target`` keeps the idle workers beyond it for ``RETIRE_S`` (the tuner often puts
    it back), then ends them. Thread-safe.
    """

    def __init__(self, fn: Callable[..., Any], stage: str, budget: MemoryBudget, owner: object,
                 target: int, fn_bytes: bytes) -> None:
        self.fn = fn
        self.stage = stage
        self.fn_bytes = fn_bytes
        self.target = max(1, int(target))
        self.account: StageAccount = budget.account(
            f"{stage} workers", self.target, mandatory=True, owner=owner,
            hint="use fewer worker processes (num_parallel_calls) or map_executor='thread'")
        self._cv = Condition(f"{stage} worker processes")
        self._idle: list[_Proc] = []
        self._all: list[_Proc] = []
        self._starting = 0
        self._closed = False
        self._excess_since: float | None = None  # when target went below the workers that exist
        self.started = 0
        self.crashes = 0
        self.cpu_s = 0.0
        self.start_s: list[float] = []

    # -- memory ---------------------------------------------------------------------------------------
    def charge(self, proc: _Proc, nbytes: int, stop: Any) -> None:
        if nbytes <= 0:
            return
        reserved = self.account.reserve(nbytes, stop, unit=False, ignore_cap=True)
        self.account.settle(reserved, nbytes, count=0, unit=False)
        proc.footprint += nbytes
        self._note_footprint(proc)

    def uncharge(self, proc: _Proc, nbytes: int) -> None:
        if nbytes > 0:
            self.account.release(nbytes, count=0)
            proc.footprint -= nbytes

    def force(self, proc: _Proc, nbytes: int) -> None:
        self.account.force(nbytes)
        proc.footprint += nbytes
        self._note_footprint(proc)

    def _note_footprint(self, proc: _Proc) -> None:
        self.account.grow_unit(proc.footprint)

    def _room_for_another(self) -> bool:
        """Worker processes take at most half the budget (the first one always may try)."""
        acc = self.account
        if not self._all and not self._starting:
            return True
        unit = acc.max_element_bytes or WORKER_ESTIMATE_BYTES
        return acc.held_bytes + unit <= acc.budget.limit_bytes * MAX_BUDGET_SHARE

    def _start(self, stop: Any) -> _Proc:
        """Start one worker (its footprint reserved first) and wait until it has loaded the function."""
        acc = self.account
        estimate = acc.max_element_bytes or WORKER_ESTIMATE_BYTES
        reserved = acc.reserve(estimate, stop, unit=False)
        t0 = time.monotonic()
        try:
            proc = _Proc(self)
        except BaseException:
            acc.cancel(reserved)
            raise
        try:
            proc.wait_ready(stop)
        except BaseException:
            acc.cancel(reserved)
            proc.kill()
            self._reap(proc)
            raise
        rss = proc.rss() or estimate
        acc.settle(reserved, rss, count=1)
        proc.footprint = rss
        proc._measured_s = time.monotonic()
        self.started += 1
        self.start_s.append(time.monotonic() - t0)
        return proc

    # -- checkout -------------------------------------------------------------------------------------
    def checkout(self, stop: Any, wait: bool = True) -> _Proc | None:
        """An idle worker; a new one when none is idle and fewer than ``target`` exist; else wait (timed,
        until ``stop``) or, with ``wait=False``, None."""
        with self._cv:
            while True:
                if self._closed:
                    raise Cancelled()
                self._retire_excess()
                if self._idle and len(self._all) - len(self._idle) < self.target:
                    return self._idle.pop()
                if len(self._all) + self._starting < self.target and self._room_for_another():
                    self._starting += 1
                    break
                if not wait:
                    return None
                if stop is not None and stop.is_set():
                    raise Cancelled()
                self._cv.wait(WAIT_SLICE_S)
        try:
            proc = self._start(stop)
        except BaseException:
            with self._cv:
                self._starting -= 1
                self._cv.notify_all()
            raise
        with self._cv:
            self._starting -= 1
            if self._closed:
                self._drop(proc)
                raise Cancelled()
            self._all.append(proc)
        return proc

    def prestart(self, stop: Any) -> bool:
        """Start one more idle worker if fewer than ``target`` exist; False when none was started."""
        with self._cv:
            if self._closed or len(self._all) + self._starting >= self.target or not self._room_for_another():
                return False
            self._starting += 1
        try:
            proc = self._start(stop)
        finally:
            with self._cv:
                self._starting -= 1
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
            if self._closed:
                self._all.remove(proc)
                self._drop(proc, graceful=True)
            else:
                self._idle.append(proc)
                self._retire_excess()
            self._cv.notify()

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
        self._reap(proc, EXIT_GRACE_S if graceful else 0.0)
        self.account.release(proc.footprint, count=1 if proc.ready else 0)
        proc.footprint = 0

    @staticmethod
    def _reap(proc: _Proc, grace_s: float = 0.0) -> None:
        proc.close_files()
        try:
            proc.popen.wait(timeout=max(grace_s, 0.001))
        except subprocess.TimeoutExpired:
            proc.kill()
            try:
                proc.popen.wait(timeout=2.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
                pass

    # -- the call -------------------------------------------------------------------------------------
    def call(self, x: Any, index: int, stop: Any) -> Any:
        """``fn(x)`` in a worker process (tuples unpacked into arguments, as threads call it)."""
        proc = self.checkout(stop)
        return self.call_on(proc, x, index, stop)

    def call_on(self, proc: _Proc, x: Any, index: int, stop: Any) -> Any:
        try:
            value = proc.call(x, index, stop)
        except WorkerError:
            self.crashes += 1
            self.discard(proc)
            raise
        except Cancelled:
            self.discard(proc)
            raise
        except BaseException as e:
            if isinstance(e.__cause__, RemoteTraceback):
                proc.remeasure()
                self.checkin(proc)  # the function raised: the worker is fine
            else:
                self.discard(proc)
            raise
        proc.remeasure()
        self.checkin(proc)
        return value

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
            self.account.demand = self.target
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
            self._reap(p)
            p.footprint = 0
        self.account.close()
