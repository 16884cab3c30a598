"""``Dataset.concatenate``: the first dataset's elements, then the second's.

As tf.data, the element specs must agree in structure and dtypes (shapes may differ: the result's spec
has unknown dimensions where they do): a mismatch raises ``TypeError`` naming both when the pipeline is
built. Where a spec cannot be known without reading data (a generator without ``output_signature``),
the first element of the second dataset is checked against the first dataset's spec when it arrives,
before it is yielded.
"""

from __future__ import annotations

from typing import Any

from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode, SpecOf, as_node
from .._engine.stage import MultiInputIterator, Stage
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from .._spec import most_specific_compatible, require_compatible, spec_of

_FIX = "concatenate datasets whose elements have the same structure and dtypes (cast or map one first)"


class ConcatenateNode(DatasetNode):
    label = "concatenate"

    def __init__(self, first: DatasetNode, second: Any) -> None:
        super().__init__([first, as_node(second, f"concatenate(dataset={second!r}): expected a headrace.Dataset")])
        self.static_spec()  # incompatible static specs raise TypeError now

    def compute_spec(self, spec_of_input: SpecOf) -> Any:
        specs = [spec_of_input(d) for d in self.inputs]
        if any(s is None for s in specs):
            return None
        return require_compatible(specs, "concatenate", _FIX)

    def cardinality(self) -> int:
        a, b = (d.cardinality() for d in self.inputs)
        if INFINITE_CARDINALITY in (a, b):
            return INFINITE_CARDINALITY
        if UNKNOWN_CARDINALITY in (a, b):
            return UNKNOWN_CARDINALITY
        return a + b

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _ConcatenateIterator(ctx, [d.make_iterator(ctx) for d in self.inputs], self)


class _ConcatenateIterator(MultiInputIterator):
    kind = "concatenate"

    def __init__(self, ctx: IteratorContext, sources: list[Stage], node: ConcatenateNode) -> None:
        super().__init__(ctx, sources)
        self._node = node
        self._part = 0
        self._first_spec: Any = node.inputs[0].static_spec()
        self._checked = node.static_spec() is not None

    def __next__(self) -> Any:
        while self._part < 2:
            try:
                x = self._sources[self._part].__next__()
            except StopIteration:
                self._part += 1
                continue
            if self._checked:
                return x
            if self._part == 0:
                if self._first_spec is None:
                    self._first_spec = spec_of(x)
            else:
                self._checked = True
                if self._first_spec is not None and most_specific_compatible(self._first_spec, spec_of(x)) is None:
                    raise TypeError(f"concatenate: incompatible element specs: {self._first_spec!r} vs "
                                    f"{spec_of(x)!r} (dataset 1); {_FIX}")
            return x
        raise StopIteration

    def _counters(self) -> dict[str, Any]:
        return {"part": self._part}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        self._part = int(state["part"])
        self._checked = self._checked or self._part > 0
