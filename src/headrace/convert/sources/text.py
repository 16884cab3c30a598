"""Text files, one record per line (``*.txt``, ``*.text``, optionally ``.gz`` / ``.zz`` / ``.zlib``).

Lines are tf.data's (:class:`headrace.io.TextLineDataset`: without their ``\\n`` / ``\\r\\n``, empty lines kept,
bytes never decoded); each becomes a record with one string feature, ``text``. The compression is taken from
the extension (``compression_type="AUTO"``) unless ``compression_type`` says otherwise. Source IDs are
``<file>:<line number>`` (1-based); work units are whole files. A damaged compressed stream is rejected with
its file and uncompressed byte offset, and the rest of that file is not read (the rejected entry says so).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ...io.files import join
from ..schema import STRING, Values
from .base import Item, Rejected, Source, list_files, total_size

FEATURE = "text"


class TextSource(Source):
    """Text files; one record ``{"text": line}`` per line."""

    kind = "text"
    label_features = ()
    extensions = tuple(e + c for e in (".txt", ".text") for c in ("", ".gz", ".zz", ".zlib"))

    def __init__(self, path: str, compression_type: str | None = None) -> None:
        super().__init__(path)
        self.root, self.files = list_files(path, self.extensions, self.kind)
        self.compression_type = "AUTO" if compression_type is None else compression_type

    def units(self) -> list[str]:
        return list(self.files)

    def estimate_bytes(self) -> int:
        """File sizes; compressed files count 3x (a typical ratio for text)."""
        return sum(total_size(self.root, [r]) * (1 if r.lower().endswith((".txt", ".text")) else 3)
                   for r in self.files)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "files": len(self.files)}

    def read(self, unit: str) -> Iterator[Item]:
        from ..._errors import DataLossError
        from ...io.text import TextLineDataset

        path = join(self.root, unit)
        n = 0  # lines read so far
        try:
            for line in TextLineDataset(path, compression_type=self.compression_type):
                n += 1
                values: Values = (STRING, [line])
                yield f"{unit}:{n}", {FEATURE: values}
        except DataLossError as e:
            where = f"{path} byte {e.offset}" if e.offset is not None else path
            yield Rejected(f"{unit}:{n + 1}", where, f"{e}; the lines after it in this file are not read")
