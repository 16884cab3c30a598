"""The worker process of the process executor, and the wire format both sides share.

A worker is a fresh interpreter (the *spawn* start method, an ``exec`` of a new Python, never a ``fork``
of the threaded parent) that loads this file by its location and calls :func:`main` (see
``child_command``: ``python -P -c <bootstrap> proc_child.py FD PROGRESS_FD``; never ``python proc_child.py``,
which would put ``_ops`` first on ``sys.path``). The parent imports it for :func:`encode` and
:func:`receive_frames`. It imports nothing from headrace, so a worker starts in the time Python and
numpy take to import (plus whatever the user's function imports when it is unpickled); the one calling
convention of user functions (``headrace._engine.call_guard``, which needs only the standard library) it loads
by location, as it was loaded itself. Its standard library imports (and ``cloudpickle``'s)
happen before it adopts the parent's ``sys.path``, so a directory there holding a module named like a standard
library one does not replace the worker's own.

Wire format
-----------
One duplex Unix socket per worker, framed by ``multiprocessing.connection.Connection``. A value (an
element, a result) is pickled with protocol 5 and ``buffer_callback``: the data of contiguous numpy arrays
leaves the pickle stream as *out-of-band buffers*. A buffer of at least ``SHM_MIN_BYTES`` goes through a
shared-memory segment (the sender writes it at a 64-byte aligned offset, the receiver reads it from
there); smaller ones follow the header as frames of their own (no copy into the pickle stream). ``bytes``
/ ``str`` and small values travel in the pickle stream itself. The header names where each buffer is:
``("shm", offset, nbytes)`` or ``("pipe", nbytes)``.

Segments (see ``headrace._engine.pool.process_pool``): each worker has an *input* segment (the parent writes with
``os.pwritev`` on its file descriptor, the worker maps it) and an *output* segment (the worker writes into
its mapping, the parent reads with ``os.preadv``). So each segment's pages are resident in one process
only: the sum of the processes' RSS counts them once. The parent creates them in ``/dev/shm``, allocates
their pages at once (``posix_fallocate``: a full ``/dev/shm`` is an error there, never a ``SIGBUS``
later), unlinks the name immediately and passes the file descriptor over the socket (``SCM_RIGHTS``);
the worker maps it with ``MAP_POPULATE`` (pre-faulted). Nothing named is left in ``/dev/shm``, even if
a process is killed. When an output does not fit its segment the worker asks for a larger one
(``("grow", nbytes)``) and the parent answers with a new file descriptor.

Runs: elements cross in *runs*, one message each way per run of consecutive elements (the pool's worker
thread claims the run; why: docs/design/pool.md):
the value sent is the list of the run's elements, the answer the list of their results, so a short call
pays the round trip, the pickling and the wake-ups once per run, as a DataLoader worker pays them once per
batch. An exception of one element is that element's result; the others are computed. Before each element
the worker writes its position in the run into its *progress word* (8 bytes of a ``memfd`` both processes
map, passed at start): a worker that dies mid-run is known to have died on that element.

Messages, parent -> worker: ``("init", sys_path, sys_argv, fn_bytes, stage)``; ``("seg", role, size)`` + one fd;
``("run", header, places)`` + frames (a list of elements); ``("exit",)``. Worker -> parent: ``("ready", pid)``,
``("init_error", text)``, ``("grow", nbytes)``, ``("ok", header, places, cpu_s, delay_s, errors)`` + frames (the list of
results; ``errors``: position -> ``(exc_bytes, type_name, message, traceback_text)``, None at those positions
in the list), ``("error", exc_bytes, type_name, message, traceback_text, cpu_s)`` (the run's elements could not
be read: every element's error) (``cpu_s``: the run's CPU time; ``delay_s``: the time the worker waited for a
core meanwhile).

The worker exits when the parent closes the socket, sends ``exit``, or dies (its parent pid changes).
It ignores ``SIGINT`` (a Ctrl-C in the terminal reaches the whole process group; the parent decides).
"""

from __future__ import annotations

import mmap
import os
import pickle
import signal
import socket
import sys
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

CHILD_SCRIPT = os.path.abspath(__file__)
"""This file: what a worker loads (by location, never as ``sys.path[0]``)."""
CALL_GUARD_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(CHILD_SCRIPT)), "call_guard.py")
"""``headrace._engine.call_guard``: how a worker calls the user's function (loaded by location, as this file)."""
SHM_MIN_BYTES = 64 * 1024
"""Out-of-band buffers at least this large go through shared memory; smaller ones as socket frames."""
ALIGN = 64
POLL_S = 0.5
PROGRESS_BYTES = 8
"""The progress word: the position in its run of the element a worker computes (a signed 64-bit int)."""


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def encode(value: Any) -> tuple[bytes, list[tuple[Any, ...]], list[memoryview], list[tuple[int, memoryview]], int]:
    """Pickle ``value`` (protocol 5): returns ``(header, places, frames, shm_parts, shm_bytes)``.

    ``places`` lists each out-of-band buffer in order as ``("pipe", n)`` or ``("shm", offset, n)``;
    ``frames`` are the pipe buffers, ``shm_parts`` the ``(offset, data)`` to write into the segment,
    ``shm_bytes`` the segment size they need.
    """
    raws: list[memoryview] = []

    def take(pb: pickle.PickleBuffer) -> bool | None:
        try:
            raws.append(pb.raw())
        except BufferError:  # not contiguous: serialize it in-band
            return True
        return None

    header = pickle.dumps(value, protocol=5, buffer_callback=take)
    places: list[tuple[Any, ...]] = []
    frames: list[memoryview] = []
    parts: list[tuple[int, memoryview]] = []
    offset = 0
    for raw in raws:
        n = raw.nbytes
        if n >= SHM_MIN_BYTES:
            places.append(("shm", offset, n))
            parts.append((offset, raw))
            offset = _aligned(offset + n)
        else:
            places.append(("pipe", n))
            frames.append(raw)
    return header, places, frames, parts, offset


def receive_frames(conn: Connection, places: list[tuple[Any, ...]],
                   shm_buffer: Any) -> list[Any]:
    """The buffers of a value in order: shm ones from ``shm_buffer(offset, n)``, pipe ones received now
    into writable ``bytearray``s (arrays built on them are writable, as a thread's would be)."""
    buffers = []
    for place in places:
        if place[0] == "shm":
            buffers.append(shm_buffer(place[1], place[2]))
        else:
            b = bytearray(place[1])
            if place[1]:
                conn.recv_bytes_into(b)
            else:
                conn.recv_bytes()
            buffers.append(b)
    return buffers


def send_value(conn: Connection, message: tuple[Any, ...], frames: list[memoryview]) -> None:
    """``message`` (its header and places included), then the pipe buffers as frames of their own."""
    conn.send_bytes(pickle.dumps(message, protocol=5))
    for f in frames:
        conn.send_bytes(f)


# ---- the worker ---------------------------------------------------------------------------------------
class _Segment:
    def __init__(self, fd: int, size: int) -> None:
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        self.map = mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        os.close(fd)
        self.size = size
        self.view = memoryview(self.map)

    def release(self) -> None:
        try:
            self.view.release()
            self.map.close()
        except BufferError:  # the user's function kept a view of its input: leave it to the GC
            pass


def _call_guard() -> Any:
    """``headrace._engine.call_guard`` loaded from :data:`CALL_GUARD_SCRIPT` alone."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_headrace_call_guard", CALL_GUARD_SCRIPT)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _write_parts(seg: _Segment, parts: list[tuple[int, memoryview]]) -> None:
    for off, data in parts:
        seg.view[off:off + data.nbytes] = data


class _Worker:
    def __init__(self, fd: int, progress_fd: int) -> None:
        self.sock = socket.socket(fileno=fd)
        self.conn = Connection(os.dup(fd))
        self.progress_map = mmap.mmap(progress_fd, PROGRESS_BYTES)
        os.close(progress_fd)
        self.progress = memoryview(self.progress_map).cast("q")
        self.ppid = os.getppid()
        self.fn: Any = None  # the user's function as ``call_guard.element_call`` calls it (tuples unpacked)
        self.stage = "map"
        self.segments: dict[str, _Segment] = {}

    def recv(self) -> Any:
        while not self.conn.poll(POLL_S):
            if os.getppid() != self.ppid:
                raise EOFError("parent died")
        return pickle.loads(self.conn.recv_bytes())

    def recv_segment(self, role: str, size: int) -> None:
        _msg, fds, _flags, _addr = socket.recv_fds(self.sock, 1, 1)
        old = self.segments.pop(role, None)
        if old is not None:
            old.release()
        self.segments[role] = _Segment(fds[0], size)

    def serve(self) -> None:
        while True:
            msg = self.recv()
            kind = msg[0]
            if kind == "init":
                self.init(msg[1], msg[2], msg[3], msg[4])
            elif kind == "seg":
                self.recv_segment(msg[1], msg[2])
            elif kind == "run":
                self.run(msg[1], msg[2])
            elif kind == "exit":
                return

    def init(self, sys_path: list[str], sys_argv: list[str], fn_bytes: bytes, stage: str) -> None:
        """What ``multiprocessing``'s spawn gives a child before it unpickles anything: the parent's
        ``sys.path`` (ahead of this interpreter's own) and ``sys.argv`` (a module reading it at import,
        as scripts do, imports as in the parent); the working directory is the parent's already (inherited
        when the worker started)."""
        try:  # with its standard library imports, from this interpreter's own sys.path
            import cloudpickle  # noqa: F401
        except ImportError:
            pass
        element_call = _call_guard().element_call
        sys.path[:] = list(dict.fromkeys([*sys_path, *sys.path]))
        sys.argv[:] = sys_argv
        self.stage = stage
        try:
            self.fn = element_call(pickle.loads(fn_bytes), stage)
        except BaseException:
            self.conn.send_bytes(pickle.dumps(("init_error", traceback.format_exc())))
            return
        self.conn.send_bytes(pickle.dumps(("ready", os.getpid())))

    def run(self, header: bytes, places: list[tuple[Any, ...]]) -> None:
        cpu0, delay0 = time.thread_time(), _run_delay_s()
        seg = self.segments.get("in")
        buffers = receive_frames(self.conn, places, lambda off, n: seg.view[off:off + n])  # type: ignore[union-attr]
        try:
            xs = pickle.loads(header, buffers=buffers)
        except BaseException as e:
            self.send_error(e, time.thread_time() - cpu0)
            return
        del buffers
        ys: list[Any] = []
        errors: dict[int, tuple[bytes, str, str, str]] = {}
        progress, fn = self.progress, self.fn
        for j in range(len(xs)):
            progress[0] = j
            try:
                ys.append(fn(xs[j]))
            except BaseException as e:
                ys.append(None)
                errors[j] = error_payload(e)
            xs[j] = None  # (its buffers may go as soon as it is done)
        progress[0] = len(ys)
        del xs
        out_header, out_places, frames, parts, need = self.encode_results(ys, errors)
        seg = self.segments.get("out")
        if need and (seg is None or seg.size < need):
            self.conn.send_bytes(pickle.dumps(("grow", need)))
            reply = self.recv()
            if reply[0] != "seg":
                return
            self.recv_segment(reply[1], reply[2])
            seg = self.segments["out"]
        _write_parts(seg, parts)  # type: ignore[arg-type]
        # Every reference to the output goes before the answer: the parent measures this process's RSS once it
        # has the answer, and an output still alive then (a loop variable here kept it) was charged as growth.
        del parts, ys
        send_value(self.conn, ("ok", out_header, out_places, time.thread_time() - cpu0, _run_delay_s() - delay0,
                               errors), frames)

    @staticmethod
    def encode_results(ys: list[Any], errors: dict[int, tuple[bytes, str, str, str]]) -> Any:
        """``encode(ys)``; a result that does not pickle becomes its position's error (the others go)."""
        try:
            return encode(ys)
        except BaseException:
            for j, y in enumerate(ys):
                try:
                    pickle.dumps(y, protocol=5)
                except BaseException as e:
                    ys[j] = None
                    errors[j] = error_payload(e)
            return encode(ys)

    def send_error(self, e: BaseException, cpu_s: float) -> None:
        self.conn.send_bytes(pickle.dumps(("error", *error_payload(e), cpu_s)))


def _run_delay_s() -> float:
    """(The worker imports nothing from headrace: ``executor.run_delay_s``'s rule, for the worker's thread.)"""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def error_payload(e: BaseException) -> tuple[bytes, str, str, str]:
    """``(exc_bytes, type_name, message, traceback_text)`` of an exception, for the parent to rebuild
    (``exc_bytes`` empty when it does not pickle both ways)."""
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    try:
        import cloudpickle

        payload = cloudpickle.dumps(e)
        pickle.loads(payload)  # the parent must be able to rebuild it
    except BaseException:
        payload = b""
    return payload, type(e).__name__, str(e), text


_BOOTSTRAP = ("import sys, importlib.util as u; "
              "s = u.spec_from_file_location('_headrace_proc_child', sys.argv[1]); m = u.module_from_spec(s); "
              "sys.modules[s.name] = m; s.loader.exec_module(m); m.main(int(sys.argv[2]), int(sys.argv[3]))")


def child_command(fd: int, progress_fd: int, script: str = CHILD_SCRIPT) -> list[str]:
    """The command line of a worker: ``script``'s ``main(fd)`` in a new interpreter.

    ``sys.executable`` with the parent's interpreter flags (``-O``, ``-E``, ``-I``, ``-X dev``, ``-W``...,
    as ``multiprocessing``'s spawn passes them), ``-u``, ``-P`` (no working directory on ``sys.path``)
    and ``-c`` a bootstrap loading ``script`` by its location (``importlib``), never running it as a
    script, which would put its directory first on ``sys.path``. ``fd``: the worker's socket; ``progress_fd``:
    its progress word (``PROGRESS_BYTES``, a ``memfd``).
    """
    import subprocess  # the parent's side only: workers need not import it

    flags = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]
    return [sys.executable, *flags, "-u", "-P", "-c", _BOOTSTRAP, script, str(fd), str(progress_fd)]


def main(fd: int, progress_fd: int) -> None:
    """Serve the parent on the socket ``fd`` until it closes it, sends ``exit`` or dies; ``progress_fd``: the
    progress word."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker = _Worker(fd, progress_fd)
    try:
        worker.serve()
    except (EOFError, ConnectionError, OSError):
        pass
    finally:
        for seg in worker.segments.values():
            seg.release()
        worker.progress.release()
        worker.progress_map.close()
        worker.conn.close()
        worker.sock.close()

