"""Image classification data as the CLI and the demo use it: TFRecord shards of ``tf.train.Example``.

Record format (the keys of TensorFlow's ImageNet TFRecords, ``build_imagenet_data.py``):
``image/encoded`` (bytes: a JPEG, PNG or any format :func:`headrace.image.decode` reads) and
``image/class/label`` (int64, ``0 .. num_classes - 1``).

The training pipeline (:func:`image_classification_dataset`)::

    shard files (shuffled per epoch) -> interleave(TFRecordDataset, cycle_length=4, parallel)
      -> shuffle(buffer of encoded records) -> map(parse + decode_and_resize, AUTOTUNE threads)
      -> elements (uint8 image (H, W, 3), int64 label)

It shuffles the small encoded records, not decoded images, so the shuffle buffer costs ~40 KB per
element instead of ``H*W*3`` bytes; models take the uint8 images as they are (see ``models.py``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._args import image_hw
from .._dataset import Dataset
from .._options import AUTOTUNE
from ..io import files as _files
from ..io.tfrecord_index import INDEX_SUFFIX

IMAGE_KEY = "image/encoded"
LABEL_KEY = "image/class/label"
_TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".tfrec")


def find_tfrecords(path: str | os.PathLike[str]) -> list[str]:
    """The TFRecord files a user means by ``path``: a file, a directory (its ``*.tfrecord*`` files) or a
    glob pattern (record index files, ``*.idx``, left out); sorted.

    Raises:
        FileNotFoundError: nothing there, or no TFRecord file in the directory / matching the pattern.
    """
    p = _files.to_str_path(path)
    if any(c in p for c in "*?["):
        found = [f for f in _files.glob(p) if not f.endswith(INDEX_SUFFIX)]
    elif not _files.is_remote(p) and os.path.isdir(p):
        found = sorted(os.path.join(p, f) for f in os.listdir(p)
                       if f.endswith(_TFRECORD_SUFFIXES) and not f.startswith("."))
    elif _files.is_remote(p) or os.path.isfile(p):
        found = [p]
    else:
        raise FileNotFoundError(f"{p}: no such file or directory")
    if not found:
        raise FileNotFoundError(f"{p}: no TFRecord files (*.tfrecord) there; write some with "
                                "headrace.io.ShardedWriter or run `headrace demo`")
    return found


def _features(image_key: str, label_key: str) -> dict[str, Any]:
    from ..io.example import FixedLenFeature

    return {image_key: FixedLenFeature([], "string"), label_key: FixedLenFeature([], "int64")}


def image_classification_dataset(files: Sequence[str], image_size: int | Sequence[int], *, training: bool,
                                 seed: int = 0, shuffle_buffer: int = 1024, image_key: str = IMAGE_KEY,
                                 label_key: str = LABEL_KEY, cycle_length: int = 4) -> Dataset:
    """Elements ``(image uint8 (height, width, 3), label int64)`` from TFRecord shards; ``image_size`` is
    ``S`` (``S x S``) or ``(height, width)``, at least 8 pixels a side.

    ``training=True`` shuffles the shard order (each epoch) and the records (``shuffle_buffer``);
    ``False`` reads in file order. Images are decoded and resized (bilinear, DCT-scaled JPEG decoding)
    in parallel threads. A record without the keys raises ``ValueError`` naming the key and the record.
    """
    from .. import image
    from ..io.example import parse_single_example
    from ..io.tfrecord import TFRecordDataset

    size = image_hw(image_size)
    files = list(files)
    if not files:
        raise ValueError("no TFRecord files given")
    spec = _features(image_key, label_key)

    def decode(record: bytes) -> tuple[np.ndarray, np.int64]:
        ex = parse_single_example(record, spec)
        img = image.decode_and_resize(ex[image_key], size, channels=3)
        return img, np.int64(ex[label_key])

    names = Dataset.from_tensor_slices(np.array(files, dtype=object))
    if training:
        names = names.shuffle(len(files), seed=seed)
    records = names.interleave(lambda f: TFRecordDataset(f), cycle_length=min(cycle_length, len(files)),
                               num_parallel_calls=min(cycle_length, len(files)))
    if training:
        records = records.shuffle(shuffle_buffer, seed=seed)
    return records.map(decode, num_parallel_calls=AUTOTUNE)


def count_classes(files: Sequence[str], label_key: str = LABEL_KEY) -> tuple[int, int]:
    """``(number of records, max label + 1)`` over ``files``, parsing only the label feature.

    Raises:
        ValueError: no records, or a record without ``label_key`` (names the file and record).
    """
    from ..io.example import FixedLenFeature, parse_example
    from ..io.tfrecord import TFRecordDataset

    spec = {label_key: FixedLenFeature([], "int64")}
    n, top = 0, -1
    for f in files:
        for batch in TFRecordDataset(f).batch(1024):
            labels = parse_example(batch, spec, source=f)[label_key]
            n += len(labels)
            top = max(top, int(labels.max()))
    if n == 0:
        raise ValueError(f"the dataset is empty: no records in {len(files)} file(s) "
                         f"({files[0]}{', ...' if len(files) > 1 else ''})")
    return n, top + 1


__all__ = ["IMAGE_KEY", "LABEL_KEY", "count_classes", "find_tfrecords", "image_classification_dataset", "image_hw"]
