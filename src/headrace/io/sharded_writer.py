"""``ShardedWriter``: write records into ``prefix-00000-of-00016.tfrecord`` shards, atomically, with indexes.

Shards are written under temporary names (``.prefix-00000.tfrecord.tmp-<pid>-<id>``) and renamed to their
final names only by ``close()``, so a crash or an exception never leaves a file that looks complete; the
final names (``of-NNNNN``) are known only then. With ``index=True`` the index of each shard
(:mod:`headrace.io.tfrecord_index` format, ``<shard>.idx``) is streamed to a temporary file too and
renamed just before its shard.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from . import files
from ._framing import OVERHEAD_BYTES
from .tfrecord_index import INDEX_SUFFIX
from .tfrecord_writer import TFRecordOptions, TFRecordWriter


class _Shard:
    def __init__(self, directory: str, prefix: str, number: int, options: TFRecordOptions, index: bool) -> None:
        tag = f"tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.tmp = _join(directory, f".{prefix}-{number:05d}.tfrecord.{tag}")
        self.writer = TFRecordWriter(self.tmp, options)
        self.index_tmp = self.tmp + INDEX_SUFFIX if index else None
        self._index = files.open_file(self.index_tmp, "wb") if self.index_tmp else None
        self.bytes = 0

    def write(self, record: bytes) -> None:
        at = self.writer.write(record)
        n = len(record) + OVERHEAD_BYTES
        self.bytes += n
        if self._index is not None:
            self._index.write(f"{at} {n}\n".encode("ascii"))

    def finish(self, final: str) -> None:
        self.writer.close()
        if self._index is not None:
            self._index.close()
            files.rename(self.index_tmp, final + INDEX_SUFFIX)  # type: ignore[arg-type]
        files.rename(self.tmp, final)

    def discard(self) -> None:
        self.writer.close()
        if self._index is not None:
            self._index.close()
        for p in (self.tmp, self.index_tmp):
            if p is not None and not files.is_remote(p):
                try:
                    os.remove(p)
                except FileNotFoundError:
                    pass


def _join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}" if files.is_remote(directory) else os.path.join(directory, name)


class ShardedWriter:
    """Write records to TFRecord shards ``<directory>/<prefix>-<i:05d>-of-<n:05d>.tfrecord``.

    Args:
        directory: where the shards go (local, created if missing, or an fsspec URL).
        prefix: the shard name prefix (no ``/``).
        num_shards: write exactly this many shards, record ``i`` going to shard ``i % num_shards``
            (shards may be empty). Exclusive with ``max_shard_bytes``.
        max_shard_bytes: start a new shard when the next record would take the current one past this many
            bytes (counted uncompressed, framing included; a larger record gets a shard of its own).
            With neither argument everything goes to one shard.
        options: ``None``, ``"GZIP"``, ``"ZLIB"`` or :class:`TFRecordOptions`.
        index: write ``<shard>.idx`` beside each shard (needs uncompressed shards: with compression pass
            ``index=False``).

    ``write(record)``; ``close()`` renames everything to its final name and returns the shard paths;
    ``abort()`` deletes the temporary files. As a context manager it closes on success and aborts on an
    exception.
    """

    def __init__(self, directory: str | os.PathLike[str], prefix: str, num_shards: int | None = None,
                 max_shard_bytes: int | None = None, options: TFRecordOptions | str | None = None,
                 index: bool = True) -> None:
        self.directory = files.to_str_path(directory)
        if not isinstance(prefix, str) or not prefix or "/" in prefix or os.sep in prefix:
            raise ValueError(f"ShardedWriter(prefix={prefix!r}): use a non-empty file name prefix without '/'")
        self.prefix = prefix
        for name, value in (("num_shards", num_shards), ("max_shard_bytes", max_shard_bytes)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"ShardedWriter({name}={value!r}): must be None or an int >= 1")
        if num_shards is not None and max_shard_bytes is not None:
            raise ValueError("ShardedWriter: pass num_shards (a fixed count, records spread round-robin) or "
                             "max_shard_bytes (a size limit, shards filled in turn), not both")
        self.options = TFRecordOptions.coerce(options)
        if index and self.options.compression_type:
            raise ValueError(f"ShardedWriter(index=True, options={self.options.compression_type!r}): record indexes "
                             "need uncompressed shards for random access; pass index=False or options=None")
        self.num_shards = num_shards
        self.max_shard_bytes = max_shard_bytes
        self.index = bool(index)
        if not files.is_remote(self.directory):
            os.makedirs(self.directory, exist_ok=True)
        self._shards: list[_Shard] = []
        if num_shards is not None:
            self._shards = [self._new_shard(i) for i in range(num_shards)]
        self.records = 0
        self.paths: list[str] | None = None

    def _new_shard(self, number: int) -> _Shard:
        return _Shard(self.directory, self.prefix, number, self.options, self.index)

    def write(self, record: bytes) -> None:
        """Append one record (``bytes``) to the current shard."""
        if self.paths is not None:
            raise ValueError(f"write() on a closed ShardedWriter ({self.directory}/{self.prefix}-*); open a new one")
        if self.num_shards is not None:
            shard = self._shards[self.records % self.num_shards]
        else:
            if not self._shards or (self.max_shard_bytes is not None and self._shards[-1].bytes > 0 and
                                    self._shards[-1].bytes + len(record) + OVERHEAD_BYTES > self.max_shard_bytes):
                self._shards.append(self._new_shard(len(self._shards)))
            shard = self._shards[-1]
        shard.write(record)
        self.records += 1

    def close(self) -> list[str]:
        """Finish every shard and rename it to its final name; returns the shard paths (idempotent)."""
        if self.paths is not None:
            return self.paths
        if not self._shards:
            self._shards.append(self._new_shard(0))
        n = len(self._shards)
        paths = [_join(self.directory, f"{self.prefix}-{i:05d}-of-{n:05d}.tfrecord") for i in range(n)]
        for shard, path in zip(self._shards, paths):
            shard.finish(path)
        self.paths = paths
        return paths

    def abort(self) -> None:
        """Delete the temporary files; nothing with a final name is left behind."""
        if self.paths is None:
            for shard in self._shards:
                shard.discard()
            self.paths = []

    def __enter__(self) -> ShardedWriter:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
