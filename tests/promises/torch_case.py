"""``to_torch`` inside DataLoader workers, for the generated cases: each worker measures its own memory.

``Measured(ds, k)`` wraps ``headrace.torch.to_torch(ds, num_workers=k)``; in each worker it samples that
worker's memory around the iteration (from a thread, outside the pipeline) and, after the worker's last
element, yields ``{"__worker__": id, "growth": bytes}``. It pickles (spawn): the dataset goes as to_torch's
recipe.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

import headrace as hr


class Measured(IterableDataset):
    def __init__(self, ds: hr.Dataset, workers: int) -> None:
        from headrace.torch import to_torch

        self.inner = to_torch(ds, num_workers=workers)

    def __iter__(self) -> Iterator[Any]:
        from tests.promises.case_child import Sampler

        info = get_worker_info()
        sampler = Sampler()
        yield from self.inner
        yield {"__worker__": -1 if info is None else info.id, "growth": sampler.stop()}
