"""Reading calibration and evaluation data from a headrace ``Dataset``, one batch at a time.

Elements are what :func:`headrace.train.fit` takes: ``(inputs, target)`` pairs, unbatched; for calibration
a bare ``inputs`` element is accepted too. ``inputs`` is one array (the model's single input, e.g. an
image ``uint8 (H, W, 3)``). Nothing is read ahead beyond the pipeline's own buffers, so data larger than
memory works.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np

from .._structure import describe


def split_element(batch: Any) -> tuple[Any, Any]:
    """``(inputs, targets)`` of a batch: a 2-tuple is ``(inputs, targets)``, anything else is ``inputs``."""
    if isinstance(batch, tuple | list) and len(batch) == 2:
        return batch[0], batch[1]
    return batch, None


def as_array(inputs: Any, where: str) -> np.ndarray:
    """``inputs`` as one numpy array (a torch tensor is converted), else ``ValueError`` naming ``where``."""
    if hasattr(inputs, "detach") and hasattr(inputs, "numpy"):
        inputs = inputs.detach().cpu().numpy()
    if not isinstance(inputs, np.ndarray) or inputs.dtype == object:
        raise ValueError(f"{where}: the model input must be one numeric array, got {describe(inputs)}; map the "
                         "dataset to (inputs, target) pairs, e.g. ds.map(lambda ex: (ex['image'], ex['label']))")
    return inputs


def iter_batches(dataset: Any, batch_size: int, what: str) -> Generator[tuple[np.ndarray, Any], None, None]:
    """``(inputs, targets)`` batches of ``batch_size`` (the last may be smaller) read from ``dataset``.

    The iterator is closed when the generator is closed or exhausted. Raises ``ValueError`` naming ``what``
    and the batch index if an element is not ``(array, target)`` / ``array``.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be an int >= 1")
    if not hasattr(dataset, "batch"):
        raise TypeError(f"{what} must be a headrace Dataset, got {type(dataset).__name__}")
    it = iter(dataset.batch(batch_size))
    try:
        for index, batch in enumerate(it):
            inputs, targets = split_element(batch)
            yield as_array(inputs, f"{what}, batch {index} (elements {index * batch_size}..)"), targets
    finally:
        it.close()


def first_inputs(dataset: Any, what: str = "the dataset") -> np.ndarray:
    """The inputs of ``dataset``'s first element as a batch of one (for tracing, MACs and export).

    Raises ``ValueError`` naming ``what`` if the dataset is empty.
    """
    batches = iter_batches(dataset, 1, what)
    try:
        first = next(batches, None)
    finally:
        batches.close()
    if first is None:
        raise ValueError(f"{what} is empty: it yielded no elements")
    return first[0]


__all__ = ["as_array", "first_inputs", "iter_batches", "split_element"]
