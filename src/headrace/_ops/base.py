"""The iterator protocol every stage implements (public as ``headrace.DatasetIterator``), and the helpers
stages share.

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

Shutdown of a whole tree (``headrace.Iterator.close``) is three passes so that it takes one second, not
one second per stage: ``signal_stop()`` sets every stage's stop flag and wakes its threads (never blocks),
``join(deadline)`` joins every thread against one shared deadline, then ``close()`` releases files and
memory accounts; ``alive_threads()`` lists the threads still inside user code after the deadline (they are
reported, and their stages' inputs are not closed under them). Every wait in headrace is a timed wait
that re-checks a stop flag (``WAIT_SLICE_S``); a wait in a pool's worker thread also stops with that
pool (:func:`stop_flag`).

Replay: ``replays_deterministically()`` says whether re-reading after ``set_state`` gives the same
elements in the same order (false below a ``deterministic=False`` parallel stage); ``skip_ahead(n)``
advances ``n`` positions without materializing elements where a stage can (sources, 1:1 stages).

Plumbing: :class:`UnaryIterator` (one input) and :class:`MultiInputIterator` (several) hold the inputs,
save their states under ``"input"`` / ``"inputs"`` next to the stage's own settings and counters, check
the settings on restore and close the inputs.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .._errors import StateError
from .._machine import cpu_count
from .._memory import MemoryBudget, StageAccount
from .._options import Options
from .._sync import Flag
from .._sync import Lock as TimedLock
from .positions import advance

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
    tree = ctx.stop if ctx is not None else None
    if own is None:
        return tree if tree is not None else Flag()
    return own if tree is None else _EitherFlag(own, tree)


class IteratorContext:
    """What every iterator of one tree shares: the options, the memory budget, unique stage names, the
    close flag; and per subtree the *iteration path* (which ``iter()`` and which ``repeat`` epochs) that
    seeds per-iteration randomness."""

    def __init__(self, options: Options, budget: MemoryBudget, iteration: tuple[int, ...] = (0,)) -> None:
        self.options = options
        self.budget = budget
        self.stop = Flag()
        # set while Iterator.set_state runs: the restore re-produces what the saved run produced, so a stage
        # whose output depends on the budget's state (a shuffle capping its buffer) makes no new such event
        self.restoring = Flag()
        self.iteration = iteration
        self.force_deterministic = False
        self.replay_copy = False  # a second copy of a subtree that a restore scans (writes nothing, e.g. no cache)
        self._counts: dict[str, int] = {}
        self._names: dict[tuple[int, str], str] = {}
        self._lock = TimedLock("stage names")
        self.owner: object = self
        self.resources: dict[str, Any] = {}  # per iteration, shared by copies: worker processes
        self.tunings: dict[str, Any] = {}    # per iteration: AUTOTUNE settings per stage (headrace._ops.tuner)
        self.warnings: Any = None  # headrace._warn.PipelineWarnings: the stages' warnings, at the user's line
        self._building = threading.local()  # .nested: building a dataset made while the pipeline runs

    @contextlib.contextmanager
    def nested_build(self) -> Iterator[None]:
        """Iterators built inside are of a dataset made while the pipeline runs (an ``interleave`` /
        ``flat_map`` function's result): their accounts come and go with it (``StageAccount.nested``), so a
        decision that must be reproducible (a seeded shuffle's capacity) leaves them out."""
        b = self._building
        b.nested = getattr(b, "nested", 0) + 1
        try:
            yield
        finally:
            b.nested -= 1

    def resource(self, key: str, make: Callable[[], Any]) -> Any:
        """The object kept under ``key`` for this iteration (made by ``make()`` the first time): what a stage
        made again for each ``repeat`` epoch shares, e.g. its worker processes. Closed with the iterator."""
        with self._lock:
            r = self.resources.get(key)
        if r is None:
            made = make()
            with self._lock:
                r = self.resources.setdefault(key, made)
            if r is not made:
                made.close()
        return r

    def close_resources(self) -> None:
        with self._lock:
            items = list(self.resources.values())
            self.resources.clear()
        for r in items:
            r.close()

    def resource_threads(self) -> list[threading.Thread]:
        with self._lock:
            items = list(self.resources.values())
        return [t for r in items for t in getattr(r, "threads", list)()]

    @property
    def cpu_budget(self) -> int:
        return self.options.cpu_budget or cpu_count()

    def for_iteration(self, *epoch: int) -> IteratorContext:
        """The same context for a subtree made for ``repeat`` epoch ``epoch`` (shares everything else)."""
        child = copy.copy(self)
        child.iteration = (*self.iteration, *epoch)
        return child

    def in_order(self) -> IteratorContext:
        """The same context for a subtree whose order must be the same on every run (below a ``shard``:
        every rank runs it and keeps its own positions): every parallel stage in order."""
        child = copy.copy(self)
        child.force_deterministic = True
        return child

    def replaying(self) -> IteratorContext:
        """The same context for a replay that must be deterministic (every parallel stage in order)."""
        child = copy.copy(self)
        child.force_deterministic = True
        child.replay_copy = True
        child.restoring = Flag()
        return child

    def stage_name(self, node: object, base: str) -> str:
        """A stable, unique name for ``node``'s stage: ``"map(parse)"``, then ``"map(parse)#2"`` for a
        second node with the same name. The same node keeps its name across re-created iterators
        (``repeat`` epochs). A node the user named (``name=``: ``node.given_name``) is ``kind(name)``."""
        given = getattr(node, "given_name", None)
        if given is not None:
            base = f"{base.partition('(')[0]}({given})"
        with self._lock:
            name = self._names.get((id(node), base))
            if name is None:
                n = self._counts.get(base, 0) + 1
                self._counts[base] = n
                name = base if n == 1 else f"{base}#{n}"
                self._names[(id(node), base)] = name
        return name

    def stages_below(self, node: Any) -> tuple[str, ...]:
        """The stage names of the nodes ``node`` reads from (its inputs, theirs, ...) built so far: a stage's
        accounts are named by its name, or by it and a space and what they hold (``"parquet buffers"``)."""
        ids: set[int] = set()
        todo = list(node.inputs)
        while todo:
            n = todo.pop()
            if id(n) not in ids:
                ids.add(id(n))
                todo.extend(n.inputs)
        with self._lock:
            return tuple(name for (i, _), name in self._names.items() if i in ids)

    def account(self, stage: str, demand: int | None, *, mandatory: bool = False, min_units: int = 1,
                hint: str | None = None, stage_of: str | None = None) -> StageAccount:
        """A budget account named ``stage``; ``stage_of``: the stage it belongs to when that is not its name
        (a batch's ``assembly``, a reader's ``buffers``)."""
        extra = {} if hint is None else {"hint": hint}
        acc = self.budget.account(stage, demand, mandatory=mandatory, min_units=min_units, owner=self.owner,
                                  **extra)
        acc.warnings = self.warnings
        acc.nested = getattr(self._building, "nested", 0) > 0
        acc.stage_of = stage_of
        return acc

    def deterministic(self, value: bool | None) -> bool:
        if self.force_deterministic:
            return True
        return self.options.is_deterministic() if value is None else bool(value)


class DatasetIterator:
    """Base class of every iterator of a pipeline; subclass it to write a source (``Dataset.from_source``).

    Implement:

    - ``__next__()``: the next element, or ``StopIteration`` at the end (and on every call after it).
      Elements are numpy values (arrays, numpy scalars, ``bytes``) or dicts / tuples of them; Python
      ``int`` / ``float`` / ``str`` are converted like ``map`` results (int64, float32, bytes). An
      exception for one bad element propagates to the caller, and the next call must continue with the
      next element (``ignore_errors()`` relies on it).
    - ``get_state() -> dict``: where the iterator is, as a *small JSON-serializable dict of positions*
      (indices, byte offsets, file names, seeds, counters), never the buffered data itself. Include the
      settings a restore must agree with (e.g. the file list's length) so a state from another source is
      refused. Raise ``NotImplementedError`` if the source cannot be checkpointed.
    - ``set_state(state)``: continue exactly after the element at which ``state`` was taken; it may be
      called on a fresh iterator or one already in use (each call fully resets it). Raise
      :class:`~headrace.StateError` for a state that does not fit (``check_state`` helps).
    - ``close()``: release files, sockets and threads; it must be idempotent and must not block for more
      than about a second. Sources without resources need not override it (the default closes the inputs
      of internal stages).

    Thread safety: headrace calls ``__next__``, ``get_state`` and ``set_state`` of one iterator from one
    thread at a time (a parallel stage reads its input under a lock), so an iterator needs no locks of its
    own; ``close()`` may come from another thread (garbage collection, interpreter exit) while no other
    call runs. Each ``iter(dataset)`` calls the factory again: iterators are never shared.

    ``ctx`` (internal: options, memory budget and stage names of the pipeline) is optional; sources
    written by users are built without it.
    """

    kind = "iterator"
    #: Each element depends on the input's order or position, not only on one input element: the op groups,
    #: pairs, counts, cuts or carries state along the stream (``zip``, ``batch``, ``window``, ``scan``, ``take``
    #: ...). Below a ``deterministic=False`` stage a re-read then makes other elements
    #: (``replays_same_elements``), and a shuffle above keeps its buffer by value.
    depends_on_input_order = False
    ctx: IteratorContext | None = None
    _closed = False

    def __init__(self, ctx: IteratorContext | None = None) -> None:
        self.ctx = ctx
        self._closed = False

    def __iter__(self) -> DatasetIterator:
        return self

    def __next__(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} does not implement __next__")

    def get_state(self) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} does not support get_state")

    def set_state(self, state: dict[str, Any]) -> None:
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
        if not self._signaled:  # closed on its own (not by Iterator.close): stop and join this subtree
            self.signal_stop()
            self.join(time.monotonic() + JOIN_TIMEOUT_S)
        self._close_self()
        if self._own_threads_alive():
            return  # a thread of this stage is still inside its input: closing that under it would race
        for child in self._children():
            if child is not None:
                child.close()

    # ---- shutdown of a whole tree and replay (see the module docstring) ------------------------------
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

    def replay_epoch(self) -> int:
        """A counter of events below this stage that a replay could not repeat on its own (a shuffle
        buffer capped by the budget); a parallel stage snapshots its input's state right after it changes.
        Asked for every element an inline parallel stage pulls, so the common cases are short."""
        children = self._children()
        if not children:
            return 0
        if len(children) == 1:
            child = children[0]
            return 0 if child is None else child.replay_epoch()
        return sum(child.replay_epoch() for child in children if child is not None)

    def replays_deterministically(self) -> bool:
        """Whether re-reading after ``set_state`` yields the same elements in the same order."""
        return all(child.replays_deterministically() for child in self._children() if child is not None)

    def replays_same_elements(self) -> bool:
        """Whether re-reading after ``set_state`` yields the same elements, in any order (a shuffle's hash
        keys need it); False where a stage whose elements depend on its input's order
        (``depends_on_input_order``) reads an input that does not replay in order (below ``deterministic=False``)."""
        children = [child for child in self._children() if child is not None]
        if self.depends_on_input_order and not all(child.replays_deterministically() for child in children):
            return False
        return all(child.replays_same_elements() for child in children)

    def skip_ahead(self, n: int) -> None:
        """Advance ``n`` positions (the rule: ``headrace._ops.positions``); sources override it to seek."""
        advance(self.__next__, n)


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


class _StageHooks(DatasetIterator):
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

    def __init__(self, ctx: IteratorContext, source: DatasetIterator) -> None:
        super().__init__(ctx)
        self._source = source
        self._next_input = source.__next__

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, **self._settings(), **self._counters(), "input": self._source.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, **self._settings())
        self._source.set_state(state["input"])
        self._restore_counters(state)

    def _children(self) -> list[DatasetIterator]:
        return [self._source]


class MultiInputIterator(_StageHooks):
    """A stage with several inputs (``zip``, ``concatenate``, sampling): like :class:`UnaryIterator`,
    with the inputs' states saved as a list under ``"inputs"``."""

    def __init__(self, ctx: IteratorContext, sources: list[DatasetIterator]) -> None:
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

    def _children(self) -> list[DatasetIterator]:
        return list(self._sources)
