"""``headrace.data``: the names of ``tf.data`` in one place, so tf.data code runs with only the import changed.

``from tensorflow.data import Dataset, AUTOTUNE, Options, TFRecordDataset`` becomes
``from headrace.data import Dataset, AUTOTUNE, Options, TFRecordDataset`` (and ``tf.data.X`` becomes
``headrace.data.X``).
"""

from __future__ import annotations

from ._dataset import Dataset
from ._iterator import Iterator
from ._options import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, AutoShardPolicy, Options
from ._spec import DatasetSpec, NoneTensorSpec, RaggedTensorSpec, TensorShape, TensorSpec
from .io.text import FixedLengthRecordDataset, TextLineDataset
from .io.tfrecord import TFRecordDataset

__all__ = ["AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "AutoShardPolicy", "Dataset", "DatasetSpec",
           "FixedLengthRecordDataset", "Iterator", "NoneTensorSpec", "Options", "RaggedTensorSpec", "TFRecordDataset",
           "TensorShape", "TensorSpec", "TextLineDataset"]
