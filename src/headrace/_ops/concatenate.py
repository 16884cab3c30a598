"""``Dataset.concatenate``: the first dataset's elements, then the second's.

tf.data checks at construction that both have the same element spec; headrace has no static specs, so
the first element of the second dataset is checked against the first dataset's first element and a
mismatch in structure raises ``TypeError`` naming both.
"""

from __future__ import annotations

from typing import Any

from .._dataset import Dataset
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from .._structure import describe, structure_signature
from .base import DatasetIterator, IteratorContext, check_state


class ConcatenateDataset(Dataset):
    def __init__(self, first: Dataset, second: Dataset) -> None:
        if not isinstance(second, Dataset):
            raise TypeError(f"concatenate(dataset={second!r}): expected a headrace.Dataset")
        super().__init__([first, second])

    def cardinality(self) -> int:
        a, b = (d.cardinality() for d in self._inputs)
        if INFINITE_CARDINALITY in (a, b):
            return INFINITE_CARDINALITY
        if UNKNOWN_CARDINALITY in (a, b):
            return UNKNOWN_CARDINALITY
        return a + b

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return _ConcatenateIterator(ctx, [d._make_iterator(ctx) for d in self._inputs])


class _ConcatenateIterator(DatasetIterator):
    kind = "concatenate"

    def __init__(self, ctx: IteratorContext, sources: list[DatasetIterator]) -> None:
        super().__init__(ctx)
        self._sources = sources
        self._part = 0
        self._first_signature: Any = None
        self._checked = False

    def __next__(self) -> Any:
        while self._part < 2:
            try:
                x = self._sources[self._part].__next__()
            except StopIteration:
                self._part += 1
                continue
            if self._part == 0:
                if self._first_signature is None:
                    self._first_signature = (structure_signature(x), describe(x))
            elif not self._checked:
                self._checked = True
                if self._first_signature is not None and structure_signature(x) != self._first_signature[0]:
                    raise TypeError(f"concatenate: the datasets have different element structures: "
                                    f"{self._first_signature[1]} vs {describe(x)}")
            return x
        raise StopIteration

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "part": self._part, "inputs": [s.get_state() for s in self._sources]}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        self._part = int(state["part"])
        for s, st in zip(self._sources, state["inputs"]):
            s.set_state(st)
        self._checked = self._part > 0

    def _children(self) -> list[DatasetIterator]:
        return list(self._sources)
