"""``headrace inspect PATH... [--verify]``: what a dataset on disk holds, without loading it.

Formats, detected from the path: TFRecord (``*.tfrecord``, ``*.tfrecords``, ``*.tfrec``, optionally
``.gz`` / ``.zlib``; records counted by reading the framing, features from the first ``sample``
``tf.train.Example`` records), Parquet (``*.parquet``; from the footer), HDF5 (``*.h5``, ``*.hdf5``;
datasets and shapes) and image folders (a directory of class sub-directories of images). The output of
``headrace convert`` (a directory with a ``dataset.json`` manifest) is described from its manifest
(:mod:`headrace.cli._manifest`).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

import typer

from .._deps import require
from .._memory import format_bytes
from ..image.formats import IMAGE_EXTENSIONS
from ..io import files
from ._app import run
from ._datasets import COMPRESSED, detect, detect_all


def _example_features(records: list[bytes]) -> dict[str, dict[str, Any]] | None:
    """The ``tf.train.Example`` feature spec the sampled ``records`` imply, as ``headrace convert`` writes it
    in its manifest: ``FixedLenFeature`` shape ``[]`` when every record has exactly one value, ``[k]`` when
    every record has ``k``, else ``VarLenFeature`` (``lengths``: the fewest and most values seen); plus
    ``in_records``, how many of the records have the feature. ``None``: the records are not Examples."""
    from ..io.example import decode

    out: dict[str, dict[str, Any]] = {}
    for record in records:
        try:
            feats = decode(record)
        except ValueError:
            return None
        for key, values in feats.items():
            kind = "string" if values.dtype == object else str(values.dtype)
            entry = out.setdefault(key, {"dtype": kind, "min_len": len(values), "max_len": len(values),
                                         "present": 0})
            entry["min_len"] = min(entry["min_len"], len(values))
            entry["max_len"] = max(entry["max_len"], len(values))
            entry["present"] += 1
    for key, entry in out.items():
        lo, hi, present = entry.pop("min_len"), entry.pop("max_len"), entry.pop("present")
        if lo == hi and present == len(records):
            out[key] = {"type": "FixedLenFeature", "dtype": entry["dtype"], "shape": [] if lo == 1 else [lo]}
        else:
            out[key] = {"type": "VarLenFeature", "dtype": entry["dtype"], "lengths": f"{lo}..{hi}"}
        out[key]["in_records"] = f"{present}/{len(records)}"
    return out


def _inspect_tfrecord(found: list[str], sample: int) -> dict[str, Any]:
    from ..io.tfrecord import TFRecordDataset

    shards: list[dict[str, Any]] = []
    first: list[Any] = []
    for f in found:
        low = f.lower()
        compression = next((c for s, c in COMPRESSED.items() if low.endswith(s)), None)
        n = 0
        for record in TFRecordDataset(f, compression_type=compression):
            if len(first) < sample:
                first.append(record)
            n += 1
        shards.append({"path": f, "records": n, "bytes": files.file_size(f), "compression": compression})
    features = _example_features(first) if first else None
    return {"format": "tfrecord", "shards": shards, "records": sum(s["records"] for s in shards),
            "bytes": sum(s["bytes"] for s in shards),
            "features": features if features is not None else "records are not tf.train.Example (raw bytes)",
            "features_from_records": len(first)}


def _inspect_parquet(found: list[str]) -> dict[str, Any]:
    pq = require("pyarrow.parquet", "headrace inspect (Parquet)")

    shards: list[dict[str, Any]] = []
    schema: dict[str, str] = {}
    for f in found:
        meta = pq.ParquetFile(f)
        schema = schema or {field.name: str(field.type) for field in meta.schema_arrow}
        shards.append({"path": f, "records": meta.metadata.num_rows, "row_groups": meta.num_row_groups,
                       "bytes": files.file_size(f)})
    return {"format": "parquet", "shards": shards, "records": sum(s["records"] for s in shards),
            "bytes": sum(s["bytes"] for s in shards), "features": {k: {"dtype": v} for k, v in schema.items()}}


def _inspect_hdf5(found: list[str]) -> dict[str, Any]:
    h5py = require("h5py", "headrace inspect (HDF5)")
    from ..io.hdf5 import damaged_metadata, dataset_names

    shards: list[dict[str, Any]] = []
    features: dict[str, Any] = {}
    for f in found:
        with h5py.File(f, "r") as h:
            names = dataset_names(h, f)
            with damaged_metadata(f, f"the datasets {names}"):
                for name in names:
                    d = h[name]
                    features.setdefault(name, {"dtype": str(d.dtype), "shape": list(d.shape[1:])})
                rows = {h[n].shape[0] for n in names if h[n].shape}
        shards.append({"path": f, "records": max(rows) if rows else 0, "bytes": files.file_size(f)})
    return {"format": "hdf5", "shards": shards, "records": sum(s["records"] for s in shards),
            "bytes": sum(s["bytes"] for s in shards), "features": features}


def _inspect_image_folder(root: str) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    total = 0
    for cls in sorted(os.listdir(root)):
        d = os.path.join(root, cls)
        if not os.path.isdir(d) or cls.startswith("."):
            continue
        for f in os.listdir(d):
            if f.lower().endswith(IMAGE_EXTENSIONS):
                counts[cls] += 1
                total += os.path.getsize(os.path.join(d, f))
    return {"format": "image_folder", "shards": [{"path": root, "records": sum(counts.values()),
                                                   "bytes": total}],
            "records": sum(counts.values()), "bytes": total, "classes": dict(counts),
            "features": {"image": {"dtype": "string (encoded image)"}, "label": {"dtype": "int64",
                                                                               "shape": []}}}


def inspect_path(path: str | Sequence[str], sample: int = 100, verify: bool = False) -> dict[str, Any]:
    """A JSON-friendly summary of the dataset at ``path`` (module docstring); errors as :func:`detect`.

    ``path`` may be several paths of one dataset (files of one format: what the shell passes for an
    unquoted glob pattern, :func:`~headrace.cli._datasets.detect_all`); the summary's ``path`` then names
    the first and the last and how many.

    A directory written by ``headrace convert`` (or its ``dataset.json``) is described from its manifest
    (:func:`headrace.cli._manifest.inspect_manifest`); ``verify`` checks its shards' SHA-256.

    Raises:
        ValueError: the dataset has no records (an empty dataset), ``verify`` without a manifest, a
            manifest that does not match its shards (``headrace.convert.ManifestError``), besides
            :func:`detect`'s errors.
    """
    from ._manifest import inspect_manifest, manifest_of

    paths = [path] if isinstance(path, str) else list(path)
    if len(paths) > 1:
        shown = f"{paths[0]} ... {paths[-1]} ({len(paths)} paths)"
        if verify:
            raise ValueError(f"{shown}: --verify checks one headrace convert output directory; give its path")
        kind, found = detect_all(paths)
        out = _inspect(kind, found, sample)
        out["path"] = shown
        return _not_empty(out, found, kind)
    path = paths[0]
    if manifest_of(path) is not None:
        out = inspect_manifest(path, verify=verify)
        kind, found = out["format"], out["shards"]
    elif verify:
        raise ValueError(f"{path}: --verify checks shards against the SHA-256 sums in a dataset.json manifest "
                         "(written by headrace convert) and there is none here; inspect without --verify")
    else:
        kind, found = detect(path)
        out = _inspect(kind, found, sample)
    out["path"] = path
    return _not_empty(out, found, kind)


def _inspect(kind: str, found: list[str], sample: int) -> dict[str, Any]:
    if kind == "tfrecord":
        return _inspect_tfrecord(found, sample)
    if kind == "parquet":
        return _inspect_parquet(found)
    if kind == "hdf5":
        return _inspect_hdf5(found)
    return _inspect_image_folder(found[0])


def _not_empty(out: dict[str, Any], found: list[str], kind: str) -> dict[str, Any]:
    if out["records"] == 0:
        raise ValueError(f"{out['path']}: the dataset is empty ({len(found)} {kind} file(s), 0 records)")
    return out


def _show(r: dict[str, Any]) -> None:
    typer.echo(f"{r['path']}: {r['format']}, {len(r['shards'])} shard(s), {r['records']:,} records, "
               f"{format_bytes(r['bytes'])}")
    if r.get("manifest"):
        _show_manifest(r)
        return
    features = r.get("features")
    if isinstance(features, dict):
        for key, f in features.items():
            words = [f.get("type"), f.get("dtype"), f.get("shape")]
            if "lengths" in f:
                words.append(f"({f['lengths']} values per record)")
            if "in_records" in f and f["in_records"].partition("/")[0] != f["in_records"].partition("/")[2]:
                words.append(f"(in {f['in_records']} records)")
            typer.echo(f"  {key}: " + " ".join(str(w) for w in words if w is not None))
    elif features:
        typer.echo(f"  {features}")
    for cls, n in (r.get("classes") or {}).items():
        typer.echo(f"  class {cls}: {n} images")


def _show_manifest(r: dict[str, Any]) -> None:
    """The lines of a ``headrace convert`` output: manifest, shards, feature spec with statistics, labels."""
    src = r["source"]
    compression = r["compression"] or ("SNAPPY" if r["format"] == "parquet" else "none")
    typer.echo(f"  manifest {r['manifest']} (created {r['created']}): from {src.get('kind')} {src.get('path')}, "
               f"{r['rejected']} rejected; compression {compression}")
    counts = [s["records"] for s in r["shards"]]
    sizes = [s["bytes"] for s in r["shards"]]
    typer.echo(f"  shards: {min(counts):,}..{max(counts):,} records, {format_bytes(min(sizes))}.."
               f"{format_bytes(max(sizes))} each")
    for key, f in r["features"].items():
        st = r["statistics"].get(key, {})
        nums = f" (min {st['min']}, max {st['max']}, mean {st['mean']:.4g})" if "mean" in st else ""
        missing = f", missing in {st['missing']:,} records" if st.get("missing") else ""
        typer.echo(f"  {key}: {f.get('type')} {f.get('dtype')} {f.get('shape')}{nums}{missing}")
    labels = r.get("labels")
    if labels:
        names = labels.get("class_names") or []
        for value, n in labels["histogram"].items():
            name = f" ({names[int(value)]})" if value.isdigit() and int(value) < len(names) else ""
            typer.echo(f"  {labels['feature']} = {value}{name}: {n:,} records")
    checked = ("sizes and SHA-256 match the manifest" if r["checked"] == "sha256" else
               "sizes match the manifest (--verify also checks SHA-256)")
    typer.echo(f"  shards: all {len(r['shards'])} present, {checked}")


def command(ctx: typer.Context,
            paths: list[str] = typer.Argument(..., metavar="PATH", help="A dataset file, directory or glob "
                                              "pattern, or several files of one dataset (an unquoted glob the "
                                              "shell expanded); a headrace convert output directory is read "
                                              "from its dataset.json."),
            sample: int = typer.Option(100, min=1, metavar="N",
                                       help="Records read to describe tf.train.Example features."),
            verify: bool = typer.Option(False, "--verify", help="headrace convert output: check every shard's "
                                                                "SHA-256 against dataset.json (reads all bytes).")
            ) -> None:
    """Describe a dataset: format, shards, records, feature keys with dtypes and shapes, bytes (for headrace
    convert output: the manifest's feature spec, statistics and label histogram)."""
    run(ctx, lambda: inspect_path(paths, sample=sample, verify=verify), _show)
