"""The helpers stages share: the settings check of a restore (:func:`check_state`), an error's note and
crash mark (:func:`note_error`, :func:`mark_crash`, :func:`detached`), and the stages' threads
(:func:`start_thread`, :func:`join_threads`) with the stop flag a wait honours (:func:`stop_flag`).

The public iterator protocol is :mod:`headrace._engine.source_protocol`; the engine's stage base
:mod:`headrace._engine.stage`; the context stages are built with :mod:`headrace._engine.context`.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._errors import StateError
from .._sync import Condition, Flag

if TYPE_CHECKING:
    from .context import IteratorContext

JOIN_TIMEOUT_S = 1.0

_thread_state = threading.local()


class _EitherFlag:
    """Set when either flag is: a pool worker's generation stop or the whole iterator's close."""

    __slots__ = ("a", "b")

    def __init__(self, a: Flag, b: Flag) -> None:
        self.a, self.b = a, b

    def is_set(self) -> bool:
        return self.a.is_set() or self.b.is_set()


def stop_flag(ctx: IteratorContext | None) -> Any:
    """The flag a wait in the calling thread must honour: the iterator's close, and inside a pool's worker
    thread also that pool's stop (``set_state`` stops a pool while its worker may wait upstream)."""
    own = getattr(_thread_state, "stop", None)
    tree = ctx.tree.stop if ctx is not None else None
    if own is None:
        return tree if tree is not None else Flag()
    return own if tree is None else _EitherFlag(own, tree)


def check_state(state: Any, kind: str, **settings: Any) -> dict[str, Any]:
    """Validate ``state`` for a stage of ``kind`` whose settings must equal ``settings``."""
    if not isinstance(state, dict):
        raise StateError(f"{kind}: expected a state dict from get_state(), got {type(state).__name__}")
    if state.get("kind") != kind:
        raise StateError(f"state mismatch: this pipeline has a {kind} stage here, the state is for "
                         f"{state.get('kind')!r}; restore a state saved from the same pipeline")
    for key, value in settings.items():
        if state.get(key) != value:
            raise StateError(f"state mismatch in {kind}: {key}={state.get(key)!r} in the state but "
                             f"{key}={value!r} in this pipeline; restore into a pipeline built with the "
                             "same arguments")
    return state


def note_error(exc: BaseException, stage: str, index: int) -> BaseException:
    """Add ``in <stage> at element <index>`` to an exception once (the innermost stage wins)."""
    if not getattr(exc, "_headrace_noted", False):
        try:
            exc.add_note(f"in {stage} at element {index}")
            exc._headrace_noted = True  # type: ignore[attr-defined]
        except (AttributeError, TypeError):  # pragma: no cover - exotic exception types
            pass
    return exc


def mark_crash(exc: BaseException) -> BaseException:
    """Mark ``exc`` as a stage's crash (an error of its own machinery, raised again on every ``next()``), not
    an element that raised: a loop that skips bad elements must stop at it (``is_crash``)."""
    try:
        exc._headrace_crash = True  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # pragma: no cover - exotic exception types
        pass
    return exc


def is_crash(exc: BaseException) -> bool:
    """Whether ``exc`` is a stage's crash (``mark_crash``; a copy made by ``detached`` keeps the mark)."""
    return bool(getattr(exc, "_headrace_crash", False))


def detached(exc: BaseException) -> BaseException:
    """A copy of ``exc`` (same type, message, attributes, cause and worker traceback) for the consumer to
    raise, where a stage keeps ``exc`` to raise again: raising the kept one appends the consumer's frames
    to its traceback, and the stage, kept alive by its other threads, then kept the iterator alive through
    them (never collected, never closed: its threads ran on after ``list(ds)`` raised). ``exc`` itself
    where it does not copy."""
    try:
        dup = copy.copy(exc)
    except Exception:
        return exc
    if type(dup) is not type(exc) or dup.args != exc.args:
        return exc
    dup.__cause__, dup.__context__ = exc.__cause__, exc.__context__
    dup.__suppress_context__ = exc.__suppress_context__
    if hasattr(exc, "__notes__"):
        dup.__notes__ = list(exc.__notes__)  # a note added to the copy stays off the kept one
    return dup.with_traceback(exc.__traceback__)


def fn_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return name


def start_thread(name: str, target: Callable[[], None], stop: Flag | None = None) -> threading.Thread:
    """Start a named daemon thread; ``stop`` becomes the thread's :func:`stop_flag` (with the tree's)."""

    def run() -> None:
        _thread_state.stop = stop
        target()

    t = threading.Thread(target=run, name=f"headrace-{name}", daemon=True)
    t.start()
    return t


def join_threads(threads: list[threading.Thread], timeout_s: float = JOIN_TIMEOUT_S) -> None:
    """Join threads against one shared deadline (a thread stuck in user code is left as a daemon)."""
    deadline = time.monotonic() + timeout_s
    for t in threads:
        if t is threading.current_thread():
            continue
        t.join(max(0.0, deadline - time.monotonic()))


def run_to_the_end(name: str, fn: Callable[[], Any], timeout_s: float) -> Any:
    """``fn()``, which no ``KeyboardInterrupt`` can cut short: called from the main thread (the only one Python
    runs signal handlers in), it runs in a thread of its own, waited for up to ``timeout_s``; an interrupt
    landing meanwhile is raised here once ``fn`` is done, or at once when it lands in the wait (``fn`` then goes
    on to its end in its thread). Elsewhere ``fn`` runs in the caller. Returns what ``fn`` returned (None
    when the wait ran out or was interrupted); raises what ``fn`` raised.

    A second thread may start when an interrupt lands inside ``Thread.start()`` (whether the first began is
    not known then): only one of them runs ``fn``."""
    if threading.current_thread() is not threading.main_thread():
        return fn()
    token: list[Callable[[], Any]] = [fn]
    out: dict[str, Any] = {}
    done, cv = Flag(), Condition(f"{name}: until done")

    def run() -> None:
        try:
            job = token.pop()  # atomic: the one thread that gets it runs fn
        except IndexError:
            return
        try:
            out["value"] = job()
        except BaseException as e:  # raised in the caller
            out["error"] = e
        finally:
            with cv:
                done.set()
                cv.notify_all()

    interrupt: BaseException | None = None
    started: threading.Thread | None = None
    while started is None and not done.is_set():
        try:
            thread = threading.Thread(target=run, name=f"headrace-{name}", daemon=True)
            thread.start()
            started = thread
        except RuntimeError:  # no thread can start (interpreter shutdown): here, then
            run()
        except BaseException as e:  # an interrupt inside start(): a thread may or may not run; start another
            interrupt = interrupt or e
    with cv:
        cv.wait_for(done.is_set, timeout_s)
    if started is not None:
        started.join(timeout_s)  # (at once: done is set just before the thread ends)
    if interrupt is not None:
        raise interrupt
    if "error" in out:
        raise out["error"]
    return out.get("value")
