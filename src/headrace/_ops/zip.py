"""``Dataset.zip``: elements of several datasets side by side, in the structure they were given in.

``Dataset.zip(a, b)`` and ``Dataset.zip((a, b))`` yield ``(x, y)``; ``Dataset.zip({"x": a, "y": b})``
yields dicts. Iteration ends with the shortest dataset.
"""

from __future__ import annotations

from typing import Any

from .._dataset import Dataset
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from .._structure import flatten, pack_as
from .base import DatasetIterator, IteratorContext, check_state


class ZipDataset(Dataset):
    def __init__(self, datasets: Any) -> None:
        flat = flatten(datasets)
        if not flat:
            raise ValueError("zip() needs at least one dataset")
        for d in flat:
            if not isinstance(d, Dataset):
                raise TypeError(f"zip(): every leaf of the structure must be a headrace.Dataset, got "
                                f"{type(d).__name__}")
        super().__init__(flat)
        self.structure = datasets

    def cardinality(self) -> int:
        cards = [d.cardinality() for d in self._inputs]
        finite = [c for c in cards if c >= 0]
        if finite:
            return min(finite)
        return UNKNOWN_CARDINALITY if UNKNOWN_CARDINALITY in cards else INFINITE_CARDINALITY

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return _ZipIterator(ctx, [d._make_iterator(ctx) for d in self._inputs], self.structure)


class _ZipIterator(DatasetIterator):
    kind = "zip"

    def __init__(self, ctx: IteratorContext, sources: list[DatasetIterator], structure: Any) -> None:
        super().__init__(ctx)
        self._sources = sources
        self._structure = structure

    def __next__(self) -> Any:
        return pack_as(self._structure, [s.__next__() for s in self._sources])

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "inputs": [s.get_state() for s in self._sources]}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        if len(state["inputs"]) != len(self._sources):
            raise ValueError(f"zip: the state has {len(state['inputs'])} inputs, this pipeline "
                             f"{len(self._sources)}")
        for s, st in zip(self._sources, state["inputs"]):
            s.set_state(st)

    def _children(self) -> list[DatasetIterator]:
        return list(self._sources)
