"""``Dataset.skip``: all but the first ``count`` elements (a negative ``count``, e.g. -1: skip everything)."""

from __future__ import annotations

from typing import Any

from .._args import as_int
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage, UnaryIterator
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY


class SkipNode(DatasetNode):
    label = "skip"
    spec_passes = True

    def __init__(self, input_node: DatasetNode, count: int) -> None:
        super().__init__([input_node])
        self.count = max(-1, as_int(count, "skip(count)"))

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if n in (INFINITE_CARDINALITY, UNKNOWN_CARDINALITY):
            return n if self.count != -1 or n == UNKNOWN_CARDINALITY else 0
        return 0 if self.count == -1 else max(0, n - self.count)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _SkipIterator(ctx, self.inputs[0].make_iterator(ctx), self.count)


class _SkipIterator(UnaryIterator):
    depends_on_input_order = True  # the first `count` of the input order
    kind = "skip"

    def __init__(self, ctx: IteratorContext, source: Stage, count: int) -> None:
        super().__init__(ctx, source)
        self._count = count
        self._skipped = 0

    def __next__(self) -> Any:
        while self._count == -1 or self._skipped < self._count:
            self._next_input()
            self._skipped += 1
        return self._next_input()

    def _settings(self) -> dict[str, Any]:
        return {"count": self._count}

    def _counters(self) -> dict[str, Any]:
        return {"skipped": self._skipped}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        self._skipped = int(state["skipped"])
