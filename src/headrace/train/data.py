"""Image classification data as the CLI and the demo use it: TFRecord shards of ``tf.train.Example``.

Record format (the keys of TensorFlow's ImageNet TFRecords, ``build_imagenet_data.py``):
``image/encoded`` (bytes: a JPEG, PNG or any format :func:`headrace.image.decode` reads) and
``image/class/label`` (int64, ``0 .. num_classes - 1``).

The training pipeline (:func:`image_classification_dataset`)::

    shard files (shuffled per epoch) -> interleave(TFRecordDataset, cycle_length=4, parallel)
      -> shuffle(buffer of encoded records) -> map(parse + decode_and_resize, AUTOTUNE threads)
      -> elements (uint8 image (H, W, 3), int64 label)

Each record travels with its file name and index in the file, so an image that cannot be decoded is
named by shard file and byte offset: ``on_corrupt="raise"`` (default) stops with a
:class:`~headrace.DataLossError` saying so, ``"skip"`` drops the record, warns
(:class:`~headrace.io.CorruptRecordWarning`) and adds it to the :class:`CorruptRecords` passed in (corrupt
TFRecord framing, a CRC mismatch, is handled the same way by :class:`~headrace.io.TFRecordDataset`).

It shuffles the small encoded records, not decoded images, so the shuffle buffer costs ~40 KB per
element instead of ``H*W*3`` bytes; models take the uint8 images as they are (see ``models.py``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._args import image_hw
from .._dataset import Dataset
from .._errors import DataLossError, ImageDecodeError
from .._ops.filter import FilterNode
from .._options import AUTOTUNE
from .._sync import Lock
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


class CorruptRecords:
    """The records ``on_corrupt="skip"`` dropped in the pipelines it was given to (thread-safe):
    ``records()`` lists them as :class:`~headrace.io.tfrecord.SkippedRecord` ``(path, offset, reason,
    message)``, undecodable images and corrupt TFRecord framing together."""

    def __init__(self) -> None:
        self._lock = Lock("CorruptRecords")
        self._decode: list[Any] = []
        self._readers: list[Any] = []

    def add(self, record: Any) -> None:
        with self._lock:
            self._decode.append(record)

    def watch(self, reader: Any) -> Any:
        """Count what ``reader`` (a ``TFRecordDataset``) skips; returns it."""
        with self._lock:
            self._readers.append(reader)
        return reader

    def records(self) -> list[Any]:
        """Each skipped record once (a reader lists its skips of every iteration: a record skipped in two
        passes over the data is one record), in the order first met."""
        with self._lock:
            readers, decode = list(self._readers), list(self._decode)
        seen: dict[tuple[str, int], Any] = {}
        for r in [r for reader in readers for r in reader.skipped_records] + decode:
            seen.setdefault((r.path, r.offset), r)
        return list(seen.values())


def record_offset(path: str, index: int) -> int | None:
    """Byte offset of record ``index`` (from 0) of the uncompressed TFRecord file ``path``; None when the
    file cannot be read that far."""
    from .._files.framing import RecordReader

    try:
        reader = RecordReader(path)
    except OSError:
        return None
    try:
        for _ in range(index):
            if reader.next_record() is None:
                return None
        return reader.offset
    except OSError:
        return None
    finally:
        reader.close()


def _features(image_key: str, label_key: str) -> dict[str, Any]:
    from ..io.example import FixedLenFeature

    return {image_key: FixedLenFeature([], "string"), label_key: FixedLenFeature([], "int64")}


def image_classification_dataset(files: Sequence[str], image_size: int | Sequence[int], *, training: bool,
                                 seed: int = 0, shuffle_buffer: int = 1024, image_key: str = IMAGE_KEY,
                                 label_key: str = LABEL_KEY, cycle_length: int = 4, on_corrupt: str = "raise",
                                 corrupt: CorruptRecords | None = None) -> Dataset:
    """Elements ``(image uint8 (height, width, 3), label int64)`` from TFRecord shards; ``image_size`` is
    ``S`` (``S x S``) or ``(height, width)``, at least 8 pixels a side.

    ``training=True`` shuffles the shard order (each epoch) and the records (``shuffle_buffer``);
    ``False`` reads in file order. Images are decoded and resized (bilinear, DCT-scaled JPEG decoding)
    in parallel threads. A record without the keys raises ``ValueError`` naming the key and the record.
    ``on_corrupt``: ``"raise"`` or ``"skip"`` an undecodable image or corrupt record (module docstring);
    skips are added to ``corrupt``.

    Raises:
        ValueError: a bad ``image_size`` or ``on_corrupt``, no files.
        DataLossError: on iteration, an image that cannot be decoded (``on_corrupt="raise"``), naming the
            shard file and the record's byte offset, or a corrupt record.
    """
    from .. import image
    from ..io.example import parse_single_example
    from ..io.tfrecord import TFRecordDataset

    size = image_hw(image_size)
    files = list(files)
    if not files:
        raise ValueError("no TFRecord files given")
    if on_corrupt not in ("raise", "skip"):
        raise ValueError(f"on_corrupt={on_corrupt!r} must be 'raise' (stop at an undecodable record) or 'skip' "
                         "(drop it and go on)")
    spec = _features(image_key, label_key)
    skipped = corrupt if corrupt is not None else CorruptRecords()
    blank = (np.zeros((*size, 3), np.uint8), np.int64(-1))

    def decode(name: Any, numbered: tuple[Any, bytes]) -> tuple[np.ndarray, np.int64]:
        try:
            ex = parse_single_example(numbered[1], spec)
            return image.decode_and_resize(ex[image_key], size, channels=3), \
                np.int64(ex[label_key])
        except ImageDecodeError as exc:
            path = name.decode() if isinstance(name, bytes) else str(name)
            error = _undecodable(path, int(numbered[0]), exc, on_corrupt)
        if on_corrupt == "raise":
            raise error
        from ..io.tfrecord import CorruptRecordWarning, SkippedRecord

        skipped.add(SkippedRecord(error.path or "", error.offset or 0, "image_decode", str(error)))
        warnings.warn(f"skipped: {error}", CorruptRecordWarning, stacklevel=2)
        return blank

    def records_of(name: Any) -> Dataset:
        reader = skipped.watch(TFRecordDataset(name, on_corrupt=on_corrupt))
        return Dataset.zip((Dataset.from_tensors(name).repeat(), reader.enumerate()))

    names = Dataset.from_tensor_slices(np.array(files, dtype=object))
    if training:
        names = names.shuffle(len(files), seed=seed)
    records = names.interleave(records_of, cycle_length=min(cycle_length, len(files)),
                               num_parallel_calls=min(cycle_length, len(files)))
    if training:
        records = records.shuffle(shuffle_buffer, seed=seed)
    # threads, as documented: decoding releases the GIL, and a skip is recorded in this process (in a worker
    # process "auto" could choose, `skipped` and the warning were the worker's: the skip went uncounted)
    images = records.map(decode, num_parallel_calls=AUTOTUNE, executor="thread")
    return Dataset(_DropSkipped(images._node, keeps_all=on_corrupt == "raise"))


def _is_record(image: np.ndarray, label: np.int64) -> bool:
    return bool(label >= 0)


class _DropSkipped(FilterNode):
    """``filter`` of the blanks ``on_corrupt="skip"`` puts in place of undecodable records. It is in the
    pipeline with ``"raise"`` too, where it drops nothing (so its count is its input's, and ``len()`` / the
    progress total stay known): both modes have the same stages and state, so a run stopped by a corrupt
    record resumes from its checkpoint with ``"skip"``."""

    def __init__(self, input_node: Any, *, keeps_all: bool) -> None:
        super().__init__(input_node, _is_record, "drop_skipped")
        self.keeps_all = keeps_all

    def cardinality(self) -> int:
        return self.inputs[0].cardinality() if self.keeps_all else super().cardinality()


def _undecodable(path: str, index: int, exc: Exception, on_corrupt: str) -> DataLossError:
    offset = record_offset(path, index)
    where = f"record {index} at byte offset {offset}" if offset is not None else f"record {index}"
    fix = "" if on_corrupt == "skip" else ("; rewrite or remove that record, or skip such records with "
                                           "on_corrupt='skip' (headrace train / bench --on-corrupt skip)")
    reason = str(exc).split(": ", 1)[-1].split("; ")[0]
    return DataLossError(f"{path}: {where}: cannot decode its image ({reason}){fix}", path=path, offset=offset,
                         reason="image_decode")


def count_classes(files: Sequence[str], label_key: str = LABEL_KEY, on_corrupt: str = "raise") -> tuple[int, int]:
    """``(number of records, max label + 1)`` over ``files``, parsing only the label feature.

    ``on_corrupt="skip"`` leaves out corrupt and truncated TFRecord framing, silently: the training pipeline
    over the same files warns about and counts each such record (a second warning here would say it twice).

    Raises:
        ValueError: no records, or a record without ``label_key`` (names the file and record).
        DataLossError: a corrupt or truncated record (``on_corrupt="raise"``), naming the file and byte offset.
    """
    from ..io.example import FixedLenFeature, Spec, parse_example
    from ..io.tfrecord import CorruptRecordWarning, TFRecordDataset

    spec: dict[str, Spec] = {label_key: FixedLenFeature([], "int64")}
    n, top = 0, -1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptRecordWarning)
        for f in files:
            for batch in TFRecordDataset(f, on_corrupt=on_corrupt).batch(1024):
                labels = parse_example(batch, spec, source=f)[label_key]
                n += len(labels)
                top = max(top, int(labels.max()))
    if n == 0:
        raise ValueError(f"the dataset is empty: no records in {len(files)} file(s) "
                         f"({files[0]}{', ...' if len(files) > 1 else ''})")
    return n, top + 1


__all__ = ["IMAGE_KEY", "LABEL_KEY", "CorruptRecords", "count_classes", "find_tfrecords",
           "image_classification_dataset", "image_hw", "record_offset"]
