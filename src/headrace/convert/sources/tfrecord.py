"""Existing TFRecord files of ``tf.train.Example`` records (to re-shard, re-compress or convert to Parquet).

Files are read with :class:`headrace.io.TFRecordDataset` (both CRCs checked); ``.gz`` / ``.zlib`` files are
read as GZIP / ZLIB unless ``compression_type`` says otherwise. Source IDs are ``<file>:<record number>``
(0-based). A record that is not a ``tf.train.Example`` is rejected; a corrupt record (CRC mismatch,
truncation) is rejected with its byte offset, and as the framing after it cannot be trusted, the rest of
that file is not read (the rejected entry says so).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ...io.files import join
from ..schema import FLOAT32, INT64, STRING
from .base import Item, Rejected, Source, list_files, total_size

_KIND = {"O": STRING, "i": INT64, "f": FLOAT32}
_COMPRESSED = {".gz": "GZIP", ".zlib": "ZLIB"}


class TFRecordSource(Source):
    """TFRecord files (``*.tfrecord``, ``*.tfrecords``, ``*.tfrec``, optionally ``.gz`` / ``.zlib``)."""

    kind = "tfrecord"
    extensions = tuple(e + c for e in (".tfrecord", ".tfrecords", ".tfrec") for c in ("", ".gz", ".zlib"))

    def __init__(self, path: str, compression_type: str | None = None) -> None:
        super().__init__(path)
        self.root, self.files = list_files(path, self.extensions, self.kind)
        self.compression_type = compression_type

    def units(self) -> list[str]:
        return list(self.files)

    def estimate_bytes(self) -> int:
        """File sizes; compressed files count 3x (a typical ratio for Examples)."""
        return sum(total_size(self.root, [r]) * (3 if self._compression(r) else 1) for r in self.files)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "files": len(self.files)}

    def _compression(self, rel: str) -> str | None:
        if self.compression_type is not None:
            return self.compression_type
        return next((c for s, c in _COMPRESSED.items() if rel.lower().endswith(s)), None)

    def read(self, unit: str) -> Iterator[Item]:
        from ..._errors import DataLossError
        from ...io.example import decode
        from ...io.tfrecord import TFRecordDataset

        path = join(self.root, unit)
        n = 0  # records read so far: the number of the next one
        try:
            for record in TFRecordDataset(path, compression_type=self._compression(unit)):
                rid = f"{unit}:{n}"
                n += 1
                try:
                    feats = decode(record)
                except ValueError as e:
                    yield Rejected(rid, f"{path} record {n - 1}", str(e))
                    continue
                yield rid, {k: (_KIND[v.dtype.kind], v.tolist()) if len(v) else (None, []) for k, v in feats.items()}
        except DataLossError as e:
            where = f"{path} byte {e.offset}" if e.offset is not None else path
            yield Rejected(f"{unit}:{n}", where, f"{e}; the records after it in this file are not read")
