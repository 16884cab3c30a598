"""Closing iterators that garbage collection finds while their close could deadlock.

``Iterator.__del__`` runs wherever the garbage collector happens to run: in any thread, between any two
bytecodes, possibly while that thread holds the (non-reentrant) lock of a memory budget that the collected
iterator shares with others (the process budget). Closing there would wait for a lock its own thread holds:
30 s, then :class:`~headrace.InternalTimeoutError` swallowed by ``__del__``, and the iterator's threads left
running. So ``__del__`` closes at once only where that cannot happen (see :func:`may_close_here`); otherwise
it hands the iterator to a short-lived daemon thread, the reaper, that closes it a moment later.

Nothing here takes a lock: the queue is a ``collections.deque`` (``append`` / ``popleft`` are atomic under the
GIL), and the reaper ends once the queue stays empty; a deferral that races with a reaper ending starts a new
one (two reapers draining one queue is harmless). ``drain()`` closes what is queued in the calling thread
(interpreter exit).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

IDLE_EXIT_S = 0.2
"""How long the reaper waits for more work before it ends."""

_queue: deque[Callable[[], Any]] = deque()
_state: dict[str, Any] = {"reaper": None, "exiting": True}


def may_close_here(budget_lock: threading.Lock) -> bool:
    """True where a synchronous close cannot wait on a lock this thread holds: the budget's lock is free
    (held by nobody, so not by this thread) and this is not one of headrace's own pipeline threads (which
    hold their stages' locks between bytecodes)."""
    return not budget_lock.locked() and not threading.current_thread().name.startswith("headrace-")


def defer(close: Callable[[], Any]) -> None:
    """Run ``close()`` soon in the reaper thread (started if none is running)."""
    _queue.append(close)
    if _state["exiting"]:
        _state["exiting"] = False
        t = threading.Thread(target=_reap, name="headrace-reaper", daemon=True)
        _state["reaper"] = t
        t.start()


def drain() -> None:
    """Close everything queued, in this thread."""
    while True:
        try:
            close = _queue.popleft()
        except IndexError:
            return
        _run(close)


def _run(close: Callable[[], Any]) -> None:
    try:
        close()
    except Exception:  # pragma: no cover - a close that fails has nobody to report to
        pass


def _reap() -> None:
    idle_since = time.monotonic()
    while True:
        try:
            close = _queue.popleft()
        except IndexError:
            if time.monotonic() - idle_since < IDLE_EXIT_S:
                time.sleep(0.01)
                continue
            _state["exiting"] = True
            if not _queue:
                return
            _state["exiting"] = False  # work arrived meanwhile: keep going (a second reaper may also run)
            continue
        _run(close)
        idle_since = time.monotonic()
