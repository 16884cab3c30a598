"""The ``dataset.json`` manifest of a converted dataset: reading it, checking the shards against it, and
opening the shards as a :class:`headrace.Dataset`.

Format (JSON, ``"format": "headrace.dataset"``, ``"version": 1``)::

    {"format": "headrace.dataset", "version": 1, "created": "2026-11-21T12:00:00+00:00",
     "source": {"kind": "image_folder", "path": "photos/", "files": 5000, "class_names": [...]},
     "output": {"format": "tfrecord", "compression": null, "prefix": "data", "seed": 0},
     "records": 4998, "bytes": 123456789, "rejected": 2, "rejected_file": "_rejected.jsonl",
     "features": {"image/class/label": {"type": "FixedLenFeature", "dtype": "int64", "shape": []}, ...},
     "statistics": {"image/class/label": {"present": 4998, "min": 0, "max": 11, "mean": 5.5,
                                          "histogram": {"3": 417, ...}, ...}, ...},
     "shards": [{"path": "data-00000-of-00016.tfrecord", "records": 312, "bytes": 7716104,
                 "sha256": "9f86d0...", "index": "data-00000-of-00016.tfrecord.idx"}, ...],
     "converter": {"headrace": "0.1.0", "apache_beam": "2.77.0", "runner": "DirectRunner", "seconds": 12.3}}

Shard paths are relative to the manifest's directory; ``features`` is the feature spec
(:func:`feature_spec` turns it into ``FixedLenFeature`` / ``VarLenFeature`` objects); statistics are
described in :mod:`headrace.convert.schema`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .._errors import ManifestError
from .._versioned import check_versioned
from ..io import files
from .schema import specs_from_json
from .sinks import sha256_file

MANIFEST = "dataset.json"
FORMAT = "headrace.dataset"
VERSION = 1


def manifest_path(directory: str | os.PathLike[str]) -> str:
    d = files.to_str_path(directory)
    return d if d.endswith(".json") else files.join(d, MANIFEST)


def load_manifest(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of the converted dataset in ``directory`` (or the ``dataset.json`` path itself).

    Raises :class:`ManifestError` naming the file when it is missing (an unfinished or failed conversion
    writes none), not JSON, or not a headrace dataset manifest.
    """
    path = manifest_path(directory)
    try:
        with files.open_file(path, "rb") as f:
            m = json.loads(f.read())
    except FileNotFoundError:
        raise ManifestError(f"{path} does not exist: the directory holds no finished conversion (the manifest is "
                            "written last; run headrace convert again)") from None
    except ValueError as e:
        raise ManifestError(f"{path} is not valid JSON ({e}); re-run the conversion") from None
    return check_versioned(m, fmt=FORMAT, version=VERSION, source=str(path), what="dataset manifest",
                           error=ManifestError, fix="re-run the conversion (or upgrade headrace)")


def shard_paths(directory: str | os.PathLike[str], manifest: dict[str, Any] | None = None) -> list[str]:
    """Full paths of the dataset's shards, in order."""
    base = os.path.dirname(manifest_path(directory)) if not files.is_remote(manifest_path(directory)) else \
        manifest_path(directory).rsplit("/", 1)[0]
    m = manifest if manifest is not None else load_manifest(directory)
    return [files.join(base, s["path"]) for s in m["shards"]]


def verify(directory: str | os.PathLike[str], checksums: bool = True) -> dict[str, Any]:
    """Check every shard against the manifest: it exists, has the recorded size, and (``checksums``) the
    recorded SHA-256 (reads every byte). Returns the manifest.

    Raises :class:`ManifestError` naming the first shard that is missing, has another size or checksum.
    """
    m = load_manifest(directory)
    for shard, path in zip(m["shards"], shard_paths(directory, m)):
        try:
            size = files.file_size(path)
        except OSError:
            raise ManifestError(f"shard {path} listed in {manifest_path(directory)} is missing; the dataset is "
                                "incomplete: copy it again or re-run the conversion") from None
        if size != shard["bytes"]:
            raise ManifestError(f"shard {path} has {size} bytes but the manifest says {shard['bytes']}; it was "
                                "truncated or replaced: copy it again or re-run the conversion")
        if checksums:
            digest = sha256_file(path)
            if digest != shard["sha256"]:
                raise ManifestError(f"shard {path} has SHA-256 {digest} but the manifest says {shard['sha256']}; "
                                    "the file is corrupt: copy it again or re-run the conversion")
    return m


def feature_spec(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The dataset's features as ``{name: FixedLenFeature | VarLenFeature}`` (for ``parse_example``)."""
    return specs_from_json(load_manifest(directory)["features"])


def open_dataset(directory: str | os.PathLike[str], verify_checksums: bool = False, **reader_options: Any) -> Any:
    """The converted dataset's shards as a :class:`headrace.Dataset`: a :class:`headrace.io.TFRecordDataset`
    of the serialized Examples, a :class:`headrace.io.TextLineDataset` of the lines (``bytes``; both with
    ``compression_type`` from the manifest) or a :class:`headrace.io.ParquetDataset` of rows;
    ``reader_options`` go to that reader (e.g. ``num_parallel_reads``).

    With ``verify_checksums=True`` every shard's size and SHA-256 are checked first (:func:`verify`).
    """
    m = verify(directory) if verify_checksums else load_manifest(directory)
    paths = shard_paths(directory, m)
    if m["output"]["format"] == "parquet":
        from ..io.parquet import ParquetDataset

        return ParquetDataset(paths, **reader_options)
    if m["output"]["format"] == "text":
        from ..io.text import TextLineDataset

        return TextLineDataset(paths, compression_type=m["output"]["compression"], **reader_options)
    from ..io.tfrecord import TFRecordDataset

    return TFRecordDataset(paths, compression_type=m["output"]["compression"], **reader_options)
