"""``Dataset.take_while``: elements up to (not including) the first where the predicate is false."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage
from .._engine.stage_support import fn_name
from .filter import PredicateIterator


class TakeWhileNode(DatasetNode):
    label = "take_while"
    spec_passes = True

    def __init__(self, input_node: DatasetNode, predicate: Callable[..., Any]) -> None:
        super().__init__([input_node])
        if not callable(predicate):
            raise TypeError(f"take_while(predicate={predicate!r}): predicate must be callable")
        self.predicate = predicate

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        stage = ctx.stage_name(self, f"take_while({fn_name(self.predicate)})")
        return PredicateIterator(ctx, self.inputs[0].make_iterator(ctx), self.predicate, stage,
                                 stop_on_false=True)
