"""Record indexes of TFRecord files, and random access to the records of indexed files.

Index format (the text format of NVIDIA DALI's ``tfrecord2idx``, so DALI can use these indexes too): one
line per record, ``"<offset> <framed length>\\n"`` in decimal, where ``offset`` is the byte offset of the
record's header in the file and ``framed length`` = 12 + data length + 4. The index of ``x.tfrecord`` is
``x.tfrecord.idx`` by default (:func:`index_path`). Indexes need uncompressed files.

:class:`TFRecordRandomAccess` has ``len()`` and ``[i]`` over one or more indexed files (``i`` counts the
records of all files in order), so ``Dataset.from_random_access(source, shuffle=True, seed=...)`` gives a
seeded global shuffle of data far larger than memory with no shuffle buffer.
"""

from __future__ import annotations

import bisect
import os
import threading
from typing import Any

import numpy as np

from .._errors import DataLossError, StaleIndexError
from .._files.framing import FOOTER, HEADER, HEADER_BYTES, OVERHEAD_BYTES, RecordReader, masked_crc32c
from . import files

INDEX_SUFFIX = ".idx"


def index_path(path: str | bytes | os.PathLike[str]) -> str:
    """Where the index of ``path`` lives by default: ``path + ".idx"``."""
    return files.to_str_path(path) + INDEX_SUFFIX


def format_index(offsets: np.ndarray) -> bytes:
    """Index text for an ``(n, 2)`` int array of (offset, framed length) rows."""
    if len(offsets) == 0:
        return b""
    return ("\n".join(f"{o} {n}" for o, n in offsets.tolist()) + "\n").encode("ascii")


def build_index(path: str | bytes | os.PathLike[str], index_file: str | None = None) -> str:
    """Write the index of the uncompressed TFRecord file ``path``: one ``<offset> <framed length>`` line per record.

    >>> hr.io.build_index("train-00000.tfrecord")  # 'train-00000.tfrecord.idx'

    Every record is read (checking both CRCs), so an index never covers a bad record. The index is written to a
    temporary name and renamed.

    Args:
        path: the TFRecord file (uncompressed; local path or fsspec URL).
        index_file: where to write the index (default :func:`index_path`: ``path + ".idx"``).

    Returns:
        str: the index path.

    Raises:
        DataLossError: the file is corrupt or truncated (naming the offset).
    """
    p = files.to_str_path(path)
    out = index_file or index_path(p)
    reader = RecordReader(p)
    rows: list[tuple[int, int]] = []
    try:
        while True:
            at = reader.offset
            record = reader.next_record()
            if record is None:
                break
            rows.append((at, len(record) + OVERHEAD_BYTES))
    finally:
        reader.close()
    tmp = f"{out}.tmp-{os.getpid()}-{threading.get_ident()}"
    with files.open_file(tmp, "wb") as f:
        f.write(format_index(np.array(rows, dtype=np.int64).reshape(-1, 2)))
    files.rename(tmp, out)
    return out


def read_index(path: str | bytes | os.PathLike[str]) -> np.ndarray:
    """Read an index file written by :func:`build_index` (``path`` is the index itself).

    >>> hr.io.read_index("train-00000.tfrecord.idx")[:2]  # array([[0, 120], [120, 118]])

    Args:
        path: the index file (local path or fsspec URL).

    Returns:
        numpy.ndarray: int64 of shape ``(n, 2)``: the byte offset and framed length of each record.

    Raises:
        StaleIndexError: (a ``ValueError``) text that is not an index, naming the file and line, or rows that are
            not contiguous from byte 0.
    """
    p = files.to_str_path(path)
    with files.open_file(p, "rb") as f:
        text = f.read()
    try:
        arr = np.array(text.split(), dtype=np.int64)
    except ValueError:
        arr = None
    if arr is None or arr.size % 2:
        lines = text.decode("ascii", "replace").splitlines()
        bad = next((i for i, line in enumerate(lines) if len(line.split()) != 2 or
                    not all(t.isdigit() for t in line.split())), len(lines))
        raise StaleIndexError(f"{p} is not a TFRecord index: line {bad + 1} is not '<offset> <length>'; rebuild "
                              "it with headrace.io.build_index(<the .tfrecord file>)", index=p)
    rows = arr.reshape(-1, 2)
    if len(rows) and (rows.min() < 0 or np.any(rows[:, 1] < OVERHEAD_BYTES)
                      or np.any(rows[1:, 0] != rows[:-1, 0] + rows[:-1, 1]) or rows[0, 0] != 0):
        raise StaleIndexError(f"{p} is not a consistent TFRecord index (records must be contiguous from byte 0, "
                              f"each >= {OVERHEAD_BYTES} bytes); rebuild it with headrace.io.build_index(<the "
                              ".tfrecord file>)", index=p)
    return rows


class TFRecordRandomAccess:
    """Random access to the records of indexed, uncompressed TFRecord files.

    >>> ds = hr.Dataset.from_random_access(hr.io.TFRecordRandomAccess(files), shuffle=True, seed=0)

    Args:
        paths: one path or a list (local or fsspec URLs); record ``i`` counts across files in order.
        index_files: their index files (default ``path + ".idx"``).
        build_missing: build a missing index with :func:`build_index` (reads the whole file once)
            instead of raising ``FileNotFoundError``.

    ``len(source)`` is the total record count; ``source[i]`` (``-len <= i < len``) reads and returns the
    record's ``bytes``, checking both CRCs (:class:`~headrace.DataLossError` with file and offset if they
    fail). Thread-safe (local files use ``os.pread``); picklable (file handles reopen lazily), so it can
    go to worker processes.

    Raises:
        ValueError: ``index_files`` of another length than ``paths``.
        FileNotFoundError: a missing index without ``build_missing``.
        StaleIndexError: (a ``ValueError``) on open, an index that does not match its file's size, or is not an
            index (:func:`read_index`).
        DataLossError: ``source[i]``, a record whose CRCs fail or that is truncated (file and offset).
        IndexError: ``source[i]`` with ``i`` out of range (``TypeError`` for a non-int ``i``).
    """

    def __init__(self, paths: Any, index_files: list[str] | None = None, build_missing: bool = False) -> None:
        self.paths = [files.to_str_path(paths)] if isinstance(paths, str | bytes | os.PathLike) else [
            files.to_str_path(p) for p in paths]
        if index_files is not None and len(index_files) != len(self.paths):
            raise ValueError(f"TFRecordRandomAccess: {len(index_files)} index files for {len(self.paths)} paths; "
                             "pass one index per file (or None for the default names)")
        self.index_files = list(index_files) if index_files is not None else [index_path(p) for p in self.paths]
        self._offsets: list[np.ndarray] = []
        starts = [0]
        for path, idx in zip(self.paths, self.index_files):
            if build_missing and not _exists(idx):
                build_index(path, idx)
            rows = read_index(idx)
            size = files.file_size(path)
            end = int(rows[-1, 0] + rows[-1, 1]) if len(rows) else 0
            if end != size:
                raise StaleIndexError(f"the index {idx} covers {end} bytes but {path} has {size}; the index is "
                                      f"stale, rebuild it with headrace.io.build_index({path!r})", path=path,
                                      index=idx)
            self._offsets.append(rows)
            starts.append(starts[-1] + len(rows))
        self._starts = starts
        self._local = threading.local()

    def __len__(self) -> int:
        return self._starts[-1]

    def locate(self, i: int) -> tuple[int, int, int]:
        """Where record ``i`` is.

        Args:
            i: the record's index, ``-len <= i < len`` (negative counts from the end).

        Returns:
            tuple[int, int, int]: ``(file number, byte offset, framed length)`` of record ``i``.

        Raises:
            TypeError: ``i`` is not an int.
            IndexError: ``i`` is out of range.
        """
        n = len(self)
        if isinstance(i, bool) or not isinstance(i, int | np.integer):
            raise TypeError(f"record index must be an int, got {type(i).__name__} {i!r}")
        j = int(i) + n if i < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(f"record index {i} is out of range for {n} records (valid: {-n} .. {n - 1})")
        k = bisect.bisect_right(self._starts, j) - 1
        offset, length = self._offsets[k][j - self._starts[k]]
        return k, int(offset), int(length)

    def _read(self, k: int, offset: int, length: int) -> bytes:
        handles = getattr(self._local, "handles", None)
        if handles is None:
            handles = self._local.handles = {}
        f = handles.get(k)
        if f is None:
            f = handles[k] = files.open_file(self.paths[k], "rb")
        if hasattr(f, "fileno") and not files.is_remote(self.paths[k]):
            return os.pread(f.fileno(), length, offset)
        f.seek(offset)
        return f.read(length)

    def __getitem__(self, i: int) -> bytes:
        k, offset, length = self.locate(i)
        buf = self._read(k, offset, length)
        path = self.paths[k]
        if len(buf) != length:
            raise DataLossError(f"truncated record at byte {offset} of {path}: the index says {length} bytes but "
                                f"only {len(buf)} could be read; rebuild the index", path=path, offset=offset,
                                reason="truncated")
        n, length_crc = HEADER.unpack_from(buf)
        if masked_crc32c(buf[:8]) != length_crc or n + OVERHEAD_BYTES != length:
            raise DataLossError(f"corrupted record at byte {offset} of {path}: the length field fails its CRC32C or "
                                "disagrees with the index; rebuild the index or re-create the file", path=path,
                                offset=offset, reason="length_crc")
        data = buf[HEADER_BYTES:HEADER_BYTES + n]
        if masked_crc32c(data) != FOOTER.unpack_from(buf, HEADER_BYTES + n)[0]:
            raise DataLossError(f"corrupted record at byte {offset} of {path}: the data CRC32C does not match",
                                path=path, offset=offset, reason="data_crc")
        return data

    def close(self) -> None:
        """Close this thread's file handles (others close when their threads end)."""
        for f in getattr(self._local, "handles", {}).values():
            f.close()
        self._local.handles = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_local"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()


def _exists(path: str) -> bool:
    try:
        files.file_size(path)
        return True
    except (FileNotFoundError, OSError):
        return False
