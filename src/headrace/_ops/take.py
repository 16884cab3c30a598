"""``Dataset.take``: at most the first ``count`` elements (a negative ``count``, e.g. -1: all of them)."""

from __future__ import annotations

from typing import Any

from .._args import as_int
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage, UnaryIterator
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY


class TakeNode(DatasetNode):
    label = "take"
    spec_passes = True

    def __init__(self, input_node: DatasetNode, count: int) -> None:
        super().__init__([input_node])
        self.count = max(-1, as_int(count, "take(count)"))

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if self.count == -1:
            return n
        if n == UNKNOWN_CARDINALITY:
            return UNKNOWN_CARDINALITY
        return self.count if n == INFINITE_CARDINALITY else min(n, self.count)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _TakeIterator(ctx, self.inputs[0].make_iterator(ctx), self.count)


class _TakeIterator(UnaryIterator):
    depends_on_input_order = True  # the first `count` of the input order
    kind = "take"

    def __init__(self, ctx: IteratorContext, source: Stage, count: int) -> None:
        super().__init__(ctx, source)
        self._count = count
        self._taken = 0

    def __next__(self) -> Any:
        if self._count != -1 and self._taken >= self._count:
            raise StopIteration
        x = self._next_input()
        self._taken += 1
        return x

    def _settings(self) -> dict[str, Any]:
        return {"count": self._count}

    def _counters(self) -> dict[str, Any]:
        return {"taken": self._taken}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        self._taken = int(state["taken"])
