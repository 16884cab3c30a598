"""``TFRecordWriter`` and ``TFRecordOptions``, public here as ``headrace.io.TFRecordWriter`` /
``headrace.io.TFRecordOptions``: write TFRecord files exactly as TensorFlow does.

Their home is ``headrace._files.tfrecord_writer``, below the ``Dataset`` facade (``Dataset.save`` writes with
them without importing ``headrace.io``); this module re-exports them.
"""

from __future__ import annotations

from .._files.tfrecord_writer import TFRecordOptions, TFRecordWriter

__all__ = ["TFRecordOptions", "TFRecordWriter"]
