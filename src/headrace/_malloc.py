"""glibc heap settings: RSS follows the memory really in use (the budget promise is about RSS).

glibc's ``malloc`` raises its mmap threshold dynamically (up to 32 MiB) after large blocks are freed, after
which multi-megabyte elements come from per-thread heaps that keep freed memory instead of returning it: with
16 reader threads and 16 MiB records the process held 190 MiB more than the pipeline (measured by the promise
suite, ``tests/promises``); and elements of 1-4 MiB of many sizes fragment the heaps (a shuffle of 1 KiB-6 MiB
elements under a 144 MiB budget: RSS 261 MiB over the base with 123 MiB tracked). :func:`tune_for_pipelines`
fixes the threshold at 1 MiB (blocks of at least that size are mapped and unmapped on their own: the same run
then grows by 137 MiB), the trim threshold likewise and at most 4 arenas, once per process, the first time an
iterator is made. ``headrace.train.fit`` sets its own (4 MiB: a 1 MiB threshold made a ResNet-18 step 28%
slower) before it makes iterators, and that one stays. It is process-wide: set ``HEADRACE_MALLOC=keep`` to
leave glibc alone, or set glibc's own ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_ARENA_MAX`` (headrace then does
not touch them). Nothing happens where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import gc
import os
from typing import Any

from ._sync import Lock as TimedLock

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
PIPELINE_MMAP_THRESHOLD = 1 << 20
TRAINING_MMAP_THRESHOLD = 4 << 20
PIPELINE_ARENA_MAX = 4

_LIBC: Any = None
_tuned = False
_lock = TimedLock("malloc tuning")


def _libc() -> Any:
    """The C library's symbols as the process already has them loaded (``dlopen(NULL)``), or False.

    Not ``ctypes.util.find_library("c")``: on Linux that runs ``ldconfig -p`` (and may run ``gcc``) in a
    child process, a fork of the whole interpreter at the moment a pipeline starts (the promise sweep saw it
    as the case's memory with a child: 122 MiB of PSS in 0.09 s)."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(None)
        except OSError:
            _LIBC = False
    return _LIBC


def release_free_memory() -> None:
    """Collect garbage and return free heap pages to the OS (glibc ``malloc_trim(0)``; no-op elsewhere)."""
    gc.collect()
    libc = _libc()
    if libc and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def limit_heap_retention(mmap_threshold_bytes: int = TRAINING_MMAP_THRESHOLD,
                         arena_max: int = PIPELINE_ARENA_MAX) -> bool:
    """Make glibc give freed memory back to the OS promptly, so RSS follows what is really in use.

    Sets ``M_MMAP_THRESHOLD`` (allocations of at least ``mmap_threshold_bytes``, e.g. activation
    tensors, get their own mapping, unmapped on free instead of fragmenting the heap; this also turns off
    glibc's dynamic threshold, which otherwise rises to 32 MiB), ``M_TRIM_THRESHOLD`` to the same value and
    ``M_ARENA_MAX`` (fewer per-thread heaps holding freed memory). Process-wide. Measured on a small
    ResNet-18 step at 96x96 on CPU: about 10% slower (page faults), 20-50 MiB less peak RSS; with a 1 MiB
    threshold 28% slower, 40-70 MiB less. Returns False where it is not glibc (nothing changed). After it,
    :func:`tune_for_pipelines` changes nothing (the caller's choice stays).
    """
    global _tuned
    _tuned = True
    libc = _libc()
    if not libc or not hasattr(libc, "mallopt"):
        return False
    ok = libc.mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold_bytes)) == 1
    ok &= libc.mallopt(_M_TRIM_THRESHOLD, int(mmap_threshold_bytes)) == 1
    ok &= libc.mallopt(_M_ARENA_MAX, int(arena_max)) == 1
    return bool(ok)


def tune_for_pipelines() -> bool:
    """Once per process: :func:`limit_heap_retention` unless the user chose otherwise (module docstring)."""
    global _tuned
    with _lock:
        if _tuned:
            return False
        _tuned = True
    if os.environ.get("HEADRACE_MALLOC", "").lower() in ("keep", "0", "off", "no"):
        return False
    if any(k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_ARENA_MAX", "MALLOC_TRIM_THRESHOLD_")):
        return False
    return limit_heap_retention(PIPELINE_MMAP_THRESHOLD)
