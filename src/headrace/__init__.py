"""headrace: tf.data's streaming ``Dataset`` without TensorFlow, inside a hard memory budget.

Public surface::

    import headrace as hr
    ds = (hr.Dataset.from_tensor_slices((x, y))
            .map(f, num_parallel_calls=hr.AUTOTUNE)
            .shuffle(1000, seed=0).batch(32).prefetch(hr.AUTOTUNE)
            .with_options(hr.Options(memory_budget="512MiB")))

New sources: subclass :class:`DatasetIterator` (the iterator protocol) and wrap it with
``Dataset.from_source``.

Submodules (``headrace.io``: TFRecord, tf.train.Example, Parquet, HDF5, image folders; ``headrace.image``,
``headrace.torch``, ``headrace.service``, ``headrace.lightning``, ...: every public one, ``_LAZY_SUBMODULES``) are
attributes after ``import headrace`` and load on first use; one whose optional dependency is missing raises
``MissingDependencyError`` then.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._dataset import Dataset
from ._engine.source_protocol import DatasetIterator
from ._errors import (
    ConvertError,
    DataLossError,
    ExportError,
    HeadraceError,
    IgnoredErrorsWarning,
    ImageDecodeError,
    InternalTimeoutError,
    IteratorClosedError,
    ManifestError,
    MemoryBudgetError,
    MemoryBudgetWarning,
    MissingDependencyError,
    RecordParseError,
    RemoteTraceback,
    SchemaConflictError,
    SharedMemoryError,
    StaleIndexError,
    StateError,
    TooManyErrorsError,
    WorkerError,
)
from ._iterator import Iterator
from ._memory import parse_bytes
from ._options import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Options
from ._spec import DatasetSpec, NoneTensorSpec, RaggedTensorSpec, TensorShape, TensorSpec

__version__ = "0.1.0"

# every public submodule (tests/test_public_names.py keeps this in step with the package and the docs)
_LAZY_SUBMODULES = frozenset({
    "cli", "compress", "convert", "data", "demo", "distribute", "image", "io", "jax", "jax_orbax", "keras",
    "lightning", "service", "text", "text_demo", "torch", "train",
})


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'headrace' has no attribute {name!r}")


__all__ = [
    "AUTOTUNE",
    "INFINITE_CARDINALITY",
    "UNKNOWN_CARDINALITY",
    "ConvertError",
    "DataLossError",
    "Dataset",
    "DatasetIterator",
    "DatasetSpec",
    "ExportError",
    "HeadraceError",
    "IgnoredErrorsWarning",
    "ImageDecodeError",
    "InternalTimeoutError",
    "Iterator",
    "IteratorClosedError",
    "ManifestError",
    "MemoryBudgetError",
    "MemoryBudgetWarning",
    "MissingDependencyError",
    "NoneTensorSpec",
    "Options",
    "RaggedTensorSpec",
    "RecordParseError",
    "RemoteTraceback",
    "SchemaConflictError",
    "SharedMemoryError",
    "StaleIndexError",
    "StateError",
    "TensorShape",
    "TensorSpec",
    "TooManyErrorsError",
    "WorkerError",
    "parse_bytes",
]
