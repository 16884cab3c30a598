"""The engine's base of every stage: :class:`Stage` (internal; the public protocol users implement is
:class:`headrace._engine.source_protocol.DatasetIterator`, which a stage also is), and the plumbing of stages with
inputs (:class:`UnaryIterator`, :class:`MultiInputIterator`).

A stage keeps the protocol (``headrace._engine.source_protocol``): ``__next__`` returns normalized numpy values or
raises ``StopIteration`` (and keeps raising it); an exception raised by a user function propagates with a
note (``in map(parse) at element 12``) and the stage stays usable (``ignore_errors`` relies on it);
``get_state()`` is a small JSON-serializable dict with ``"kind"`` and the settings that must match on restore
(positions, counters, RNG state; never copies of buffered elements); ``set_state`` may be called more than
once (each call fully resets the stage) and raises :class:`~headrace.StateError` for a state of another kind
or settings; ``close()`` stops this stage's threads (joined with a timeout) and closes its inputs, idempotent.

Shutdown of a whole tree (``headrace.Iterator.close``) is three passes so that it takes one second, not
one second per stage: ``signal_stop()`` sets every stage's stop flag and wakes its threads (never blocks),
``join(deadline)`` joins every thread against one shared deadline, then ``close()`` releases files and
memory accounts; ``alive_threads()`` lists the threads still inside user code after the deadline (they are
reported, and their stages' inputs are not closed under them). Every wait in headrace is a timed wait
that re-checks a stop flag (``WAIT_SLICE_S``); a wait in a pool's worker thread also stops with that
pool (``headrace._engine.stage_support.stop_flag``).

Replay (``replay_epoch``, ``replays_deterministically``, ``replays_same_elements``, ``skip_ahead``), the facts
a stage declares for it (``depends_on_input_order``, ``reorders``) and the rules: ``headrace._engine.replay``.

Plumbing: :class:`UnaryIterator` (one input) and :class:`MultiInputIterator` (several) hold the inputs,
save their states under ``"input"`` / ``"inputs"`` next to the stage's own settings and counters, check
the settings on restore and close the inputs.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .._errors import StateError
from .context import IteratorContext
from .replay import Replayable
from .source_protocol import DatasetIterator
from .stage_support import JOIN_TIMEOUT_S, check_state, join_threads


class Stage(Replayable, DatasetIterator):
    """The base of every stage of a pipeline (op iterators, io readers, ``from_source``'s wrapper).

    A stage with inputs lists them in ``_children()``; one with threads overrides ``_signal_self``,
    ``_own_threads`` and ``_close_self``; ``has_ready()`` says whether ``__next__`` would not wait. Its replay
    facts and questions (``depends_on_input_order``, ``reorders``, ``replay_epoch``, ``skip_ahead``, ...) come
    from :class:`~headrace._engine.replay.Replayable`. What only some stages offer is a protocol of its own, not a
    method here: runs of elements for a batch (``headrace._engine.runs``), an optimization or figures for
    ``explain()`` (``headrace._engine.tuning.explain``)."""

    kind = "iterator"
    ctx: IteratorContext | None = None
    _closed = False

    def __init__(self, ctx: IteratorContext | None = None) -> None:
        self.ctx = ctx
        self._closed = False

    def _children(self) -> list[Stage]:
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
        if not self._signaled:  # closed on its own (not by Iterator.close): stop and join this subtree
            self.signal_stop()
            self.join(time.monotonic() + JOIN_TIMEOUT_S)
        self._close_self()
        if self._own_threads_alive():
            return  # a thread of this stage is still inside its input: closing that under it would race
        for child in self._children():
            if child is not None:
                child.close()

    # ---- shutdown of a whole tree (see the module docstring) ------------------------------------------
    _signaled = False

    def signal_stop(self) -> None:
        """Ask this stage's threads, and its inputs', to stop; never blocks."""
        self._signaled = True
        self._signal_self()
        for child in self._children():
            if child is not None:
                child.signal_stop()

    def _signal_self(self) -> None:
        """Set this stage's own stop flags (stages with threads override it)."""

    def join(self, deadline: float) -> None:
        """Join this stage's threads and its inputs' against ``deadline`` (``time.monotonic()``)."""
        join_threads(self._own_threads(), max(0.0, deadline - time.monotonic()))
        for child in self._children():
            if child is not None:
                child.join(deadline)

    def _own_threads(self) -> list[threading.Thread]:
        return []

    def _own_threads_alive(self) -> bool:
        return any(t.is_alive() for t in self._own_threads())

    def alive_threads(self) -> list[threading.Thread]:
        """Threads of this subtree still running (after ``join``: stuck in user code)."""
        alive = [t for t in self._own_threads() if t.is_alive()]
        for child in self._children():
            if child is not None:
                alive += child.alive_threads()
        return alive


class _StageHooks(Stage):
    """What a stage with inputs saves besides them: ``_settings()`` must match on restore, ``_counters()``
    are its own position fields, restored by ``_restore_counters(state)``."""

    def _settings(self) -> dict[str, Any]:
        return {}

    def _counters(self) -> dict[str, Any]:
        return {}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        pass


class UnaryIterator(_StageHooks):
    """A stage with one input. Subclasses list their settings (checked on restore) and counters (saved).

    ``_settings()`` returns what must match on restore; ``_counters()`` the stage's own position fields,
    restored by ``_restore_counters(state)``. The input's state is saved under ``"input"``.
    """

    ctx: IteratorContext  # (a stage with inputs is always built with its context)

    def __init__(self, ctx: IteratorContext, source: Stage) -> None:
        super().__init__(ctx)
        self._source = source
        self._next_input = source.__next__

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, **self._settings(), **self._counters(), "input": self._source.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, **self._settings())
        self._source.set_state(state["input"])
        self._restore_counters(state)

    def _children(self) -> list[Stage]:
        return [self._source]


class MultiInputIterator(_StageHooks):
    """A stage with several inputs (``zip``, ``concatenate``, sampling): like :class:`UnaryIterator`,
    with the inputs' states saved as a list under ``"inputs"``."""

    ctx: IteratorContext

    def __init__(self, ctx: IteratorContext, sources: list[Stage]) -> None:
        super().__init__(ctx)
        self._sources = sources

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, **self._settings(), **self._counters(),
                "inputs": [s.get_state() for s in self._sources]}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, **self._settings())
        inputs = state["inputs"]
        if len(inputs) != len(self._sources):
            raise StateError(f"state mismatch in {self.kind}: the state has {len(inputs)} inputs, this pipeline "
                             f"{len(self._sources)}; restore a state saved from the same pipeline")
        for s, st in zip(self._sources, inputs):
            s.set_state(st)
        self._restore_counters(state)

    def _children(self) -> list[Stage]:
        return list(self._sources)
