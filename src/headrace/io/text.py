"""``TextLineDataset`` and ``FixedLengthRecordDataset``: the lines, or the fixed-size records, of files as a
:class:`headrace.Dataset` of ``bytes`` scalars, with tf.data's arguments and elements.

Lines (tf.data's ``TextLineDataset``, its ``BufferedInputStream::ReadLine``): a line ends at ``\\n``; every
``\\r`` byte is dropped (so ``\\r\\n`` ends a line too); empty lines are kept; the last line needs no final
``\\n``; a trailing part made only of ``\\r`` bytes is no line; bytes stay bytes (never decoded).

Records (tf.data's ``FixedLengthRecordDataset``): ``header_bytes`` are skipped at the start of each file and
``footer_bytes`` at its end; the rest is cut into records of ``record_bytes``. A body that is not a whole
number of records is an error, as in tf.data: an uncompressed file is refused before its first record, a
compressed one after its last whole record (:class:`~headrace.DataLossError` naming the file and sizes).

Compression: ``None`` / ``""``, ``"GZIP"``, ``"ZLIB"`` as in tf.data, which never infers it from the file name;
``"AUTO"`` (headrace's own) picks by extension per file (``.gz``, ``.zz`` / ``.zlib``). A truncated or damaged
compressed stream is a ``DataLossError`` naming the file and the uncompressed offset (tf.data ends such a file
silently); reading goes on with the next file after it (``ignore_errors()``).

Memory: the read buffers, the chunk being split and the elements of the block in hand are charged to the
pipeline's budget. A line that grows past what the budget can hold (about twice its size is needed while it is
cut from the stream) is refused with a one-line :class:`~headrace.MemoryBudgetError` naming the file, the line
number and the size reached, before more of it is read.

Iterator state: ``{"kind", "file_index", "path", "offset", "skip", ...}``: the file, an offset in its
uncompressed bytes where an element starts, and the elements to skip from there. Restoring reopens the file and
seeks (uncompressed) or decompresses and skips from the start (GZIP / ZLIB: O(offset) CPU, bounded memory).
"""

from __future__ import annotations

from typing import Any

from .._args import as_int
from .._dataset import Dataset
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage
from .._files.streams import normalize_compression
from .._options import UNKNOWN_CARDINALITY
from .._spec import STRING, TensorSpec
from ._filenames import FileNames, parallel_reads, read_buffer_size, shard_by_file


class Lines:
    """Cutting a byte stream into tf.data's lines (see the module docstring)."""

    kind = "text_line"
    label = "TextLineDataset"
    unit = "line"
    header_bytes = 0

    def whole(self, chunk: bytes, pending: int) -> bool:
        """Whether ``chunk`` (after ``pending`` bytes with no element end) completes an element."""
        return b"\n" in chunk

    def cut(self, parts: list[bytes], at_end: bool) -> tuple[list[bytes], int, bytes]:
        """The whole elements at the start of the bytes ``parts`` hold one after another (all but the last: an
        unfinished element carried over, no element end in them), the bytes they use (at the end of the file:
        all) and the bytes after them. Raises ``ValueError`` for a file that ends inside an element (records
        only). Lines: the last part is split where it is (no copy of it joined to the carried part)."""
        chunk = parts[-1]
        head = b"".join(parts[:-1]) if len(parts) > 1 else b""
        cut = chunk.rfind(b"\n")
        if cut < 0 and not at_end:
            return [], 0, head + chunk
        text = chunk.replace(b"\r", b"") if b"\r" in chunk else chunk
        lines = text.split(b"\n")  # (C speed: one bytes object per line)
        if head:
            lines[0] = (head.replace(b"\r", b"") if b"\r" in head else head) + lines[0]
        last = lines.pop()
        if at_end:
            if last:
                lines.append(last)
            return lines, len(head) + len(chunk), b""
        return lines, len(head) + cut + 1, chunk[cut + 1:]

    def advance(self, offset: int, skip: int) -> tuple[int, int]:
        """A position ``skip`` elements past ``offset``, as ``(offset, skip)`` (lines: only by reading)."""
        return offset, skip

    def check_size(self, size: int) -> str | None:
        """Why an uncompressed file of ``size`` bytes cannot be read whole (records only), or None."""
        return None


class Records:
    """Cutting a byte stream into fixed-length records between a header and a footer."""

    kind = "fixed_length_record"
    label = "FixedLengthRecordDataset"
    unit = "record"

    def __init__(self, record_bytes: int, header_bytes: int, footer_bytes: int) -> None:
        self.record_bytes, self.header_bytes, self.footer_bytes = record_bytes, header_bytes, footer_bytes

    def whole(self, chunk: bytes, pending: int) -> bool:
        return pending + len(chunk) >= self.record_bytes + self.footer_bytes

    def _body(self, total: int) -> str:
        return (f"excluding the header ({self.header_bytes} bytes) and footer ({self.footer_bytes} bytes), its body "
                f"is {total - self.header_bytes - self.footer_bytes} bytes, not a whole number of records of "
                f"{self.record_bytes} bytes; check record_bytes, header_bytes and footer_bytes")

    def cut(self, parts: list[bytes], at_end: bool) -> tuple[list[bytes], int, bytes]:
        data = b"".join(parts) if len(parts) > 1 else parts[0]
        rb = self.record_bytes
        usable = len(data) - self.footer_bytes
        if at_end and (usable < 0 or usable % rb):
            raise ValueError(f"the file ends inside a record: {usable % rb if usable > 0 else usable} bytes are "
                             f"left before the {self.footer_bytes}-byte footer")
        n = max(usable, 0) // rb
        end = n * rb
        return list(map(data.__getitem__, map(slice, range(0, end, rb), range(rb, end + 1, rb)))), end, data[end:]

    def advance(self, offset: int, skip: int) -> tuple[int, int]:
        return offset + skip * self.record_bytes, 0

    def check_size(self, size: int) -> str | None:
        body = size - self.header_bytes - self.footer_bytes
        return None if body >= 0 and body % self.record_bytes == 0 else self._body(size)


class TextFileNode(DatasetNode):
    """The recipe node of :class:`TextLineDataset` and :class:`FixedLengthRecordDataset`: files, a compression,
    a read buffer, parallel reads and the format (:class:`Lines` or :class:`Records`) that cuts elements."""

    def __init__(self, filenames: Any, fmt: Lines | Records, compression_type: str | None, buffer_size: int | None,
                 num_parallel_reads: int | None) -> None:
        self.format = fmt
        self.label = fmt.label
        self._files = filenames if isinstance(filenames, FileNames) else FileNames(filenames, fmt.label)
        super().__init__(self._files.inputs())
        self.compression_type = normalize_compression(compression_type, f"{fmt.label}: compression_type",
                                                      allow_auto=True)
        self.buffer_size = read_buffer_size(buffer_size, fmt.label)
        self.num_parallel_reads = parallel_reads(num_parallel_reads, fmt.label)

    def shard_source(self, num_shards: int, index: int) -> DatasetNode | None:
        """Files ``index, index + num_shards, ...`` (``_filenames.shard_by_file``)."""
        return shard_by_file(self, num_shards, index)

    def _single(self, name: Any) -> TextFileNode:
        return TextFileNode(name, self.format, self.compression_type, self.buffer_size, None)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        if self.num_parallel_reads > 1:
            return self._files.interleave(ctx, self._single, self.num_parallel_reads, self.label)
        from ._text_reader import TextFileIterator

        return TextFileIterator(ctx, self)

    def compute_spec(self, spec_of: Any) -> Any:
        return TensorSpec((), STRING)  # one line / record: a bytes scalar (tf.string)

    def cardinality(self) -> int:
        return UNKNOWN_CARDINALITY  # as tf.data


class TextLineDataset(Dataset):
    """A dataset of the lines of one or more text files, in file order: each a ``bytes`` scalar
    (``TensorSpec([], string)``) without its ``\\n`` / ``\\r\\n``, exactly as tf.data's ``TextLineDataset``.

    Example::

        ds = headrace.io.TextLineDataset(["a.txt", "b.txt.gz"], compression_type="AUTO")
        ds = ds.map(lambda line: line.split()).batch(32)

    Args:
        filenames: a path (``str``, ``bytes``, ``os.PathLike``; local or an fsspec URL), a list of them, or a
            :class:`~headrace.Dataset` of paths (e.g. ``Dataset.list_files``).
        compression_type: ``None`` / ``""`` (uncompressed, never inferred, as tf.data), ``"GZIP"``, ``"ZLIB"``, or
            ``"AUTO"`` (by extension: ``.gz`` GZIP, ``.zz`` / ``.zlib`` ZLIB, else none).
        buffer_size: the read buffer in bytes (``None``: 256 KiB; 0: the smallest buffer).
        num_parallel_reads: ``None`` / 1 reads the files one after another; ``n > 1`` reads ``n`` files at once,
            their lines interleaved one by one, as tf.data: ``names.interleave(TextLineDataset, cycle_length=n,
            block_length=1, num_parallel_calls=n)`` (deterministic unless ``Options(deterministic=False)``).
        name: accepted for tf.data compatibility (unused).

    Raises:
        ValueError: bad arguments (the message names the argument and the allowed values).
        TypeError: arguments of the wrong type (likewise).
        FileNotFoundError: on iteration, a missing file.
        DataLossError: on iteration, a truncated or damaged GZIP / ZLIB stream (names the file and offset).
        MemoryBudgetError: on iteration, a line too long for the memory budget (names file, line, size, budget).
    """

    _node_attributes = frozenset({"compression_type", "buffer_size", "num_parallel_reads"})

    def __init__(self, filenames: Any, compression_type: str | None = None, buffer_size: int | None = None,
                 num_parallel_reads: int | None = None, name: str | None = None) -> None:
        super().__init__(TextFileNode(filenames, Lines(), compression_type, buffer_size, num_parallel_reads))


class FixedLengthRecordDataset(Dataset):
    """A dataset of the fixed-length records of one or more binary files: each a ``bytes`` scalar of
    ``record_bytes`` bytes (``TensorSpec([], string)``), exactly as tf.data's ``FixedLengthRecordDataset``.

    Example::

        ds = headrace.io.FixedLengthRecordDataset("data.bin", record_bytes=3073, header_bytes=0)
        ds = ds.map(lambda r: np.frombuffer(r, np.uint8))

    Args:
        filenames: as :class:`TextLineDataset`.
        record_bytes: the size of each record in bytes (>= 1).
        header_bytes: bytes skipped at the start of each file (``None``: 0).
        footer_bytes: bytes ignored at the end of each file (``None``: 0).
        buffer_size: the read buffer in bytes (``None``: 256 KiB; 0: the smallest buffer).
        compression_type: as :class:`TextLineDataset`.
        num_parallel_reads: as :class:`TextLineDataset`.
        name: accepted for tf.data compatibility (unused).

    Raises:
        ValueError: bad arguments.
        TypeError: arguments of the wrong type.
        FileNotFoundError: on iteration, a missing file.
        DataLossError: on iteration, a file whose body is not a whole number of records (before the first record
            of an uncompressed file, after the last whole one of a compressed file, as tf.data), or a damaged
            compressed stream.
        MemoryBudgetError: on iteration, a record larger than the memory budget can hold.
    """

    _node_attributes = frozenset({"compression_type", "buffer_size", "num_parallel_reads"})

    def __init__(self, filenames: Any, record_bytes: int, header_bytes: int | None = None,
                 footer_bytes: int | None = None, buffer_size: int | None = None,
                 compression_type: str | None = None, num_parallel_reads: int | None = None,
                 name: str | None = None) -> None:
        what = "FixedLengthRecordDataset"
        fmt = Records(as_int(record_bytes, f"{what}: record_bytes", minimum=1),
                      as_int(header_bytes or 0, f"{what}: header_bytes", minimum=0),
                      as_int(footer_bytes or 0, f"{what}: footer_bytes", minimum=0))
        super().__init__(TextFileNode(filenames, fmt, compression_type, buffer_size, num_parallel_reads))
