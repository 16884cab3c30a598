"""The iterator protocol every stage implements, and the helpers stages share.

Protocol (``DatasetIterator``)
------------------------------
- ``__next__()`` returns the next element (normalized numpy values) or raises ``StopIteration``; after
  the end it keeps raising ``StopIteration``. An exception raised by a user function propagates with a
  note (``in map(parse) at element 12``) and the iterator stays usable: the next call continues with the
  next element (this is what ``ignore_errors`` relies on).
- ``get_state()`` returns a small JSON-serializable dict: positions, counters, RNG state; never copies
  of buffered elements. It always contains ``"kind"`` and the settings that must match on restore.
- ``set_state(state)`` makes the iterator continue exactly after the element the state was taken at.
  It may be called more than once on the same iterator (each call fully resets it). A state of another
  kind or with other settings raises :class:`~headrace.StateError`.
- ``close()`` stops this stage's threads (joined with a timeout) and closes its inputs; idempotent.

Stages that start threads set their own ``threading.Event`` on close; every wait in headrace is a
timed wait that re-checks it (see ``WAIT_SLICE_S``), so ``close()`` returns within about a second even
if a thread is blocked on a full or empty buffer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .._errors import StateError
from .._memory import MemoryBudget, StageAccount
from .._options import Options

JOIN_TIMEOUT_S = 1.0


class IteratorContext:
    """What every iterator of one tree shares: the options, the memory budget, unique stage names."""

    def __init__(self, options: Options, budget: MemoryBudget) -> None:
        self.options = options
        self.budget = budget
        self._counts: dict[str, int] = {}
        self._names: dict[tuple[int, str], str] = {}
        self._lock = threading.Lock()

    def stage_name(self, node: object, base: str) -> str:
        """A stable, unique name for ``node``'s stage: ``"map(parse)"``, then ``"map(parse)#2"`` for a
        second node with the same name. The same node keeps its name across re-created iterators
        (``repeat`` epochs)."""
        with self._lock:
            name = self._names.get((id(node), base))
            if name is None:
                n = self._counts.get(base, 0) + 1
                self._counts[base] = n
                name = base if n == 1 else f"{base}#{n}"
                self._names[(id(node), base)] = name
        return name

    def account(self, stage: str, demand: int | None, *, mandatory: bool = False,
                hint: str | None = None) -> StageAccount:
        if hint is None:
            return self.budget.account(stage, demand, mandatory=mandatory)
        return self.budget.account(stage, demand, mandatory=mandatory, hint=hint)

    def deterministic(self, value: bool | None) -> bool:
        return self.options.is_deterministic() if value is None else bool(value)


class DatasetIterator:
    """Base class of every stage's iterator (see the module docstring for the protocol)."""

    kind = "iterator"

    def __init__(self, ctx: IteratorContext) -> None:
        self.ctx = ctx
        self._closed = False

    def __iter__(self) -> DatasetIterator:
        return self

    def __next__(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def get_state(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} does not support get_state")

    def set_state(self, state: dict[str, Any]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} does not support set_state")

    def _children(self) -> list[DatasetIterator]:
        return []

    def has_ready(self) -> bool:
        """Whether ``__next__`` would return without waiting for another thread (sync stages: always)."""
        return True

    def _close_self(self) -> None:
        """Stop threads and release accounts of this stage only (override in stages that have any)."""

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_self()
        for child in self._children():
            if child is not None:
                child.close()


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


def fn_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return name


def start_thread(name: str, target: Callable[[], None]) -> threading.Thread:
    """Start a named daemon thread."""
    t = threading.Thread(target=target, name=f"headrace-{name}", daemon=True)
    t.start()
    return t


def join_threads(threads: list[threading.Thread], timeout_s: float = JOIN_TIMEOUT_S) -> None:
    """Join threads against one shared deadline (a thread stuck in user code is left as a daemon)."""
    import time

    deadline = time.monotonic() + timeout_s
    for t in threads:
        if t is threading.current_thread():
            continue
        t.join(max(0.0, deadline - time.monotonic()))


class UnaryIterator(DatasetIterator):
    """A stage with one input. Subclasses list their settings (checked on restore) and counters (saved).

    ``_settings()`` returns what must match on restore; ``_counters()`` the stage's own position fields,
    restored by ``_restore_counters(state)``. The input's state is saved under ``"input"``.
    """

    def __init__(self, ctx: IteratorContext, source: DatasetIterator) -> None:
        super().__init__(ctx)
        self._source = source
        self._next_input = source.__next__

    def _settings(self) -> dict[str, Any]:
        return {}

    def _counters(self) -> dict[str, Any]:
        return {}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        pass

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, **self._settings(), **self._counters(), "input": self._source.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, **self._settings())
        self._source.set_state(state["input"])
        self._restore_counters(state)

    def _children(self) -> list[DatasetIterator]:
        return [self._source]
