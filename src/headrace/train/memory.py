"""Process memory as the operating system sees it: current RSS, peak RSS over a block, giving memory back.

Peak measurement: on Linux the kernel keeps the resident high-water mark (``VmHWM`` in
``/proc/self/status``) and resets it when ``5`` is written to ``/proc/self/clear_refs`` (Linux >= 4.0).
:class:`PeakRSS` resets it on entry and reads it on exit, which catches peaks of any duration. Where that
is not possible it samples ``psutil`` RSS every millisecond in a daemon thread (which can miss peaks
shorter than that).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import threading
from types import TracebackType
from typing import Any

import psutil

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"
_PROCESS = psutil.Process()


def rss_bytes() -> int:
    """Resident set size of this process now, in bytes."""
    return int(_PROCESS.memory_info().rss)


def _read_hwm() -> int | None:
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_hwm() -> bool:
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")
    except OSError:
        return False
    return _read_hwm() is not None


_LIBC: Any = None


def release_free_memory() -> None:
    """Collect garbage and return free heap pages to the OS (glibc ``malloc_trim(0)``; no-op elsewhere)."""
    gc.collect()
    libc = _libc()
    if libc and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        name = ctypes.util.find_library("c")
        try:
            _LIBC = ctypes.CDLL(name) if name else False
        except OSError:
            _LIBC = False
    return _LIBC


def limit_heap_retention(mmap_threshold_bytes: int = 4 << 20, arena_max: int = 4) -> bool:
    """Make glibc give freed memory back to the OS promptly, so RSS follows what is really in use.

    Sets ``M_MMAP_THRESHOLD`` (allocations of at least ``mmap_threshold_bytes``, e.g. activation
    tensors, get their own mapping, unmapped on free instead of fragmenting the heap; this also turns off
    glibc's dynamic threshold, which otherwise rises to 32 MiB), ``M_TRIM_THRESHOLD`` to the same value and
    ``M_ARENA_MAX`` (fewer per-thread heaps holding freed memory). Process-wide. Measured on a small
    ResNet-18 step at 96x96 on CPU: about 10% slower (page faults), 20-50 MiB less peak RSS; with a 1 MiB
    threshold 28% slower, 40-70 MiB less. Returns False where it is not glibc (nothing changed).
    """
    libc = _libc()
    if not libc or not hasattr(libc, "mallopt"):
        return False
    ok = libc.mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold_bytes)) == 1
    ok &= libc.mallopt(_M_TRIM_THRESHOLD, int(mmap_threshold_bytes)) == 1
    ok &= libc.mallopt(_M_ARENA_MAX, int(arena_max)) == 1
    return bool(ok)


class PeakRSS:
    """Context manager: ``peak_bytes`` is the highest RSS of this process while the block ran.

    ``with PeakRSS() as p: work(); print(p.peak_bytes)``. Uses the kernel's high-water mark when it can
    be reset (``exact`` is True), else 1 ms sampling.
    """

    def __init__(self, interval_s: float = 0.001) -> None:
        self.interval_s = interval_s
        self.peak_bytes = 0
        self.exact = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak_bytes = max(self.peak_bytes, rss_bytes())

    def __enter__(self) -> PeakRSS:
        self.peak_bytes = rss_bytes()
        self.exact = _reset_hwm()
        if not self.exact:
            self._thread = threading.Thread(target=self._sample, name="headrace-peak-rss", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=1.0)
        hwm = _read_hwm() if self.exact else None
        self.peak_bytes = max(self.peak_bytes, rss_bytes(), hwm or 0)


def peak_rss_bytes() -> int:
    """The process's RSS high-water mark since start or the last :class:`PeakRSS` reset (``VmHWM``)."""
    hwm = _read_hwm()
    return hwm if hwm is not None else rss_bytes()


__all__ = ["PeakRSS", "limit_heap_retention", "peak_rss_bytes", "release_free_memory", "rss_bytes"]
