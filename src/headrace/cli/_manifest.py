"""``headrace inspect`` on the output of ``headrace convert``: a directory with a ``dataset.json`` manifest
(or the manifest's path itself).

Everything comes from the manifest (:func:`headrace.convert.load_manifest`; no Apache Beam needed, no
record read): the feature spec, per-shard record counts, bytes and SHA-256, per-feature statistics and the
label histogram. Every shard is checked to exist with the recorded size; with ``verify=True`` also its
SHA-256 (:func:`headrace.convert.verify`, which reads every byte).
"""

from __future__ import annotations

import os
from typing import Any

MANIFEST = "dataset.json"


def manifest_of(path: str) -> str | None:
    """The manifest a local ``path`` means (``path`` itself if it is a ``dataset.json``, or
    ``path/dataset.json``), or ``None`` when there is none (a pattern, a data file, a directory without
    one)."""
    if any(c in path for c in "*?["):
        return None
    if os.path.basename(path.rstrip("/")) == MANIFEST:
        return path
    candidate = os.path.join(path, MANIFEST)
    return candidate if os.path.isdir(path) and os.path.isfile(candidate) else None


def _labels(m: dict[str, Any]) -> dict[str, Any] | None:
    """The first histogrammed feature: ``{"feature", "histogram" (label order), "class_names"}``."""
    for name, stats in m["statistics"].items():
        hist = stats.get("histogram")
        if hist is None:
            continue
        names = m["source"].get("class_names") or []
        order = sorted(hist, key=lambda v: (0, int(v)) if v.lstrip("-").isdigit() else (1, v))
        out = {"feature": name, "histogram": {v: hist[v] for v in order}}
        if names:
            out["class_names"] = names
        if stats.get("histogram_truncated"):
            out["truncated"] = True
        return out
    return None


def inspect_manifest(path: str, verify: bool = False) -> dict[str, Any]:
    """A JSON-friendly summary of the converted dataset whose manifest is at ``path``.

    Keys: ``format`` (``tfrecord`` / ``parquet``), ``manifest``, ``shards`` (``path``, ``records``,
    ``bytes``, ``sha256``), ``records``, ``bytes``, ``rejected``, ``features`` (the feature spec: ``type``,
    ``dtype``, ``shape``), ``statistics``, ``labels`` (see :func:`_labels`), ``source``, ``created``,
    ``converter``, ``checked`` (``"sizes"`` or ``"sha256"``).

    Raises:
        headrace.convert.ManifestError (a ``ValueError``): the manifest is unreadable or not a headrace
            manifest, or a shard is missing, has another size, or (``verify``) another SHA-256.
    """
    from ..convert import shard_paths
    from ..convert import verify as check

    m = check(path, checksums=verify)
    shards = [{"path": p, "records": s["records"], "bytes": s["bytes"], "sha256": s["sha256"]}
              for s, p in zip(m["shards"], shard_paths(path, m))]
    return {"format": m["output"]["format"], "manifest": manifest_of(path) or path, "shards": shards,
            "records": m["records"], "bytes": m["bytes"], "rejected": m.get("rejected", 0),
            "compression": m["output"].get("compression"), "features": m["features"],
            "statistics": m["statistics"], "labels": _labels(m), "source": m["source"],
            "created": m.get("created"), "converter": m.get("converter"),
            "checked": "sha256" if verify else "sizes"}


__all__ = ["inspect_manifest", "manifest_of"]
