"""``Dataset.unbatch``: split every element along axis 0 into that many elements.

The batch being split is charged to a mandatory memory account until its last row is handed on; rows
of N-D components are copies, so the batch's memory is freed as soon as it is used up.
State: the input's state before the current batch plus the row offset (no copy of the batch).
"""

from __future__ import annotations

from typing import Any

from .._dataset import Dataset
from .._structure import nbytes, pack_as
from .base import DatasetIterator, IteratorContext, check_state
from .stacking import row, unstack


class UnbatchDataset(Dataset):
    def __init__(self, input_ds: Dataset) -> None:
        super().__init__([input_ds])

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        source = self._inputs[0]._make_iterator(ctx)
        stage = ctx.stage_name(self, "unbatch")
        return _UnbatchIterator(ctx, source, stage)


class _UnbatchIterator(DatasetIterator):
    kind = "unbatch"

    def __init__(self, ctx: IteratorContext, source: DatasetIterator, stage: str) -> None:
        super().__init__(ctx)
        self._source = source
        self._stage = stage
        self._account = ctx.account(stage, 1, mandatory=True)
        self._clear()

    def _clear(self) -> None:
        self._batch: Any = None
        self._leaves: list[Any] = []
        self._rows = 0
        self._offset = 0
        self._charged = 0
        self._before = None

    def _release(self) -> None:
        if self._charged:
            self._account.release(self._charged)
        self._clear()

    def _load(self) -> None:
        before = self._source.get_state()
        batch = self._source.__next__()
        rows, leaves = unstack(batch, self._stage)
        n = nbytes(batch)
        self._account.acquire(n)
        self._batch, self._leaves, self._rows, self._offset, self._charged = batch, leaves, rows, 0, n
        self._before = before

    def __next__(self) -> Any:
        while self._offset >= self._rows:
            self._release()
            self._load()
        i = self._offset
        self._offset = i + 1
        if len(self._leaves) == 1 and not isinstance(self._batch, dict | tuple | list):
            out = row(self._leaves[0], i)
        else:
            out = pack_as(self._batch, [row(leaf, i) for leaf in self._leaves])
        return out

    def get_state(self) -> dict[str, Any]:
        if self._batch is not None and self._offset < self._rows:
            return {"kind": self.kind, "input": self._before, "offset": self._offset}
        return {"kind": self.kind, "input": self._source.get_state(), "offset": 0}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        self._release()
        self._source.set_state(state["input"])
        if int(state["offset"]) > 0:
            self._load()
            self._offset = int(state["offset"])

    def _close_self(self) -> None:
        self._account.close()

    def _children(self) -> list[DatasetIterator]:
        return [self._source]
