"""``TFRecordWriter`` and ``TFRecordOptions``: write TFRecord files exactly as TensorFlow does.

The framing is TensorFlow's (see :mod:`headrace._files.framing`): an uncompressed file written here is
byte-identical to the one ``tf.io.TFRecordWriter`` writes for the same records. GZIP files are one gzip
member (zlib ``windowBits=31``), ZLIB files one zlib stream (``windowBits=15``), both with TensorFlow's
defaults (``Z_DEFAULT_COMPRESSION``, ``memLevel=9``); TensorFlow reads both.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from typing import IO, Any

from . import fs as files
from .framing import frame
from .streams import WBITS, normalize_compression

_MEM_LEVEL = 9  # TensorFlow's ZlibCompressionOptions default


@dataclass(frozen=True)
class TFRecordOptions:
    """Options of a TFRecord file, as ``tf.io.TFRecordOptions``.

    >>> w = hr.io.TFRecordWriter("a.tfrecord.gz", hr.io.TFRecordOptions("GZIP", compression_level=9))

    Args:
        compression_type: ``None`` / ``""`` (uncompressed), ``"GZIP"`` or ``"ZLIB"``.
        compression_level: zlib level 0 (store) .. 9 (smallest); ``None`` = zlib's default (6), as
            TensorFlow. Ignored without compression.

    Raises:
        ValueError: an unknown ``compression_type``, or a level other than ``None`` or an int in -1..9.
    """

    compression_type: str | None = None
    compression_level: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "compression_type", normalize_compression(self.compression_type))
        level = self.compression_level
        if level is not None and (isinstance(level, bool) or not isinstance(level, int) or not -1 <= level <= 9):
            raise ValueError(f"TFRecordOptions(compression_level={level!r}): use None (zlib's default) or an "
                             "int from 0 (no compression) to 9 (best compression)")

    @staticmethod
    def coerce(options: TFRecordOptions | str | None) -> TFRecordOptions:
        """Accept ``None``, a compression name (``"GZIP"``) or a ``TFRecordOptions``.

        Args:
            options: ``None``, ``""``, ``"GZIP"``, ``"ZLIB"`` or a ``TFRecordOptions``.

        Returns:
            TFRecordOptions: ``options`` itself, or one with that compression.

        Raises:
            TypeError: ``options`` of another type.
            ValueError: an unknown compression name.
        """
        if isinstance(options, TFRecordOptions):
            return options
        if options is None or isinstance(options, str):
            return TFRecordOptions(compression_type=options)
        raise TypeError(f"options={options!r}: expected None, 'GZIP', 'ZLIB' or TFRecordOptions(...)")


class TFRecordWriter:
    """Write records to a TFRecord file (local path or fsspec URL), as ``tf.io.TFRecordWriter``.

    >>> with hr.io.TFRecordWriter("/tmp/a.tfrecord", "GZIP") as w:
    ...     w.write(example_bytes)  # 0: the record's offset in the uncompressed stream

    ``write(record)`` appends one record (``bytes``-like) and returns its byte offset in the
    uncompressed stream; ``flush()`` pushes buffered bytes (and a zlib sync point) to the file;
    ``close()`` finishes the compressed stream and closes the file (idempotent). Usable as a context
    manager. The format is TensorFlow's TFRecord framing (length, masked CRC32C of the length, data, masked CRC32C
    of the data).

    Args:
        path: the file to create (replaced if it exists); a local path or fsspec URL.
        options: ``None`` (uncompressed), a compression name (``"GZIP"`` / ``"ZLIB"``) or a :class:`TFRecordOptions`.

    Raises:
        TypeError: ``options`` of another type; ``write`` of something that is not bytes-like.
        ValueError: an unknown compression or level; ``write`` after ``close()``.
    """

    def __init__(self, path: str | bytes | os.PathLike[str], options: TFRecordOptions | str | None = None) -> None:
        self.path = files.to_str_path(path)
        self.options = TFRecordOptions.coerce(options)
        self._f: IO[bytes] | None = files.open_file(self.path, "wb")
        ctype = self.options.compression_type
        level = self.options.compression_level
        self._z = (zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION if level is None else level, zlib.DEFLATED,
                                    WBITS[ctype], _MEM_LEVEL) if ctype else None)
        self.offset = 0
        """Bytes written so far in the uncompressed stream (the offset of the next record)."""
        self.records = 0

    def _out(self, f: IO[bytes], data: bytes) -> None:
        if self._z is not None:
            data = self._z.compress(data)
            if not data:
                return
        f.write(data)

    def write(self, record: bytes | bytearray | memoryview) -> int:
        """Append one record.

        Args:
            record: the record's bytes (``bytes``, ``bytearray`` or ``memoryview``; serialize messages first).

        Returns:
            int: the record's byte offset in the uncompressed stream.

        Raises:
            ValueError: after ``close()``.
            TypeError: ``record`` is not bytes-like.
        """
        f = self._f
        if f is None:
            raise ValueError(f"write() on a closed TFRecordWriter for {self.path}; open a new writer")
        if not isinstance(record, bytes):
            if not isinstance(record, bytearray | memoryview):
                raise TypeError(f"TFRecordWriter({self.path}).write: expected bytes, got "
                                f"{type(record).__name__}; serialize it first (e.g. example.encode(...))")
            record = bytes(record)
        header, footer = frame(record)
        self._out(f, header)
        self._out(f, record)
        self._out(f, footer)
        at = self.offset
        self.offset += len(header) + len(record) + len(footer)
        self.records += 1
        return at

    def flush(self) -> None:
        """Push buffered bytes (and, compressed, a zlib sync point) to the file; nothing after ``close()``."""
        if self._f is None:
            return
        if self._z is not None:
            self._f.write(self._z.flush(zlib.Z_SYNC_FLUSH))
        self._f.flush()

    def close(self) -> None:
        """Finish the compressed stream and close the file (idempotent)."""
        f, self._f = self._f, None
        if f is None:
            return
        try:
            if self._z is not None:
                f.write(self._z.flush(zlib.Z_FINISH))
        finally:
            f.close()

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_f", None) is not None:
            try:
                self.close()
            except Exception:
                pass
