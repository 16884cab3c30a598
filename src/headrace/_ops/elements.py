"""A dataset over elements already in memory, with a known spec: the windows of ``window`` and
``group_by_window`` (a ``headrace.Dataset`` per window, as tf.data yields a dataset per window).

State: the index of the next element (the elements themselves belong to the stage that made the window).
"""

from __future__ import annotations

from typing import Any

from .base import DatasetIterator, IteratorContext, check_state
from .node import DatasetNode, SpecOf


class ElementsNode(DatasetNode):
    label = "window"

    def __init__(self, elements: list[Any], spec: Any) -> None:
        super().__init__()
        self.elements = elements
        self.spec = spec

    def cardinality(self) -> int:
        return len(self.elements)

    def compute_spec(self, spec_of: SpecOf) -> Any:
        return self.spec

    def make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return _ElementsIterator(ctx, self.elements)


class _ElementsIterator(DatasetIterator):
    kind = "window_elements"

    def __init__(self, ctx: IteratorContext, elements: list[Any]) -> None:
        super().__init__(ctx)
        self._elements = elements
        self._i = 0

    def __next__(self) -> Any:
        i = self._i
        if i >= len(self._elements):
            raise StopIteration
        self._i = i + 1
        return self._elements[i]

    def skip_ahead(self, n: int) -> None:
        self._i = min(len(self._elements), self._i + n)

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "length": len(self._elements), "next": self._i}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, length=len(self._elements))
        self._i = int(state["next"])
