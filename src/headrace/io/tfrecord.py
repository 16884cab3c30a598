"""``TFRecordDataset``: the records of TFRecord files as a :class:`headrace.Dataset` of ``bytes``.

Same arguments and results as ``tf.data.TFRecordDataset``; the file format and its CRC32C checks are
described in :mod:`headrace._files.framing` (TensorFlow's ``record_writer.h`` layout).

Corrupt data is never returned as if it were good:

- ``on_corrupt="raise"`` (default, TensorFlow's behaviour): every good record before the bad one is
  yielded, then :class:`~headrace.DataLossError` names the file, the byte offset of the bad record and
  the reason (``data_crc``, ``length_crc``, ``truncated``, ``compressed_stream``). The iterator stays
  usable, so ``.ignore_errors()`` works: after a data-CRC failure it continues with the next record;
  after a bad length, a truncation or a damaged compressed stream the rest of that file is unreadable and
  it continues with the next file.
- ``on_corrupt="skip"``: the same records are skipped without raising; each skip is reported by a
  :class:`CorruptRecordWarning` and appended to ``dataset.skipped_records`` (a list of
  :class:`SkippedRecord` ``(path, offset, reason, message)``, shared by every iterator of the dataset).

Iterator state: ``{"kind": "tfrecord", "file_index", "offset", "path", ...}``: the file being read and
the byte offset of its next record in the uncompressed stream. Restoring reopens the file and seeks
there (GZIP / ZLIB files are decompressed again and skipped up to the offset).
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

from .._dataset import Dataset
from .._engine.context import IteratorContext
from .._engine.counted_cardinality import counting_enabled, memoized
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage
from .._engine.stage_support import check_state, note_error
from .._errors import DataLossError
from .._files.framing import DEFAULT_BUFFER_BYTES, RecordReader
from .._files.streams import normalize_compression
from .._options import UNKNOWN_CARDINALITY
from .._spec import STRING, TensorSpec
from .._sync import Lock as TimedLock
from . import files
from ._filenames import FileNames, NameSource, parallel_reads, read_buffer_size, shard_by_file

ON_CORRUPT = ("raise", "skip")


class CorruptRecordWarning(UserWarning):
    """A corrupt or truncated record was skipped (``on_corrupt="skip"``).

    >>> ds = hr.io.TFRecordDataset(files, on_corrupt="skip")  # a warning per skipped region, on iteration
    """


class SkippedRecord(NamedTuple):
    """One skipped corrupt region: the file, the byte offset of the bad record, the reason, the message.

    >>> [r.offset for r in ds.skipped_records]  # ds = hr.io.TFRecordDataset(files, on_corrupt="skip"), iterated

    ``reason``: ``data_crc``, ``length_crc``, ``truncated`` or ``compressed_stream``; ``offset`` in bytes.
    """

    path: str
    offset: int
    reason: str
    message: str


class TFRecordDataset(Dataset):
    """A dataset of the records (``bytes``) of one or more TFRecord files, in file order.

    >>> ds = hr.io.TFRecordDataset(["train-0.tfrecord", "train-1.tfrecord"], num_parallel_reads=hr.AUTOTUNE)

    Args:
        filenames: a path (``str``, ``bytes``, ``os.PathLike``; local or an fsspec URL), a list of them,
            or a :class:`~headrace.Dataset` whose elements are paths (e.g. ``Dataset.list_files``).
        compression_type: ``None`` or ``""`` (uncompressed), ``"GZIP"`` or ``"ZLIB"``.
        buffer_size: read buffer in bytes (``None``: 256 KiB, as TensorFlow; 0: the smallest buffer).
        num_parallel_reads: ``None`` / 1 reads the files one after another; ``n > 1`` reads ``n`` files
            at once in background threads, interleaving their records one by one, as tf.data does:
            ``names.interleave(TFRecordDataset, cycle_length=n, block_length=1, num_parallel_calls=n)``
            (deterministic unless ``Options(deterministic=False)``; the iterator state is interleave's).
        on_corrupt: ``"raise"`` (default) or ``"skip"``; see the module docstring.
        check_crc: verify both CRC32Cs of every record (default ``True``; turning it off only makes
            sense for benchmarks).
        name: accepted for tf.data compatibility (unused).

    Attributes: ``compression_type``, ``buffer_size``, ``num_parallel_reads``, ``on_corrupt``,
    ``check_crc`` (normalized arguments) and ``skipped_records``.

    Raises:
        ValueError: for bad arguments (message names the argument and the allowed values).
        TypeError: for arguments of the wrong type (likewise).
        FileNotFoundError: on iteration, for a missing file.
        DataLossError: on iteration, for a corrupt record (``on_corrupt="raise"``).
    """

    _node_attributes = frozenset({"compression_type", "buffer_size", "num_parallel_reads", "on_corrupt",
                                  "check_crc", "skipped_records"})

    def __init__(self, filenames: Any, compression_type: str | None = None, buffer_size: int | None = None,
                 num_parallel_reads: int | None = None, name: str | None = None, *,
                 on_corrupt: str = "raise", check_crc: bool = True) -> None:
        super().__init__(TFRecordNode(filenames, compression_type, buffer_size, num_parallel_reads,
                                      on_corrupt=on_corrupt, check_crc=check_crc))


class TFRecordNode(DatasetNode):
    """The recipe node of :class:`TFRecordDataset` (same arguments)."""

    label = "TFRecordDataset"

    def __init__(self, filenames: Any, compression_type: str | None = None, buffer_size: int | None = None,
                 num_parallel_reads: int | None = None, *, on_corrupt: str = "raise",
                 check_crc: bool = True) -> None:
        self._files = FileNames(filenames, "TFRecordDataset")
        super().__init__(self._files.inputs())
        self.compression_type = normalize_compression(compression_type)
        self.buffer_size = read_buffer_size(buffer_size, "TFRecordDataset")
        self.num_parallel_reads = parallel_reads(num_parallel_reads, "TFRecordDataset")
        if on_corrupt not in ON_CORRUPT:
            raise ValueError(f"TFRecordDataset(on_corrupt={on_corrupt!r}): use 'raise' (stop with "
                             "DataLossError) or 'skip' (skip corrupt records, warn and list them)")
        self.on_corrupt = on_corrupt
        self.check_crc = bool(check_crc)
        self._skipped: list[SkippedRecord] = []
        self._skipped_lock = TimedLock("skipped records")

    @property
    def skipped_records(self) -> list[SkippedRecord]:
        """What ``on_corrupt="skip"`` skipped so far, over every iteration of this dataset (a copy)."""
        with self._skipped_lock:
            return list(self._skipped)

    def _report_skip(self, err: DataLossError) -> None:
        rec = SkippedRecord(err.path or "", int(err.offset or 0), err.reason or "", str(err))
        with self._skipped_lock:
            self._skipped.append(rec)
        warnings.warn(f"skipped: {err}", CorruptRecordWarning, stacklevel=3)

    def shard_source(self, num_shards: int, index: int) -> DatasetNode | None:
        """Files ``index, index + num_shards, ...`` (``_filenames.shard_by_file``)."""
        return shard_by_file(self, num_shards, index)

    def _single(self, name: Any) -> TFRecordNode:
        """A one-file reader with this dataset's settings, sharing its skip list."""
        node = TFRecordNode(name, self.compression_type, self.buffer_size, None, on_corrupt=self.on_corrupt,
                            check_crc=self.check_crc)
        node._skipped, node._skipped_lock = self._skipped, self._skipped_lock
        return node

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        if self.num_parallel_reads > 1:
            return self._files.interleave(ctx, self._single, self.num_parallel_reads, "TFRecordDataset")
        return TFRecordIterator(ctx, self)

    def compute_spec(self, spec_of: Any) -> Any:
        return TensorSpec((), STRING)  # one serialized record: a bytes scalar (tf.string)

    def cardinality(self) -> int:
        """Unknown, as tf.data; inside ``counting()`` (``headrace._engine.counted_cardinality``) with
        ``on_corrupt="raise"`` the number of records of the files (:func:`count_records`; a names dataset is
        iterated)."""
        if not counting_enabled() or self.on_corrupt != "raise":
            return UNKNOWN_CARDINALITY
        return memoized(self, self._count)

    def _count(self) -> int:
        names = self._files.all_names()
        if names is None:
            return UNKNOWN_CARDINALITY
        return sum(count_records(f, self.compression_type, self.buffer_size) for f in names)


def count_records(path: str, compression: str = "", buffer_size: int = DEFAULT_BUFFER_BYTES) -> int:
    """The number of records of one TFRecord file: from its ``.idx`` index (:func:`headrace.io.build_index`)
    when that covers exactly the file's bytes, else by stepping over the record headers (12 bytes read and
    a seek per record; a compressed file is decompressed).

    Raises:
        FileNotFoundError: no such file.
        DataLossError: a truncated file or a corrupt length field (names the file and offset).
    """
    if not compression:
        from .tfrecord_index import index_path, read_index

        try:
            rows, size = read_index(index_path(path)), files.file_size(path)
        except (OSError, ValueError):  # no index (or not an index): count the headers
            rows, size = None, -1
        if rows is not None and (int(rows[-1].sum()) if len(rows) else 0) == size:
            return len(rows)
    reader = RecordReader(path, compression, buffer_size, check_crc=False)
    try:
        n = 0
        while reader.skip_record():
            n += 1
        return n
    finally:
        reader.close()


class TFRecordIterator(Stage):
    """Reads the files of a :class:`TFRecordDataset` one after another (see the module docstring)."""

    kind = "tfrecord"

    def __init__(self, ctx: IteratorContext, ds: TFRecordNode) -> None:
        super().__init__(ctx)
        self._ds = ds
        self._names = NameSource(ctx, ds._files)
        self._file_index = 0
        self._reader: RecordReader | None = None
        self._resume_offset = 0
        self._resume_index = 0
        self._count = 0
        self.stage = ctx.stage_name(ds, "TFRecordDataset")

    def _open(self) -> RecordReader | None:
        """The reader of the next file (from its resume offset), or None past the last file."""
        while True:
            name = self._names.get(self._file_index)
            if name is None:
                return None
            offset, index = self._resume_offset, self._resume_index
            self._resume_offset = self._resume_index = 0
            try:
                self._reader = RecordReader(name, self._ds.compression_type, self._ds.buffer_size, offset,
                                            index, self._ds.check_crc)
                return self._reader
            except DataLossError as e:  # resuming past the end of a damaged compressed file
                self._file_index += 1
                if self._ds.on_corrupt == "raise":
                    raise
                self._ds._report_skip(e)
            except OSError:
                self._file_index += 1  # the next call goes on with the next file
                raise

    def _finish_file(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._file_index += 1

    def __next__(self) -> bytes:
        if self._closed:
            raise StopIteration
        while True:
            reader = self._reader if self._reader is not None else self._open()
            if reader is None:
                raise StopIteration
            try:
                record = reader.next_record()
            except DataLossError as e:
                if reader.dead:
                    self._finish_file()
                if self._ds.on_corrupt == "raise":
                    raise note_error(e, self.stage, self._count) from None
                self._ds._report_skip(e)
                continue
            if record is None:
                self._finish_file()
                continue
            self._count += 1
            return record

    def _position(self) -> tuple[int, int, int]:
        if self._reader is not None:
            return self._file_index, self._reader.offset, self._reader.index
        return self._file_index, self._resume_offset, self._resume_index

    def get_state(self) -> dict[str, Any]:
        file_index, offset, index = self._position()
        name = self._names.known(file_index)
        return {"kind": self.kind, "compression_type": self._ds.compression_type, "file_index": file_index,
                "offset": offset, "record_index": index, "path": name, "count": self._count,
                "names": self._names.state(file_index)}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, compression_type=self._ds.compression_type)
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._file_index = self._names.restore_checked(state, self.kind)
        self._resume_offset = int(state["offset"])
        self._resume_index = int(state.get("record_index", 0))
        self._count = int(state.get("count", 0))

    def _children(self) -> list[Stage]:
        return self._names.children()

    def _close_self(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
