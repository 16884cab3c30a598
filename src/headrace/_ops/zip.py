"""``Dataset.zip``: elements of several datasets side by side, in the structure they were given in.

``Dataset.zip(a, b)`` and ``Dataset.zip((a, b))`` yield ``(x, y)``; ``Dataset.zip({"x": a, "y": b})``
yields dicts; ``Dataset.zip(a)`` yields ``a``'s elements as they are (tf.data's rule: the structure is the
argument). Iteration ends with the shortest dataset.

Every component is pulled for every element, also when one of them raises (the first error is re-raised
after the others were pulled), so after an error the components stay in step, as in tf.data
(``zip(...).ignore_errors()`` drops the whole element and goes on with the next one).

Cardinality (tf.data's): unknown if any component's is, else the smallest finite one, else infinite.
"""

from __future__ import annotations

from typing import Any

from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode, SpecOf, as_node
from .._engine.stage import MultiInputIterator, Stage
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from .._structure import flatten, pack_as


def _reject_lists(datasets: Any) -> None:
    if isinstance(datasets, list):
        raise TypeError("zip(): a list of datasets is not a structure in tf.data; pass a tuple "
                        f"(Dataset.zip((a, b)) or Dataset.zip(a, b)), got a list of {len(datasets)}")
    if isinstance(datasets, dict):
        for v in datasets.values():
            _reject_lists(v)
    elif isinstance(datasets, tuple):
        for v in datasets:
            _reject_lists(v)


class ZipNode(DatasetNode):
    label = "zip"

    def __init__(self, datasets: Any) -> None:
        _reject_lists(datasets)
        flat = flatten(datasets)
        if not flat:
            raise ValueError("zip() needs at least one dataset")
        nodes = [as_node(d, f"zip(): every leaf of the structure must be a headrace.Dataset, got {type(d).__name__}")
                 for d in flat]
        super().__init__(nodes)
        self.structure = datasets

    def cardinality(self) -> int:
        cards = [d.cardinality() for d in self.inputs]
        if UNKNOWN_CARDINALITY in cards:
            return UNKNOWN_CARDINALITY
        finite = [c for c in cards if c >= 0]
        return min(finite) if finite else INFINITE_CARDINALITY

    def compute_spec(self, spec_of: SpecOf) -> Any:
        specs = [spec_of(d) for d in self.inputs]
        if any(s is None for s in specs):
            return None
        return pack_as(self.structure, specs)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _ZipIterator(ctx, [d.make_iterator(ctx) for d in self.inputs], self.structure)


class _ZipIterator(MultiInputIterator):
    kind = "zip"

    def __init__(self, ctx: IteratorContext, sources: list[Stage], structure: Any) -> None:
        super().__init__(ctx, sources)
        self.depends_on_input_order = len(sources) > 1  # pairs the inputs' elements by position
        self._structure = structure
        self._ended = False

    def __next__(self) -> Any:
        if self._ended:
            raise StopIteration
        values = []
        error: BaseException | None = None
        ended = False
        for s in self._sources:
            try:
                values.append(s.__next__())
            except StopIteration:
                ended = True
                values.append(None)
            except Exception as e:
                if error is None:
                    error = e
                values.append(None)
        if ended:
            self._ended = True
        if error is not None:
            try:
                raise error
            finally:
                error = None
        if ended:
            raise StopIteration
        return pack_as(self._structure, values)

    def _counters(self) -> dict[str, Any]:
        return {"ended": self._ended}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        self._ended = bool(state.get("ended", False))
