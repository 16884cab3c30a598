"""Functions the process-executor tests run in worker processes: a module of their own that imports only
numpy and the standard library, so a worker starts in the time those take to import."""

from __future__ import annotations

import ctypes
import os
import signal
import time

import numpy as np


def _mixed(x):
    """Elements of every kind a process must carry: a large array (shared memory), a small one (a frame),
    bytes, str, a scalar and a nested tuple."""
    i = int(x)
    return {"big": np.full((300, 300), i, np.float32), "small": np.arange(i, i + 5, dtype=np.int16),
            "raw": bytes([i % 256]) * (i + 1), "text": f"element {i}", "n": np.int64(i * i), "t": (i, str(i))}


def _spin(x):
    """Pure Python holding the GIL; returns (pid, start, end, CPU seconds of the call, a checksum); float64:
    a Python float would become float32."""
    t0, c0 = time.perf_counter(), time.thread_time()
    s = 0
    for j in range(150_000):
        s += j ^ int(x)
    return os.getpid(), np.float64(t0), np.float64(time.perf_counter()), np.float64(time.thread_time() - c0), s


def _kill_self_at_5(x):
    if int(x) == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def _segfault_at_3(x):
    if int(x) == 3:
        ctypes.string_at(0)  # reads address 0: SIGSEGV in native code
    return x


def _raise_at_4(x):
    if int(x) == 4:
        raise ValueError(f"bad element {int(x)}")
    return x * 2


def _big(x):
    return np.full(200_000, int(x), np.float64)


def _sleepy(x):
    time.sleep(0.01)
    return x


def times_three(x):
    return x * 3


_started: list[int] = []


def _slow_start(x):
    """A worker's first call takes 0.5 s, as it does on a loaded machine (imports, no core for a while)."""
    if not _started:
        _started.append(os.getpid())
        time.sleep(0.5)
    return x


def out_8mib_slow_start(x):
    """An 8 MiB output; a worker's first call takes 0.5 s."""
    return np.full(8 << 20, int(_slow_start(x)) % 251, np.uint8)


def plus_one_slow_start(a):
    """``a + 1`` (an 8 MiB input gives an 8 MiB output); a worker's first call takes 0.5 s."""
    return _slow_start(a) + 1


def out_8mib(x):
    return np.full(8 << 20, int(x) % 251, np.uint8)


def plus_one(a):
    return a + 1


_kept: list[np.ndarray] = []


def doubles_keeping_80mib(x):
    """``2 * x``; the first call in a process keeps an 80 MiB cache for good (a model, a lookup table)."""
    if not _kept:
        _kept.append(np.ones(80 << 20, np.uint8))
    return x * 2


def untraceable_plus_one(x):
    """``x + 1``; raises on the examples ``element_spec`` traces with (filled with 1 and 2), so the spec is read
    from a first element computed for it."""
    if int(x) in (1, 2):
        raise ValueError("not on a traced example")
    return x + 1


class RaisesOn:
    """A user function raising ``ValueError`` for the elements ``bad`` (ints); else, by ``kind``: ``"map"``
    doubles, ``"filter"`` keeps what is not 1 modulo 3, ``"flat_map"`` gives two elements (a Dataset)."""

    def __init__(self, bad, kind: str) -> None:
        self.bad = frozenset(int(b) for b in bad)
        self.kind = kind

    def __call__(self, x):
        if int(x) in self.bad:
            raise ValueError(f"element {int(x)} is bad")
        if self.kind == "map":
            return x * 2
        if self.kind == "filter":
            return x % 3 != 1
        import headrace as hr  # (only here: a worker process running "map" imports numpy alone)

        return hr.Dataset.range(int(x) * 10, int(x) * 10 + 2)


def raise_at_37(x):
    """``x * 2``; element 37 raises (in the middle of a run)."""
    if int(x) == 37:
        raise ValueError(f"bad element {int(x)}")
    return x * 2


def exit_at_41(x):
    """``x * 2``; the worker exits on element 41 (in the middle of a run)."""
    if int(x) == 41:
        os._exit(3)
    return x * 2


def ones_1mib(x):
    """A 1 MiB output (through shared memory) whose first byte is ``x % 251``."""
    a = np.ones(1 << 20, np.uint8)
    a[0] = int(x) % 251
    return a
