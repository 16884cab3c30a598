"""``Dataset.enumerate``: ``(index, element)`` pairs, index an int64 counting from ``start``.

As in tf.data, it is ``Dataset.zip((Dataset.range(start, 2**63 - 1), dataset))``.
"""

from __future__ import annotations

from .._dataset import Dataset
from .sources import RangeDataset
from .zip import ZipDataset


def enumerate_dataset(dataset: Dataset, start: int) -> Dataset:
    if isinstance(start, bool) or not isinstance(start, int):
        raise TypeError(f"enumerate(start={start!r}): start must be an int")
    return ZipDataset((RangeDataset(start, 2**63 - 1), dataset))
