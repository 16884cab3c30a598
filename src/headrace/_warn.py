"""Where a pipeline's warnings go, and what they say about its memory budget.

A pipeline's stages warn from headrace's own code, often from its threads. :class:`PipelineWarnings` sends
each warning to the user's line instead, the first frame outside headrace when the iterator was made (the
``for`` loop, the ``iter(ds)``, the call of ``fit``), with ``warnings.warn_explicit`` (``stacklevel``
cannot reach across threads, and ``skip_file_prefixes`` needs Python 3.12), and says each warning once per
pipeline: the iterators of one ``Dataset`` (one per epoch) share what was said.

:func:`budget_words` says which budget a stage ran in: what the user set (``Options(memory_budget=...)``
as given) and, when headrace gave the pipeline a share of a larger budget (``fit``'s
``data_memory_fraction``), that budget and why (:func:`share_options`).
"""

from __future__ import annotations

import os
import sys
import warnings
import weakref
from typing import Any

from ._memory import format_bytes, parse_bytes
from ._options import BUDGET_ORIGIN as _ORIGIN
from ._options import Options
from ._sync import Lock as TimedLock

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def share_options(budget: int | str, fraction: float, why: str, fix: str) -> Options:
    """``Options(memory_budget=int(budget * fraction))`` that remembers where the number came from, for the
    warnings: ``why`` says whose share it is, naming the budget as the user gave it (``"the data pipeline's
    25% share (fit's data_memory_fraction) of memory_budget=384MiB; ..."``), ``fix`` what raises it
    (``"raise memory_budget"``).

    Raises:
        ValueError: ``budget`` is not a size, or ``fraction`` outside (0, 1].
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction={fraction!r} must be in (0, 1]")
    options = Options(memory_budget=max(1, int(parse_bytes(budget) * fraction)))
    object.__setattr__(options, _ORIGIN, (why, fix))
    return options


def given(value: int | str) -> str:
    """A size as the user gave it: ``"384MiB"`` stays, ``402653184`` -> ``"402653184 (384.0 MiB)"``."""
    return value.strip() if isinstance(value, str) else f"{value} ({format_bytes(value)})"


def budget_words(options: Options, limit_bytes: int) -> tuple[str, str]:
    """``(the budget a stage ran in, how to raise it)``, naming what the user set: ``memory_budget=256MiB``
    (as given), ``96.0 MiB (the data pipeline's 25% share ... of memory_budget=384MiB ...)``, or the
    default."""
    origin = getattr(options, _ORIGIN, None)
    if origin is not None:
        why, fix = origin
        return f"{format_bytes(limit_bytes)} ({why})", fix
    fix = "raise Options(memory_budget=...)"
    if options.memory_budget is None:
        return (f"the default memory budget ({format_bytes(limit_bytes)}: half the memory available, shared by "
                "the iterators that set no Options(memory_budget=...))", fix)
    if isinstance(options.memory_budget, str):
        return f"memory_budget={options.memory_budget.strip()} ({format_bytes(limit_bytes)})", fix
    return f"memory_budget={given(options.memory_budget)}", fix


def user_frame() -> tuple[str, int, dict[str, Any]] | None:
    """``(filename, line, module globals)`` of the innermost caller outside headrace, or ``None``."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not os.path.abspath(name).startswith(_PACKAGE) and not name.startswith("<frozen"):
            return name, frame.f_lineno, frame.f_globals
        frame = frame.f_back  # type: ignore[assignment]
    return None


_SAID: weakref.WeakKeyDictionary[Any, set[Any]] = weakref.WeakKeyDictionary()
_SAID_LOCK = TimedLock("pipeline warnings")


class PipelineWarnings:
    """The warnings of one iterator: issued at the user's line (module docstring), each ``key`` once for all
    the iterators of ``pipeline`` (any object: the dataset's recipe node).

    ``warn`` only queues: the stages warn from their threads, in the middle of their bookkeeping, often
    holding the budget's lock, and a user who made the category an error (``-W error``,
    ``filterwarnings = error``) would have it raised there - leaving a reservation half made, and a
    pipeline thread's crash that a restore's replay skipped as a bad element forever (a 260 s run then
    killed for memory; docs/design/budget.md). The consumer's thread issues what is queued with ``flush()`` where
    nothing is half done: at the start of ``next()`` (raised there, no element is lost and the iterator goes
    on), before ``StopIteration`` and at ``close()``.
    """

    def __init__(self, pipeline: Any, options: Options, limit_bytes: int) -> None:
        self.site = user_frame()
        self.budget, self.fix = budget_words(options, limit_bytes)
        self._pending: list[tuple[str, type[Warning]]] = []
        try:
            with _SAID_LOCK:
                self._said = _SAID.setdefault(pipeline, set())
        except TypeError:  # not weak-referenceable / hashable: once per iterator
            self._said = set()

    def warn(self, key: Any, message: str, category: type[Warning]) -> None:
        """Queue ``message`` unless this pipeline said ``key`` already; never raises (any thread, any lock)."""
        with _SAID_LOCK:
            if key in self._said:
                return
            self._said.add(key)
            self._pending.append((message, category))

    @property
    def pending(self) -> bool:
        """Whether warnings wait for ``flush()``."""
        return bool(self._pending)

    def flush(self) -> None:
        """Issue the queued warnings, oldest first, in the calling thread (the consumer's, holding no lock of
        the pipeline). A warning the filters make an error is raised here; those after it stay queued."""
        while self._pending:
            with _SAID_LOCK:
                if not self._pending:
                    return
                message, category = self._pending.pop(0)
            self._issue(message, category)

    def _issue(self, message: str, category: type[Warning]) -> None:
        if self.site is None:
            warnings.warn(message, category, stacklevel=4)
            return
        filename, lineno, module_globals = self.site
        registry = module_globals.setdefault("__warningregistry__", {})
        # no module_globals: warnings would ask that module's loader for the source by the module's name, and
        # a module run with `python -m pkg.mod` is named __main__, which its loader refuses (ImportError)
        warnings.warn_explicit(message, category, filename, lineno, module=module_globals.get("__name__"),
                               registry=registry)


__all__ = ["PipelineWarnings", "budget_words", "given", "share_options", "user_frame"]
