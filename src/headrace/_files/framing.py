"""TFRecord framing: CRC32C, compression streams, and a checked record reader for one file.

Format (TensorFlow's ``tensorflow/core/lib/io/record_writer.h``; every integer little-endian)::

    uint64  length
    uint32  masked_crc32c(the 8 length bytes)
    byte    data[length]
    uint32  masked_crc32c(data)

    masked_crc32c(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8   (mod 2**32), crc = CRC32C (Castagnoli)

A compressed file (``"GZIP"`` or ``"ZLIB"``) is this byte stream compressed as one gzip member (zlib
``windowBits=31``) or one zlib stream (``windowBits=15``); offsets are always offsets in the uncompressed
stream, and random access needs an uncompressed file.

Errors (all :class:`~headrace.DataLossError` with ``path``, ``offset`` = first byte of the bad record and
``reason``):

- ``"data_crc"``: the data CRC does not match. The length was good, so the stream is positioned at the
  next record and reading can go on (the record is lost).
- ``"length_crc"``: the length CRC does not match; nothing after it can be trusted (``dead``).
- ``"truncated"``: the file ends inside a record (``dead``).
- ``"compressed_stream"``: the gzip / zlib stream is damaged or cut (``dead``).
"""

from __future__ import annotations

import io
import os
import struct
from typing import IO

import google_crc32c

from .._errors import DataLossError
from .streams import COMPRESSED_STREAM, DEFAULT_BUFFER_BYTES, open_input, seek_input

HEADER = struct.Struct("<QI")
FOOTER = struct.Struct("<I")
LENGTH = struct.Struct("<Q")
HEADER_BYTES = HEADER.size  # 12
FOOTER_BYTES = FOOTER.size  # 4
OVERHEAD_BYTES = HEADER_BYTES + FOOTER_BYTES
MASK_DELTA = 0xA282EAD8
_CHUNK_BYTES = 16 * 1024 * 1024  # records longer than this are read in chunks (a bogus length never
#                                 allocates more than what the file really holds)

DATA_CRC = "data_crc"
LENGTH_CRC = "length_crc"
TRUNCATED = "truncated"


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC32C of ``data`` (a ``bytes`` object), as an unsigned 32-bit int."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> tuple[bytes, bytes]:
    """The 12-byte header and 4-byte footer that surround ``data`` in a TFRecord file."""
    length = LENGTH.pack(len(data))
    return length + FOOTER.pack(masked_crc32c(length)), FOOTER.pack(masked_crc32c(data))


def open_stream(path: str, compression: str, buffer_size: int) -> tuple[IO[bytes], int | None]:
    """Open ``path`` for reading records (:func:`headrace._files.streams.open_input`); returns the stream and the
    file size when it is cheap to know (local uncompressed files), else ``None``."""
    f = open_input(path, compression, buffer_size)
    size: int | None = None
    if not compression and hasattr(f, "fileno"):
        try:
            size = os.fstat(f.fileno()).st_size
        except (OSError, io.UnsupportedOperation):
            size = None
    return f, size


class RecordReader:
    """Reads the framed records of one file in order, checking both CRCs of every record.

    ``next_record()`` returns the record's ``bytes``, or ``None`` at the end of the file (and forever
    after a ``dead`` error). ``offset`` is the byte offset of the next record in the uncompressed stream;
    ``index`` counts records (good or bad) read so far. Open at ``offset`` > 0 to resume: uncompressed
    files seek, compressed ones are decompressed and skipped up to it.
    """

    def __init__(self, path: str, compression: str = "", buffer_size: int = DEFAULT_BUFFER_BYTES,
                 offset: int = 0, index: int = 0, check_crc: bool = True) -> None:
        self.path = path
        self.offset = offset
        self.index = index
        self.dead = False
        self._check = check_crc
        self._f, self._size = open_stream(path, compression, buffer_size)
        self._compression = compression
        if offset:
            self._skip_to(offset)

    def _skip_to(self, offset: int) -> None:
        try:
            seek_input(self._f, offset, self.path)
        except DataLossError:
            self.close()
            raise

    def _read_guarded(self, n: int) -> bytes:
        try:
            return self._f.read(n)
        except DataLossError as e:  # a damaged compressed stream (headrace._files.streams)
            self.dead = True
            raise DataLossError(f"{e} (in record {self.index}, which starts at byte {self.offset})", path=self.path,
                                offset=self.offset, reason=COMPRESSED_STREAM) from e

    def _read(self, n: int) -> bytes:
        """Up to ``n`` bytes, fewer only at the end of the stream; big reads go in chunks."""
        if n <= _CHUNK_BYTES:
            data = self._read_guarded(n)
            if len(data) == n or not data:
                return data
            parts = [data]
            got = len(data)
        else:
            parts, got = [], 0
        while got < n:
            more = self._read_guarded(min(n - got, _CHUNK_BYTES))
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def _fail(self, reason: str, message: str, dead: bool) -> DataLossError:
        self.dead = self.dead or dead
        # one text for both policies: raised, the run stops here; skipped (on_corrupt='skip', ignore_errors)
        # the reader goes on with the next record or, for a dead file, the next file
        if dead:
            tail = "the rest of this file cannot be read"
            lost = self._lost_tail() if reason == LENGTH_CRC else None  # a truncated tail is one record
            if lost is not None:
                tail += f" (about {lost} records, from the bytes left and the mean record size)"
            fix = "Re-create the file, or read past it with on_corrupt='skip' or .ignore_errors()"
        else:
            tail, lost = "the records after it can still be read", None
            fix = ("Re-create the file, or skip this record with on_corrupt='skip' or .ignore_errors() (reading "
                   "then goes on with the next one)")
        return DataLossError(f"{message} in {self.path} at byte {self.offset} (record {self.index} of the "
                             f"file); {tail}. {fix}", path=self.path, offset=self.offset, reason=reason,
                             lost_elements=lost or 1, lost_estimated=lost is not None)

    def _lost_tail(self) -> int | None:
        """Records estimated lost from here to the end of the file: the bytes left over the mean size of
        the records read so far (``None`` when unknown: a compressed stream, no record read yet)."""
        if self._size is None or self.index <= 0 or self.offset <= 0 or self._size <= self.offset:
            return None
        return max(1, round((self._size - self.offset) / (self.offset / self.index)))

    def next_record(self) -> bytes | None:
        if self.dead:
            return None
        header = self._read(HEADER_BYTES)
        if len(header) < HEADER_BYTES:
            if not header:
                return None
            raise self._fail(TRUNCATED, f"truncated record (only {len(header)} of {HEADER_BYTES} header bytes)",
                             dead=True)
        length, length_crc = HEADER.unpack(header)
        if self._check and masked_crc32c(header[:8]) != length_crc:
            raise self._fail(LENGTH_CRC, "corrupted record: the length field fails its CRC32C", dead=True)
        if self._size is not None and self.offset + OVERHEAD_BYTES + length > self._size:
            raise self._fail(TRUNCATED, f"truncated record (length {length} runs past the end of the "
                             f"{self._size}-byte file)", dead=True)
        data = self._read(length)
        footer = self._read(FOOTER_BYTES) if len(data) == length else b""
        if len(footer) < FOOTER_BYTES:
            raise self._fail(TRUNCATED, f"truncated record (the file ends inside a record of {length} bytes)",
                             dead=True)
        if self._check and masked_crc32c(data) != FOOTER.unpack(footer)[0]:
            err = self._fail(DATA_CRC, f"corrupted record: the data CRC32C of its {length} bytes (from byte "
                             f"{self.offset + HEADER_BYTES}) does not match", dead=False)
            self.offset += OVERHEAD_BYTES + length
            self.index += 1
            raise err
        self.offset += OVERHEAD_BYTES + length
        self.index += 1
        return data

    def skip_record(self) -> bool:
        """Step over the next record without reading its data where the stream can seek (uncompressed
        files); the length CRC is checked, the data CRC not. ``False`` at the end of the file.

        Raises :class:`~headrace.DataLossError` for a truncated file or a corrupt length field.
        """
        if self._compression or not self._f.seekable():
            return self.next_record() is not None
        header = self._read(HEADER_BYTES)
        if not header:
            return False
        if len(header) < HEADER_BYTES:
            raise self._fail(TRUNCATED, f"truncated record (only {len(header)} of {HEADER_BYTES} header bytes)",
                             dead=True)
        length, length_crc = HEADER.unpack(header)
        if masked_crc32c(header[:8]) != length_crc:
            raise self._fail(LENGTH_CRC, "corrupted record: the length field fails its CRC32C", dead=True)
        end = self.offset + OVERHEAD_BYTES + length
        if self._size is None:
            self._size = self._f.seek(0, io.SEEK_END)
        if end > self._size:
            raise self._fail(TRUNCATED, f"truncated record (length {length} runs past the end of the "
                             f"{self._size}-byte file)", dead=True)
        self._f.seek(end)
        self.offset = end
        self.index += 1
        return True

    def close(self) -> None:
        self._f.close()
