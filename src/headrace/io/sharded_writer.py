"""``ShardedWriter``: write records into ``prefix-00000-of-00016.tfrecord`` shards, with indexes; a set of
shards is published whole or not at all.

Shards are written under temporary names and get their final names (``-of-NNNNN``, known only then) in
``close()``. Publication:

- **A new or empty directory**: everything is written in a sibling staging directory
  (``<directory>.staging-<id>``) which ``close()`` renames to ``<directory>`` in one ``rename(2)``: any
  reader, TensorFlow's included, sees all the shards or none.
- **A directory that already holds other files**: the shards are written there under hidden temporary
  names; ``close()`` first writes a journal ``.<prefix>.publishing`` listing every rename, then renames the
  shards, then their indexes (an index never exists without its shard), then deletes the journal. A process
  killed in between leaves the journal: headrace's globbing readers (``Dataset.list_files``, every reader
  given a pattern, ``headrace.io.files.glob``) refuse that set with an error naming it, and
  :meth:`ShardedWriter.recover` (run by the next ``ShardedWriter`` on the directory too) finishes the
  renames; the data was complete before the journal was written.
- Remote URLs (``s3://`` ...) have no atomic rename: the shards are renamed one by one after all of them
  are written.

With ``index=True`` each shard's index (:mod:`headrace.io.tfrecord_index` format, ``<shard>.idx``) is
streamed to a temporary file too.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from typing import Any

from .._files.framing import OVERHEAD_BYTES
from . import files
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

    def finish(self) -> None:
        self.writer.close()
        if self._index is not None:
            self._index.close()

    def discard(self) -> None:
        self.finish()
        for p in (self.tmp, self.index_tmp):
            if p is not None and not files.is_remote(p):
                try:
                    os.remove(p)
                except FileNotFoundError:
                    pass


def _join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}" if files.is_remote(directory) else os.path.join(directory, name)


def _is_empty_dir(path: str) -> bool:
    try:
        with os.scandir(path) as entries:
            return next(entries, None) is None
    except (FileNotFoundError, NotADirectoryError):
        return False


def _replay(journal: str) -> list[str]:
    """Do the renames a journal lists that are not done yet, delete it; returns the final shard paths."""
    with open(journal) as f:
        moves = json.load(f)["moves"]
    for src, dst in moves:
        if os.path.exists(src):
            os.replace(src, dst)
    os.remove(journal)
    for staging in {os.path.dirname(src) for src, _ in moves} - {os.path.dirname(journal)}:
        shutil.rmtree(staging, ignore_errors=True)
    return [dst for _, dst in moves if not dst.endswith(INDEX_SUFFIX)]


class ShardedWriter:
    """Write records to TFRecord shards ``<directory>/<prefix>-<i:05d>-of-<n:05d>.tfrecord``.

    >>> with hr.io.ShardedWriter("out/", "train", num_shards=16) as w:
    ...     for record in records: w.write(record)

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

    ``write(record)``; ``close()`` publishes the whole set (see the module docstring) and returns the shard
    paths; ``abort()`` deletes the temporary files. As a context manager it closes on success and aborts on
    an exception. ``ShardedWriter.recover(directory)`` finishes a publication a killed process left behind.

    Raises:
        ValueError: an empty ``prefix`` or one with ``/``; ``num_shards`` / ``max_shard_bytes`` not None or an
            int >= 1, or both given; ``index=True`` with compression; ``write()`` after ``close()``.
        TypeError: ``options`` of another type (as :class:`TFRecordWriter`'s).
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
        self._staging: str | None = None
        self._write_to = self.directory
        if not files.is_remote(self.directory):
            self.recover(self.directory)
            if not os.path.exists(self.directory) or _is_empty_dir(self.directory):
                self._staging = f"{os.path.abspath(self.directory)}.staging-{uuid.uuid4().hex[:12]}"
                os.makedirs(self._staging)
                self._write_to = self._staging
            else:
                os.makedirs(self.directory, exist_ok=True)
        self._shards: list[_Shard] = []
        if num_shards is not None:
            self._shards = [self._new_shard(i) for i in range(num_shards)]
        self.records = 0
        self.paths: list[str] | None = None

    def _new_shard(self, number: int) -> _Shard:
        return _Shard(self._write_to, self.prefix, number, self.options, self.index)

    def write(self, record: bytes) -> None:
        """Append one record (``bytes``) to the current shard.

        Args:
            record: the record's bytes.

        Raises:
            ValueError: after ``close()``.
        """
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
        """Finish every shard and publish the set (idempotent).

        Returns:
            list[str]: the shard paths, ``<directory>/<prefix>-NNNNN-of-NNNNN.tfrecord``.
        """
        if self.paths is not None:
            return self.paths
        if not self._shards:
            self._shards.append(self._new_shard(0))
        n = len(self._shards)
        names = [f"{self.prefix}-{i:05d}-of-{n:05d}.tfrecord" for i in range(n)]
        for shard in self._shards:
            shard.finish()
        if files.is_remote(self.directory):
            for shard, name in zip(self._shards, names):
                files.rename(shard.tmp, _join(self.directory, name))
                if shard.index_tmp is not None:
                    files.rename(shard.index_tmp, _join(self.directory, name) + INDEX_SUFFIX)
        elif not (self._staging is not None and self._publish_staged(names)):
            self._publish_journaled(names)
        self.paths = [_join(self.directory, name) for name in names]
        return self.paths

    def _publish_staged(self, names: list[str]) -> bool:
        """Final names inside the staging directory, then one rename of the directory. False when the target
        is no longer empty (written meanwhile): the caller falls back to the journal."""
        staging = self._staging
        if staging is None:
            return False
        for shard, name in zip(self._shards, names):
            final = os.path.join(staging, name)
            os.replace(shard.tmp, final)
            shard.tmp = final
            if shard.index_tmp is not None:
                os.replace(shard.index_tmp, final + INDEX_SUFFIX)
                shard.index_tmp = final + INDEX_SUFFIX
        try:
            os.rename(staging, self.directory)
        except OSError:
            if not os.path.isdir(self.directory) or _is_empty_dir(self.directory):
                raise
            return False
        self._staging = None
        return True

    def _publish_journaled(self, names: list[str]) -> None:
        """Journal every rename, rename the shards, then their indexes, then delete the journal."""
        os.makedirs(self.directory, exist_ok=True)
        finals = [os.path.join(self.directory, name) for name in names]
        moves = [[shard.tmp, final] for shard, final in zip(self._shards, finals)]
        moves += [[shard.index_tmp, final + INDEX_SUFFIX] for shard, final in zip(self._shards, finals)
                  if shard.index_tmp is not None]
        journal = os.path.join(self.directory, f".{self.prefix}{files.PUBLISHING_SUFFIX}")
        with open(journal + ".tmp", "w") as f:
            json.dump({"prefix": self.prefix, "moves": moves}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(journal + ".tmp", journal)
        _replay(journal)
        self._staging = None

    @staticmethod
    def recover(directory: str | os.PathLike[str]) -> list[str]:
        """Finish every publication interrupted in ``directory`` (journals ``.<prefix>.publishing``).

        Args:
            directory: a local directory (remote URLs have no journal: nothing to do).

        Returns:
            list[str]: the shard paths it completed (``[]`` when there was nothing to do).
        """
        d = files.to_str_path(directory)
        done: list[str] = []
        if files.is_remote(d) or not os.path.isdir(d):
            return done
        for name in sorted(os.listdir(d)):
            if name.startswith(".") and name.endswith(files.PUBLISHING_SUFFIX):
                done += _replay(os.path.join(d, name))
        return done

    def abort(self) -> None:
        """Delete the temporary files; nothing with a final name is left behind."""
        if self.paths is None:
            for shard in self._shards:
                shard.discard()
            if self._staging is not None:
                shutil.rmtree(self._staging, ignore_errors=True)
                self._staging = None
            self.paths = []

    def __enter__(self) -> ShardedWriter:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
