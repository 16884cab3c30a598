"""One worker process of the process executor (:mod:`headrace._engine.pool.process_pool` runs a stage's
workers): its start, its socket, its segments and progress word, a run of elements on it, its death.
The wire format and the worker's side: :mod:`headrace._engine.pool.process_child`.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import psutil

from ..._errors import RemoteTraceback, WorkerError
from ..._memory import WAIT_SLICE_S, Cancelled
from .process_child import PROGRESS_BYTES, child_command, encode, receive_frames, send_value
from .process_memory import REMEASURE_S, create_segment, read_into, segment_size, write_all

if TYPE_CHECKING:
    from .process_pool import ProcessWorkers

START_TIMEOUT_S = 60.0
"""A worker that has not loaded the function after this long fails the call (``WorkerError``)."""


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


class _RunFault(Exception):
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
        was computing, as ``_RunFault``)."""
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
        """The death as ``WorkerError`` (outside a run), or as ``_RunFault`` naming the element of ``run`` the
        worker was computing (its progress word)."""
        if run is None:
            return self._died(index)
        try:
            pos = min(max(0, int.from_bytes(os.pread(self.progress_fd, PROGRESS_BYTES, 0), sys.byteorder, signed=True)),
                      len(run) - 1)
        except OSError:
            pos = 0
        return _RunFault(pos, self._died(run[pos]))

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
        meanwhile raises its ``_RunFault`` (computing an element of ``run``)."""
        old = self.segments.get(role)
        grow = self.owner.memory.segment_need(self, size - (old[1] if old else 0))
        self.owner.memory.charge(self, grow, stop, self.owner.retire_one_idle)
        try:
            fd = create_segment(size, self.owner.stage, self.owner.target)
        except BaseException:
            self.owner.memory.uncharge(self, grow)
            raise
        try:
            self.conn.send_bytes(pickle.dumps(("seg", role, size), protocol=5))
            socket.send_fds(self.sock, [b"S"], [fd])
        except OSError:
            os.close(fd)
            self.owner.memory.uncharge(self, grow)
            raise self._crash(None, run) from None
        self.segments[role] = (fd, size)
        if old is not None:
            os.close(old[0])

    # -- a run --------------------------------------------------------------------------------------
    def run(self, xs: list[Any], indices: list[int], stop: Any) -> RunResult:
        """``fn`` of each element of ``xs`` (numbers ``indices``) in one message each way: ``(results,
        errors, (cpu_s, delay_s))``, ``errors`` by position (the function raised; None in ``results`` there),
        the worker's CPU time for the run and the time it waited for a core meanwhile. A death raises
        ``_RunFault`` naming the element being computed."""
        try:
            header, places, frames, parts, need = encode(xs)
        except Exception as e:
            raise _RunFault(_unpicklable(xs), e) from e
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

    def remeasure(self, alone: bool) -> bool:
        """Charge the worker's real size after a call: always after its first, then at most every
        ``REMEASURE_S`` (``WorkerMemory.remeasure``: False when it grew past what fits and is not the stage's
        only worker, ``alone``: to be ended)."""
        self.calls += 1
        now = time.monotonic()
        if self.calls > 1 and now - self._measured_s < REMEASURE_S:
            return True
        self._measured_s = now
        return self.owner.memory.remeasure(self, self.calls == 1, alone)

    def ask_exit(self) -> None:
        """Send the ``exit`` message (a worker that died already is left to ``_reap``)."""
        try:
            self.conn.send_bytes(pickle.dumps(("exit",)))
        except OSError:
            pass

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


def end_all(procs: list[_Proc], grace_s: float) -> None:
    """End ``procs`` side by side: ``exit`` to each, ``SIGKILL`` to any still running after ``grace_s``, all reaped."""
    for p in procs:
        p.ask_exit()
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.popen.wait(timeout=max(0.001, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
    for p in procs:
        _reap(p)
        p.footprint = 0
