"""The one home for opening an input file as a stream of (decompressed) bytes: local path or fsspec URL,
uncompressed, GZIP or ZLIB, with the uncompressed byte offset always known.

Compression names are tf.data's: ``None`` or ``""`` (uncompressed), ``"GZIP"`` (one or more gzip members,
zlib ``windowBits=31``), ``"ZLIB"`` (zlib streams, ``windowBits=15``). As in tf.data, ``None`` never looks at
the file name: a ``.gz`` file read with ``compression_type=None`` yields its compressed bytes. ``"AUTO"``
(headrace's own value) picks by extension, per file: ``.gz`` -> GZIP, ``.zz`` / ``.zlib`` -> ZLIB, anything
else uncompressed.

API::

    open_input(path, compression_type, buffer_size) -> IO[bytes]  # .tell() = uncompressed offset
    seek_input(stream, offset)                                    # seek, or decompress-and-skip
    buffer_bytes(compression_type, buffer_size) -> int            # what one open stream holds (budget)
    ReadAhead(stream, chunk, depth, name)                         # chunks read (decompressed) by a thread

A compressed stream that ends before its end-of-stream marker (a cut upload) or holds bytes that do not
decompress raises :class:`~headrace.DataLossError` (``reason="compressed_stream"``) naming the file and the
uncompressed offset reached, from the ``read`` that met it: never a silent short read.
"""

from __future__ import annotations

import io
import os
import zlib
from collections import deque
from typing import IO, Any

from .._engine.stage_support import join_threads, start_thread
from .._errors import DataLossError
from .._memory import Cancelled
from .._sync import Condition, Flag
from . import fs as files

COMPRESSIONS = ("", "GZIP", "ZLIB")
AUTO = "AUTO"
WBITS = {"GZIP": 31, "ZLIB": 15}
EXTENSIONS = {".gz": "GZIP", ".zz": "ZLIB", ".zlib": "ZLIB"}
"""File extensions ``compression_type="AUTO"`` maps to a compression (anything else: uncompressed)."""
DEFAULT_BUFFER_BYTES = 256 * 1024  # TensorFlow's default read buffer (TFRecordDataset, TextLineDataset)
COMPRESSED_STREAM = "compressed_stream"
_ZLIB_STATE_BYTES = 64 * 1024  # a zlib inflate state: the 32 KiB window and its tables, rounded up
_SKIP_CHUNK = 1024 * 1024


def normalize_compression(value: Any, where: str = "compression_type", *, allow_auto: bool = False) -> str:
    """``None`` / ``""`` -> ``""``; ``"GZIP"`` / ``"ZLIB"`` (any case) as is; ``"AUTO"`` where ``allow_auto``.

    Raises:
        ValueError: any other value (names it and the allowed ones).
    """
    if value is None:
        return ""
    if isinstance(value, str):
        upper = value.upper()
        if upper in COMPRESSIONS or (allow_auto and upper == AUTO):
            return upper
    auto = ", or 'AUTO' (by extension: .gz, .zz / .zlib)" if allow_auto else ""
    raise ValueError(f"{where}={value!r} is not supported; use None or '' (uncompressed), 'GZIP' or 'ZLIB'{auto}")


def compression_of(path: str, compression_type: str) -> str:
    """The compression of ``path``: ``compression_type`` itself unless it is ``"AUTO"`` (then by extension)."""
    if compression_type != AUTO:
        return compression_type
    return EXTENSIONS.get(os.path.splitext(path)[1].lower(), "")


def buffer_bytes(compression_type: str, buffer_size: int) -> int:
    """The bytes one stream of :func:`open_input` holds at most: the read buffer, plus for a compressed file
    the compressed chunk read, the decompressor's window and its pending output (each ``buffer_size``)."""
    if compression_type:  # (AUTO: counted as compressed, the larger case)
        return 3 * buffer_size + _ZLIB_STATE_BYTES
    return buffer_size


class _Decompressing(io.RawIOBase):
    """A raw stream of the bytes decompressed from ``raw``, in chunks of at most ``chunk`` bytes; ``tell()`` is
    the uncompressed offset. Concatenated gzip members / zlib streams are read one after another."""

    def __init__(self, raw: IO[bytes], path: str, compression: str, chunk: int) -> None:
        self._raw, self._path, self._compression = raw, path, compression
        self._wbits = WBITS[compression]
        self._d = zlib.decompressobj(self._wbits)
        self._chunk = chunk
        self._started = False
        self._offset = 0  # uncompressed bytes produced
        self._consumed = 0  # compressed bytes read from the file

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._offset

    def _damaged(self, what: str, detail: str) -> DataLossError:
        return DataLossError(
            f"{what} in {self._path} at uncompressed byte {self._offset} (compressed byte {self._consumed} of "
            f"the file: {detail}); the rest of the file cannot be read: re-create it (an interrupted copy or upload?), "
            f"or check compression_type={self._compression!r}", path=self._path, offset=self._offset,
            reason=COMPRESSED_STREAM)

    def _raw_read(self) -> bytes:
        data = self._raw.read(self._chunk)
        self._consumed += len(data)
        return data

    def readinto(self, b: Any) -> int:
        want = len(b)
        try:
            while True:
                d = self._d
                if d.unconsumed_tail:
                    out = d.decompress(d.unconsumed_tail, want)
                elif d.eof:
                    rest = d.unused_data or self._raw_read()
                    if not rest:
                        return 0
                    self._d = zlib.decompressobj(self._wbits)  # another gzip member / zlib stream follows
                    out = self._d.decompress(rest, want)
                else:
                    data = self._raw_read()
                    if not data:
                        if not self._started:
                            return 0  # an empty file: no bytes
                        raise self._damaged(f"truncated {self._compression} stream",
                                            "the file ends before the stream's end marker")
                    self._started = True
                    out = d.decompress(data, want)
                if out:
                    n = len(out)
                    b[:n] = out
                    self._offset += n
                    return n
        except zlib.error as e:
            raise self._damaged(f"damaged {self._compression} stream", f"bytes that do not decompress: {e}") from e

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def open_input(path: str, compression_type: str | None = "", buffer_size: int = DEFAULT_BUFFER_BYTES) -> IO[bytes]:
    """Open ``path`` (local path or fsspec URL) for reading its bytes, decompressed.

    Example::

        with open_input("shard-0.txt.gz", "GZIP") as f:
            head = f.read(100)
            offset = f.tell()            # 100: an offset in the uncompressed bytes

    Args:
        path: a local path, ``file://`` or fsspec URL.
        compression_type: ``None`` / ``""``, ``"GZIP"``, ``"ZLIB"`` or ``"AUTO"`` (see the module docstring).
        buffer_size: the read buffer in bytes (>= 1); compressed files are also read in chunks of this size.

    Returns:
        A buffered binary stream; ``tell()`` is the offset in the uncompressed bytes; ``seekable()`` is True only
        for uncompressed files that can seek (use :func:`seek_input` to move).

    Raises:
        FileNotFoundError: no such file (names it).
        ValueError: a bad ``compression_type``.
        DataLossError: from ``read``: a truncated or damaged compressed stream (names the file and offset).
    """
    p = files.to_str_path(path)
    compression = compression_of(p, normalize_compression(compression_type, allow_auto=True))
    f = files.open_file(p, "rb")
    if compression:
        return io.BufferedReader(_Decompressing(f, p, compression, buffer_size), buffer_size)
    if isinstance(f, io.BufferedReader):
        return io.BufferedReader(f.detach(), buffer_size)
    return f


def seek_input(stream: IO[bytes], offset: int, path: str = "", stop: Any = None) -> None:
    """Move ``stream`` (from :func:`open_input`, at its start) to the uncompressed byte ``offset``: a seek where the
    stream can seek, else decompress-and-skip from the start (O(offset) CPU, ``_SKIP_CHUNK`` bytes of memory).
    ``stop``: a flag (``is_set()``, e.g. the iterator's close) checked between the chunks skipped.

    Raises:
        DataLossError: the file's (uncompressed) bytes end before ``offset`` (names ``path`` and both offsets), or
            a damaged compressed stream.
        Cancelled: ``stop`` was set during the skip (the stream is then somewhere before ``offset``).
    """
    if offset <= 0:
        return
    if stream.seekable():
        size = stream.seek(0, io.SEEK_END)
        if offset > size:
            raise DataLossError(f"cannot resume {path or 'the file'} at byte {offset}: it has only {size} bytes; "
                                "restore a state saved from this file", path=path, offset=offset, reason="truncated")
        stream.seek(offset)
        return
    left = offset - stream.tell()
    while left > 0:
        if stop is not None and stop.is_set():
            raise Cancelled()
        got = len(stream.read(min(left, _SKIP_CHUNK)))
        if not got:
            raise DataLossError(f"cannot resume {path or 'the file'} at uncompressed byte {offset}: its bytes end at "
                                f"{offset - left}; restore a state saved from this file", path=path, offset=offset,
                                reason="truncated")
        left -= got


_WAIT_S = 0.1  # a wait for the read-ahead thread re-checks its stop flag this often


class ReadAhead:
    """Chunks of ``stream`` (up to ``chunk`` bytes each; one decompression per chunk for a compressed stream) read
    by a thread of its own, at most ``depth`` ahead of :meth:`read`: zlib and file reads release the GIL, so
    decompression runs beside the work on the chunks before it. ``read()`` returns them in order (``b""`` at the
    end) and raises, in order too, what the stream raised (a damaged compressed stream after the chunks read
    before it). ``close()`` stops the thread (joined with a timeout) and closes ``stream``; ``stop``: a flag
    (``is_set()``) whose setting also ends a wait (``Cancelled``, as every wait of a closed pipeline).
    """

    def __init__(self, stream: IO[bytes], chunk: int, depth: int, name: str, stop: Any = None) -> None:
        self._stream, self._chunk, self._depth = stream, chunk, depth
        self._ready: deque[bytes | BaseException] = deque()
        self._cv = Condition(f"read-ahead of {name}")
        self._stop = Flag()
        self._outer = stop
        self._ended = False
        self.thread = start_thread(f"read-ahead-{name}", self._run, self._stop)

    def _run(self) -> None:
        read = getattr(self._stream, "read1", None) or self._stream.read
        while not self._stop.is_set():
            try:
                item: bytes | BaseException = read(self._chunk)
            except BaseException as e:  # handed to the reader, in order
                item = e
            with self._cv:
                while len(self._ready) >= self._depth and not self._stop.is_set():
                    self._cv.wait(_WAIT_S)
                self._ready.append(item)
                self._cv.notify_all()
            if not isinstance(item, bytes) or not item:
                return

    def _stopped(self) -> bool:
        return self._stop.is_set() or (self._outer is not None and self._outer.is_set())

    def read(self) -> bytes:
        """The next chunk, ``b""`` at the end; raises what reading it raised, and ``Cancelled`` once stopped (a
        stop is never taken for the end of the file)."""
        if self._ended:
            return b""
        with self._cv:
            while not self._ready and not self._stopped():
                self._cv.wait(_WAIT_S)
            if not self._ready:
                raise Cancelled()
            item = self._ready.popleft()
            self._cv.notify_all()
        if isinstance(item, BaseException):
            self._ended = True
            raise item
        self._ended = not item
        return item

    def signal_stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        join_threads([self.thread])
        if not self.thread.is_alive():  # (a thread stuck in a remote read keeps its stream; it is a daemon)
            self._stream.close()
        self._ready.clear()
