"""Helpers of the ``headrace.service`` tests: TFRecord shards whose records name their file and index."""

from __future__ import annotations

from pathlib import Path

from headrace.io import TFRecordWriter


def write_shards(directory: Path, files: int, records: int) -> list[str]:
    """``files`` TFRecord files in ``directory``, record ``i`` of file ``f`` being ``b"f:i"``; their paths."""
    names = []
    for f in range(files):
        names.append(str(directory / f"part-{f}.tfrecord"))
        with TFRecordWriter(names[-1]) as w:
            for i in range(records):
                w.write(f"{f}:{i}".encode())
    return names
