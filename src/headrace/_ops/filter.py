"""``Dataset.filter``: keep elements for which the predicate returns a true scalar boolean."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._engine.calls import guarded_call
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage, UnaryIterator
from .._engine.stage_support import fn_name, note_error


def as_bool(value: Any, stage: str) -> bool:
    """A predicate result as ``bool``: Python/numpy bools or 0-d bool arrays; anything else is an error."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype == np.bool_:
        return bool(value)
    raise TypeError(f"{stage}: the predicate must return a scalar bool, got {value!r} "
                    f"({type(value).__name__}); return e.g. `x > 0` for a scalar x, or reduce with np.all/np.any")


class FilterNode(DatasetNode):
    shard_passes = True
    spec_passes = True
    def __init__(self, input_node: DatasetNode, predicate: Callable[..., Any], name: str | None) -> None:
        super().__init__([input_node])
        if not callable(predicate):
            raise TypeError(f"filter(predicate={predicate!r}): predicate must be callable")
        self.predicate = predicate
        self.label = f"filter({name or fn_name(predicate)})"

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return PredicateIterator(ctx, self.inputs[0].make_iterator(ctx), self.predicate,
                                 ctx.stage_name(self, self.label), stop_on_false=False)


class PredicateIterator(UnaryIterator):
    """Applies a predicate per element: drops failures (filter) or ends the stream (take_while)."""

    def __init__(self, ctx: IteratorContext, source: Stage, predicate: Callable[..., Any], stage: str,
                 *, stop_on_false: bool) -> None:
        super().__init__(ctx, source)
        self.kind = "take_while" if stop_on_false else "filter"
        self._predicate = predicate
        self._stage = stage
        self._stop_on_false = stop_on_false
        self.depends_on_input_order = stop_on_false  # take_while: the elements before the first false
        self._index = 0
        self._done = False

    def __next__(self) -> Any:
        while not self._done:
            x = self._next_input()
            i = self._index
            self._index = i + 1
            try:
                keep = as_bool(guarded_call(self._predicate, x, self._stage), self._stage)
            except Exception as e:
                note_error(e, self._stage, i)
                raise
            if keep:
                return x
            if self._stop_on_false:
                self._done = True
        raise StopIteration

    def _counters(self) -> dict[str, Any]:
        return {"index": self._index, "done": self._done}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        self._index = int(state["index"])
        self._done = bool(state["done"])
