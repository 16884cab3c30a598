"""What a dataset path on the command line holds (no torch, no reading of records).

:func:`detect` tells the format of a path (a file, a directory or a glob pattern): TFRecord (``*.tfrecord``,
``*.tfrecords``, ``*.tfrec``, optionally ``.gz`` / ``.zlib``), Parquet (``*.parquet``), HDF5 (``*.h5``,
``*.hdf5``) or an image folder (a directory of class sub-directories of images); :func:`detect_all` that
of several paths (an unquoted glob the shell expanded). :func:`training_shards`
is what ``bench`` and ``train`` read: uncompressed TFRecord shards; for anything else it says how to get
them with ``headrace convert``.
"""

from __future__ import annotations

import os

from ..image.formats import IMAGE_EXTENSIONS
from ..io import files

TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".tfrec")
COMPRESSED = {".gz": "GZIP", ".zlib": "ZLIB"}
MANIFEST = "dataset.json"


def _kind_of(name: str) -> str | None:
    low = name.lower()
    for suffix in COMPRESSED:
        if low.endswith(suffix):
            low = low[: -len(suffix)]
    if low.endswith(TFRECORD_SUFFIXES):
        return "tfrecord"
    if low.endswith(".parquet"):
        return "parquet"
    if low.endswith((".h5", ".hdf5")):
        return "hdf5"
    return None


def detect(path: str) -> tuple[str, list[str]]:
    """``(format, files)`` for a local ``path`` (a file, a directory or a glob pattern); ``format`` is
    ``tfrecord``, ``parquet``, ``hdf5`` or ``image_folder`` (then ``files`` is ``[path]``).

    Raises:
        FileNotFoundError: the path does not exist or holds no dataset file.
        ValueError: a file of a format headrace does not read.
    """
    if any(c in path for c in "*?["):
        found = files.glob(path)
        if not found:
            raise FileNotFoundError(f"{path}: no file matches the pattern")
    elif os.path.isdir(path):
        names = sorted(f for f in os.listdir(path) if not f.startswith("."))
        found = [os.path.join(path, f) for f in names if _kind_of(f)]
        if not found:
            subdirs = [os.path.join(path, f) for f in names if os.path.isdir(os.path.join(path, f))]
            if any(f.lower().endswith(IMAGE_EXTENSIONS) for d in subdirs for f in os.listdir(d)):
                return "image_folder", [path]
            raise FileNotFoundError(f"{path}: no TFRecord, Parquet or HDF5 files and no class folders of "
                                    "images in this directory")
    elif os.path.isfile(path):
        found = [path]
    else:
        raise FileNotFoundError(f"{path}: no such file or directory")
    kinds = {_kind_of(os.path.basename(f)) for f in found}
    if len(kinds) != 1 or None in kinds:
        raise ValueError(f"{path}: cannot tell the format of {found[0]!r}; expected *.tfrecord, *.parquet, "
                         "*.h5 / *.hdf5 files or an image folder")
    return kinds.pop(), found  # type: ignore[return-value]


def detect_all(paths: list[str]) -> tuple[str, list[str]]:
    """:func:`detect` of several paths that make one dataset (what the shell passes for an unquoted glob
    pattern, ``data/*.tfrecord``): ``(format, files)``, the files of every path in the order given, each
    once.

    Raises:
        FileNotFoundError / ValueError: as :func:`detect`, for the first path that fails.
        ValueError: the paths hold different formats, or an image folder among others (naming both).
    """
    first: tuple[str, str] | None = None
    found: list[str] = []
    for path in paths:
        kind, files_ = detect(path)
        if first is None:
            first = (kind, path)
        elif kind != first[0] or kind == "image_folder":
            raise ValueError(f"{first[1]} holds {first[0]} and {path} holds {kind}: give the paths of one "
                             "dataset (one image folder, or files of one format)")
        found.extend(f for f in files_ if f not in found)
    if first is None:
        raise ValueError("no path given")
    return first[0], found


def training_shards(path: str, command: str) -> list[str]:
    """The uncompressed TFRecord files at ``path`` that ``headrace COMMAND`` reads (sorted), checked before
    anything heavy is imported; fsspec URLs are returned as given (listed later, by the reader).

    Raises:
        FileNotFoundError: nothing there. ValueError: a Parquet / HDF5 dataset, an image folder or
            compressed shards, naming the ``headrace convert`` command that makes shards of them.
    """
    if files.is_remote(path):
        return [path]
    kind, found = detect(path)
    if kind == "tfrecord" and not any(f.lower().endswith(tuple(COMPRESSED)) for f in found):
        return found
    what = {"image_folder": "an image folder", "parquet": "Parquet files", "hdf5": "HDF5 files",
            "tfrecord": "compressed TFRecord files"}[kind]
    if kind == "hdf5":
        return _refuse(path, command, what, "convert the arrays to TFRecord image Examples first (headrace.io."
                                            "ShardedWriter)")
    src = path.rstrip("/")
    dst = f"{os.path.basename(src) or 'data'}-shards"
    return _refuse(path, command, what, f"make uncompressed TFRecord shards of them with `headrace convert {src} "
                                        f"{dst}`, then `headrace {command} {dst}`")


def _refuse(path: str, command: str, what: str, fix: str) -> list[str]:
    raise ValueError(f"{path} holds {what}; headrace {command} reads uncompressed TFRecord shards of image "
                     f"Examples (image/encoded, image/class/label): {fix}")
