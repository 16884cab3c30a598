"""Sources of ``headrace convert``: image folders, CSV, JSON Lines, Parquet, TFRecord and text files.

:func:`open_source` picks the reader from ``source_format`` or, by default, from the path: a directory of
class subfolders holding images is an image folder; otherwise the files' extensions decide (``.csv``,
``.jsonl`` / ``.ndjson`` / ``.json``, ``.parquet``, ``.tfrecord`` / ``.tfrecords`` / ``.tfrec`` with an
optional ``.gz`` / ``.zlib``, ``.txt`` / ``.text`` with an optional ``.gz`` / ``.zz`` / ``.zlib``: one record per
line).
"""

from __future__ import annotations

import os
from typing import Any

from ...image.formats import IMAGE_EXTENSIONS
from ...io import files
from .base import Rejected, Source, list_files
from .images import ImageFolderSource
from .tables import CSVSource, JSONLinesSource, ParquetSource
from .text import TextSource
from .tfrecord import TFRecordSource

FORMATS: dict[str, type[Source]] = {"image_folder": ImageFolderSource, "csv": CSVSource, "jsonl": JSONLinesSource,
                                    "parquet": ParquetSource, "tfrecord": TFRecordSource, "text": TextSource}


def detect_format(path: str) -> str:
    """The source format of ``path`` (module docstring).

    Raises ``FileNotFoundError`` (nothing there) or ``ValueError`` (no supported files, or several
    formats mixed), naming the path and the choices.
    """
    is_dir = not any(c in path for c in "*?[") and files.isdir(path)
    if is_dir:
        for sub in files.subdirs(path):
            if sub.startswith("."):
                continue
            if any(f.lower().endswith(IMAGE_EXTENSIONS) for f in files.find(f"{path.rstrip('/')}/{sub}")):
                return "image_folder"
    found = {}
    for name, cls in FORMATS.items():
        if name == "image_folder":
            continue
        try:
            found[name] = len(list_files(path, cls.extensions, name)[1])  # type: ignore[attr-defined]
        except FileNotFoundError:
            continue
    if not found:
        if not is_dir and not files.glob(path) and not os.path.exists(path):
            raise FileNotFoundError(f"convert: the source {path} does not exist")
        raise ValueError(f"convert: cannot tell the format of {path}: no image class folders and no .csv, .jsonl, "
                         ".parquet, .tfrecord or .txt files; pass source_format= (--from) one of "
                         f"{', '.join(FORMATS)}")
    if len(found) > 1:
        raise ValueError(f"convert: {path} holds files of several formats ({found}); point it at one kind or "
                         f"pass source_format= (--from) one of {', '.join(FORMATS)}")
    return next(iter(found))


def open_source(path: str, source_format: str | None = None, **options: Any) -> Source:
    """The :class:`Source` for ``path``; ``options`` go to its constructor (``image_size`` and ``quality``
    for image folders, ``compression_type`` for TFRecord; others are refused).

    Raises ``ValueError`` for an unknown ``source_format`` or an option the source does not take.
    """
    fmt = source_format or detect_format(path)
    cls = FORMATS.get(fmt)
    if cls is None:
        raise ValueError(f"convert: source_format={fmt!r} is not one of {', '.join(FORMATS)}")
    given = {k: v for k, v in options.items() if v is not None}
    allowed = {"image_folder": {"image_size", "quality"}, "tfrecord": {"compression_type"},
               "text": {"compression_type"}}.get(fmt, set())
    extra = sorted(set(given) - allowed)
    if extra:
        raise ValueError(f"convert: {', '.join(extra)} cannot be used with a {fmt} source (only "
                         f"{', '.join(sorted(allowed)) or 'no options'})")
    return cls(path, **given)


__all__ = ["FORMATS", "CSVSource", "ImageFolderSource", "JSONLinesSource", "ParquetSource", "Rejected", "Source",
           "TFRecordSource", "TextSource", "detect_format", "open_source"]
