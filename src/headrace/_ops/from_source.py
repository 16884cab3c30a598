"""``Dataset.from_source``: a dataset whose elements come from iterators written by users.

``make_iterator()`` is called (with no arguments) once per iteration: every ``iter(dataset)`` and every
``repeat`` epoch. It returns an object of the iterator protocol (:class:`headrace.DatasetIterator`): a
subclass of it needs ``__next__`` (and ``get_state`` / ``set_state`` to be checkpointed); any other object
must have all of ``__next__``, ``get_state``, ``set_state`` and ``close``.

The stage (a :class:`~headrace._engine.stage.Stage`) wraps that iterator, which inherits none of the engine's
machinery: elements are normalized as ``map`` results are (Python ``int`` -> int64,
``float`` -> float32, ``str`` -> ``bytes``); an error gets the note ``in from_source(<name>) at element
<i>`` and the stage stays usable; the state is ``{"kind": "from_source", "name", "index", "state": <the
iterator's own state>}`` and a state saved from a source of another name raises ``StateError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._engine.calls import guarded_apply
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.source_protocol import DatasetIterator
from .._engine.stage import Stage
from .._engine.stage_support import check_state, fn_name, note_error
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from .._structure import SCALAR_TYPES, normalize

PROTOCOL = ("__next__", "get_state", "set_state", "close")


def missing_protocol(it: Any) -> list[str]:
    """The methods of the iterator protocol ``it`` lacks (a DatasetIterator subclass must define ``__next__``)."""
    if isinstance(it, DatasetIterator):
        return ["__next__"] if type(it).__next__ is DatasetIterator.__next__ else []
    return [m for m in PROTOCOL if not callable(getattr(it, m, None))]


class SourceNode(DatasetNode):
    def __init__(self, make_iterator: Callable[[], Any], cardinality: int, name: str | None) -> None:
        super().__init__()
        if not callable(make_iterator):
            raise TypeError(f"from_source(make_iterator={type(make_iterator).__name__}): pass a callable that "
                            "returns a new iterator on every call (e.g. the DatasetIterator subclass itself), "
                            "not an iterator")
        if isinstance(cardinality, bool) or not isinstance(cardinality, int) or cardinality < UNKNOWN_CARDINALITY:
            raise ValueError(f"from_source(cardinality={cardinality!r}): expected the number of elements (>= 0), "
                             f"headrace.INFINITE_CARDINALITY ({INFINITE_CARDINALITY}) or "
                             f"headrace.UNKNOWN_CARDINALITY ({UNKNOWN_CARDINALITY})")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"from_source(name={name!r}): expected a str or None")
        self.factory = make_iterator
        self.count = cardinality
        self.name = name or fn_name(make_iterator)
        self.label = f"from_source({self.name})"

    def cardinality(self) -> int:
        return self.count

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _SourceIterator(ctx, self, ctx.stage_name(self, self.label))


class _SourceIterator(Stage):
    """The stage around a user's iterator (an object of the protocol, never a stage itself)."""

    kind = "from_source"

    def __init__(self, ctx: IteratorContext, node: SourceNode, stage: str) -> None:
        super().__init__(ctx)
        it = guarded_apply(node.factory, stage)
        missing = missing_protocol(it)
        if missing:
            raise TypeError(f"{stage}: make_iterator() returned {type(it).__name__}, which lacks "
                            f"{', '.join(missing)} of the iterator protocol; subclass headrace.DatasetIterator "
                            "and implement __next__ (and get_state / set_state to support checkpoints)")
        self._it = it
        self._next = it.__next__
        self._name = node.name
        self._stage = stage
        self._index = 0

    def __next__(self) -> Any:
        i = self._index
        try:
            y = self._next()
        except StopIteration:
            raise
        except Exception as e:
            self._index = i + 1
            note_error(e, self._stage, i)
            raise
        self._index = i + 1
        if type(y) in SCALAR_TYPES:
            return y
        return normalize(y, self._stage)

    def get_state(self) -> dict[str, Any]:
        state = self._it.get_state()
        if not isinstance(state, dict):
            raise TypeError(f"{self._stage}: get_state() of {type(self._it).__name__} returned "
                            f"{type(state).__name__}; it must return a small JSON-serializable dict of positions")
        return {"kind": self.kind, "name": self._name, "index": self._index, "state": state}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, name=self._name)
        self._it.set_state(state["state"])
        self._index = int(state["index"])

    def _close_self(self) -> None:
        self._it.close()
