"""Locks and conditions whose every acquisition is timed: nothing in headrace blocks without a timeout.

Why: a ``KeyboardInterrupt`` (Ctrl-C) lands in the main thread between bytecodes, so it can arrive just
after a lock was acquired and before the code that releases it took over; that lock then stays held by
nobody. With plain ``with lock:`` every later acquisition, ``close()`` included, would wait forever. Here
every acquisition is ``lock.acquire(timeout=...)``: a lock held longer than ``LOCK_TIMEOUT_S`` raises
:class:`~headrace.InternalTimeoutError` naming the lock instead of hanging.

Internal locks are held for microseconds (no code waits or calls user code while holding one), so a
timeout means a leaked lock, never a slow caller. Waits for data or memory are ``Condition.wait(timeout)``
loops that re-check a stop event (see ``headrace._memory.WAIT_SLICE_S``).

``tests/test_no_untimed_waits.py`` checks the source tree: no ``threading.Lock()`` / ``Condition()`` /
``RLock()`` outside this module, no ``.join()``, ``.wait()``, ``.get()`` or ``.acquire()`` without a timeout.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType

from ._errors import InternalTimeoutError

LOCK_TIMEOUT_S = 30.0
"""Longest any internal lock may be waited for; past it, :class:`InternalTimeoutError`."""
CLOSE_WAITS_FOR_CALL_S = 10.0
"""How long an adapter's ``close()`` from another thread waits for a ``next()`` in progress (:class:`InFlight`)."""


def acquire(lock: threading.Lock, what: str, timeout_s: float = LOCK_TIMEOUT_S) -> None:
    """``lock.acquire(timeout=timeout_s)`` or :class:`InternalTimeoutError` naming ``what``."""
    if not lock.acquire(timeout=timeout_s):
        raise InternalTimeoutError(
            f"headrace: the internal lock {what!r} was held for more than {timeout_s:.0f} s; it was probably "
            "left locked by an interrupt (Ctrl-C) in another thread. Close this iterator and create a new one.")


class Lock:
    """A mutex used as ``with lock:``; the acquisition is timed (see the module docstring)."""

    __slots__ = ("_lock", "what")

    def __init__(self, what: str) -> None:
        self._lock = threading.Lock()
        self.what = what

    def __reduce__(self) -> tuple[type[Lock], tuple[str]]:
        # Pickled (a recipe node sent to a spawned worker): a new, unlocked lock guarding that process's copy.
        return (Lock, (self.what,))

    def __enter__(self) -> bool:
        acquire(self._lock, self.what)
        return True

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._lock.release()

    def acquire(self, timeout: float) -> bool:
        return self._lock.acquire(timeout=timeout)

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    @property
    def raw(self) -> threading.Lock:
        """The plain lock (for an untimed ``acquire(False)`` try on a hot path)."""
        return self._lock


class Condition(threading.Condition):
    """``threading.Condition`` over a plain lock whose ``with`` and post-``wait`` re-acquisitions are timed.

    ``wait()`` must be given a timeout (the lint test checks callers). Several conditions may share one
    lock: ``Condition(what, lock=other._lock)``.
    """

    def __init__(self, what: str, lock: threading.Lock | None = None) -> None:
        super().__init__(lock if lock is not None else threading.Lock())
        self.what = what

    @property
    def lock(self) -> threading.Lock:
        return self._lock  # type: ignore[attr-defined]

    def __enter__(self) -> bool:
        acquire(self._lock, self.what)  # type: ignore[attr-defined]
        return True

    @contextmanager
    def released(self) -> Iterator[None]:
        """Let the lock go for the block (the caller holds it) and take it back after, timed, as ``wait()``
        does (a caller that must not hold it while it takes other locks first)."""
        self._lock.release()  # type: ignore[attr-defined]
        try:
            yield
        finally:
            self._acquire_restore(None)

    def _acquire_restore(self, saved: object) -> None:  # called by wait() to take the lock back
        try:
            acquire(self._lock, self.what)  # type: ignore[attr-defined]
        except BaseException:
            # An interrupt while taking the lock back: take it anyway so the caller's `with` stays
            # balanced, then let the interrupt through.
            acquire(self._lock, self.what)  # type: ignore[attr-defined]
            raise


class Flag:
    """A stop flag. ``set()`` and ``is_set()`` never block: no lock, one attribute written under the GIL
    (``threading.Event.set`` takes a lock, which an interrupt can leave held). Threads that must sleep until
    it is set wait on a :class:`Condition` with a timeout and re-check it."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set


class InFlight:
    """The thread inside a call (an adapter's ``next()``), so that ``close()`` from another thread can let that
    call hand out its element before it takes the position: otherwise it could keep the position before an
    element the call then returns (a duplicate after resume)."""

    __slots__ = ("_cond", "_thread")

    def __init__(self, what: str) -> None:
        self._cond = Condition(what)
        self._thread: int | None = None

    def begin(self, check: Callable[[], None]) -> None:
        """Enter the call after ``check()`` (which raises, e.g. on a closed iterator) under the same lock."""
        with self._cond:
            check()
            self._thread = threading.get_ident()

    def end(self) -> None:
        with self._cond:
            self._thread = None
            self._cond.notify_all()

    def settle(self, then: Callable[[bool], None]) -> None:
        """Wait up to ``CLOSE_WAITS_FOR_CALL_S`` for a call in another thread to end, then run ``then(settled)``
        (``settled``: no call was left in progress) before any new call begins."""
        timeout_s = CLOSE_WAITS_FOR_CALL_S
        with self._cond:
            me = threading.get_ident()
            settled = self._thread in (None, me) or self._cond.wait_for(lambda: self._thread is None, timeout_s)
            then(settled)
