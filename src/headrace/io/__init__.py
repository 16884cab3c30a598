"""Readers and writers: TFRecord and tf.train.Example, Parquet, HDF5, CSV, text lines and fixed-length
records, image folders; local or fsspec URLs.

Names load lazily from their modules on first use, so importing ``headrace.io`` needs none of the
optional dependencies (pyarrow, h5py, OpenCV...).
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "TFRecordDataset": "tfrecord",
    "TFRecordWriter": "tfrecord_writer",
    "TFRecordOptions": "tfrecord_writer",
    "ShardedWriter": "sharded_writer",
    "build_index": "tfrecord_index",
    "read_index": "tfrecord_index",
    "TFRecordRandomAccess": "tfrecord_index",
    "ParquetDataset": "parquet",
    "HDF5Dataset": "hdf5",
    "TextLineDataset": "text",
    "FixedLengthRecordDataset": "text",
    "CsvDataset": "csv",
    "make_csv_dataset": "make_csv",
    "image_folder": "_image_folder",
    "FixedLenFeature": "example",
    "VarLenFeature": "example",
    "FixedLenSequenceFeature": "example",
    "parse_single_example": "example",
    "parse_example": "example",
    "parse_single_sequence_example": "example",
    "VarLenBatch": "example",
    "CorruptRecordWarning": "tfrecord",
    "SkippedRecord": "tfrecord",
}
_SUBMODULES = {"example", "files", "tfrecord", "tfrecord_writer", "sharded_writer", "tfrecord_index",
               "parquet", "hdf5", "csv", "text"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'headrace.io' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = sorted(_NAMES)
