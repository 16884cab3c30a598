"""``Dataset.with_options``: attach ``Options`` to a pipeline (no stage of its own at run time)."""

from __future__ import annotations

from .._dataset import Dataset
from .._options import Options
from .base import DatasetIterator, IteratorContext


class OptionsDataset(Dataset):
    def __init__(self, input_ds: Dataset, options: Options) -> None:
        if not isinstance(options, Options):
            raise TypeError(f"with_options({options!r}): expected headrace.Options")
        super().__init__([input_ds])
        self.opts = options

    def _own_options(self) -> Options:
        return self.opts

    def cardinality(self) -> int:
        return self._inputs[0].cardinality()

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return self._inputs[0]._make_iterator(ctx)
