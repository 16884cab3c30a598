"""The destination directory: refusing to overwrite, staging shards, and the atomic finish.

Protocol (what a reader can rely on):

1. Before the pipeline is built, an existing non-empty destination is refused unless ``overwrite``; with
   ``overwrite`` it may hold only what a conversion writes (shards, their indexes, ``dataset.json``,
   ``_rejected.jsonl``, staging folders), so a mistyped path never deletes unrelated files.
2. Workers write their sorted run files and every shard under ``DST/.staging-<run id>/``, with unique
   per-attempt names (a retried bundle never collides with a failed one).
3. :func:`finalize` runs once, after every shard is complete. It checks records in = records out, writes
   ``_rejected.jsonl`` and fails (deleting the staging folder) when more rows were rejected than allowed;
   otherwise it deletes the old manifest first (with ``overwrite``), then the old outputs, renames the
   new shards into place, and writes ``dataset.json`` last (to a temporary name, then renamed).

A run that fails before step 3 completes leaves no ``dataset.json`` pointing at partial shards.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from collections.abc import Iterable
from typing import Any

from .._errors import ConvertError
from ..io import files
from .config import ConvertConfig
from .manifest import FORMAT, MANIFEST, VERSION
from .schema import Schema
from .sinks import arrow_schema, shard_name, write_parquet, write_text, write_tfrecord

REJECTED = "_rejected.jsonl"
STAGING = ".staging-"
_OUTPUT_RE = re.compile(r"^[^/]+-\d{5}-of-\d{5}\.((tfrecord|txt)(\.gz|\.zlib)?|parquet)(\.idx)?$")


def is_output(name: str) -> bool:
    """Whether a file name is one a conversion writes."""
    return (name in (MANIFEST, REJECTED) or name.startswith((STAGING, MANIFEST + ".tmp-", REJECTED + ".tmp-"))
            or bool(_OUTPUT_RE.match(name)))


def check_destination(dst: str, overwrite: bool) -> None:
    """Step 1 of the protocol. Raises ``FileExistsError`` naming ``dst`` and the fix."""
    if files.exists(dst) and not files.is_remote(dst) and not os.path.isdir(files.local_path(dst)):
        raise FileExistsError(f"convert: the destination {dst} is a file; give a directory")
    names = files.listdir(dst)
    if not names:
        return
    if not overwrite:
        raise FileExistsError(f"convert: the destination {dst} exists and is not empty ({len(names)} entries, e.g. "
                              f"{names[0]!r}); pass --overwrite (overwrite=True) to replace a previous conversion, "
                              "or choose a new directory")
    foreign = [n for n in names if not is_output(n)]
    if foreign:
        raise FileExistsError(f"convert: --overwrite refused: {dst} holds files a conversion did not write "
                              f"({foreign[:5]}); only a previous conversion's output is replaced; choose an empty "
                              "or new directory")


def staging_dir(cfg: ConvertConfig) -> str:
    return files.join(cfg.dst, STAGING + cfg.run_id)


def write_shard(cfg: ConvertConfig, schema: Schema, shard: int, payloads: Iterable[Any],
                attempt: str) -> dict[str, Any]:
    """Write shard number ``shard`` (the payloads of :func:`headrace.convert.sinks.row_encoder`: records,
    Parquet rows or text lines, in order) into the staging folder.

    Returns the shard's entry for the manifest plus ``"tmp"`` / ``"index_tmp"`` (its staged paths).
    """
    n = cfg.shards
    name = shard_name(cfg.prefix, shard, n, cfg.to, cfg.compression)
    stage = staging_dir(cfg)
    files.makedirs(stage)
    tmp = files.join(stage, f"{name}.{attempt}")
    if cfg.to == "parquet":
        est = schema.est_bytes / max(1, schema.rows)
        info = write_parquet(tmp, payloads, arrow_schema(schema.kinds, schema.spec), cfg.compression, est)
    elif cfg.to == "text":
        info = write_text(tmp, payloads, cfg.compression)
    else:
        info = write_tfrecord(tmp, payloads, cfg.compression)
    return {"shard": shard, "path": name, "records": info["records"], "bytes": info["bytes"],
            "sha256": info["sha256"], "index": name + ".idx" if info["index"] else None, "tmp": tmp,
            "index_tmp": info["index"]}


def _first_clause(reason: str, limit: int = 300) -> str:
    """``reason`` up to its first ``"; "`` when it is longer than ``limit`` (the rest is advice); never cut
    inside a word. The whole reason is in ``_rejected.jsonl``."""
    if len(reason) <= limit:
        return reason
    head = reason.split("; ", 1)[0]
    if len(head) <= limit:
        return head
    return head[:limit].rsplit(" ", 1)[0] + " ..."


def finalize(cfg: ConvertConfig, schema: Schema, shards: Iterable[dict[str, Any]], rejected: Iterable[dict[str, str]],
             source: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Step 3 of the protocol; returns the manifest. Raises :class:`ConvertError` (too many rejected rows,
    no records at all, or shard counts that do not add up)."""
    rejected = sorted(rejected, key=lambda r: r["id"])
    stage = staging_dir(cfg)
    if len(rejected) > cfg.max_rejected:
        _write_rejected(cfg.dst, rejected)
        files.remove(stage)
        first = rejected[0]
        raise ConvertError(f"convert: {len(rejected)} source rows rejected, more than max_rejected="
                           f"{cfg.max_rejected} (e.g. {first['location']}: {_first_clause(first['reason'])}); every "
                           f"one is listed in {files.join(cfg.dst, REJECTED)}. Fix the source or raise max_rejected "
                           "(--max-rejected), then re-run with overwrite=True (--overwrite)")
    if schema.rows == 0:
        files.remove(stage)
        raise ConvertError(f"convert: the source {cfg.src} has no records; nothing was written")
    n = cfg.shards
    by_shard: dict[int, dict[str, Any]] = {}
    for s in shards:
        if s["shard"] in by_shard:
            raise ConvertError(f"convert: shard {s['path']} was written twice; the runner delivered duplicate "
                               "output: re-run the conversion")
        by_shard[s["shard"]] = s
    for i in range(n):  # a shard no record hashed to is written empty, so the names stay complete
        if i not in by_shard:
            by_shard[i] = write_shard(cfg, schema, i, [], f"empty-{cfg.run_id}")
    entries = [by_shard[i] for i in range(n)]
    total = sum(s["records"] for s in entries)
    if total != schema.rows:
        raise ConvertError(f"convert: {total} records were written but {schema.rows} were read; the output is "
                           "incomplete and was not published: re-run the conversion")
    _replace_old_outputs(cfg.dst, keep=stage, keep_names={s["path"] for s in entries if not files.exists(s["tmp"])})
    for s in entries:
        final = files.join(cfg.dst, s["path"])
        if not files.exists(s["tmp"]) and files.exists(final) and files.file_size(final) == s["bytes"]:
            continue  # renamed by an earlier attempt of this step that a runner retried
        if s["index_tmp"]:
            files.rename(s["index_tmp"], final + ".idx")
        files.rename(s["tmp"], final)
    if rejected:
        _write_rejected(cfg.dst, rejected)
    manifest = {
        "format": FORMAT, "version": VERSION,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "source": source,
        "output": {"format": cfg.to, "compression": cfg.compression, "prefix": cfg.prefix, "seed": cfg.seed},
        "records": total, "bytes": sum(s["bytes"] for s in entries), "rejected": len(rejected),
        "rejected_file": REJECTED if rejected else None, "features": schema.spec, "statistics": schema.stats,
        "shards": [{k: s[k] for k in ("path", "records", "bytes", "sha256", "index")} for s in entries],
        "converter": extra or {},
    }
    files.write_atomic(files.join(cfg.dst, MANIFEST), (json.dumps(manifest, indent=1) + "\n").encode("utf-8"))
    files.remove(stage)
    return manifest


def _write_rejected(dst: str, rejected: list[dict[str, str]]) -> None:
    files.makedirs(dst)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rejected)
    files.write_atomic(files.join(dst, REJECTED), text.encode("utf-8"))


def _replace_old_outputs(dst: str, keep: str, keep_names: set[str]) -> None:
    """Delete a previous conversion's files: the manifest first, so none ever points at missing shards.
    ``keep`` (the staging folder) and ``keep_names`` (shards already published by a retried attempt, and
    their indexes) stay."""
    files.remove(files.join(dst, MANIFEST))
    keep_name = keep.rstrip("/").rsplit("/", 1)[-1].rsplit("\\", 1)[-1]
    kept = keep_names | {n + ".idx" for n in keep_names}
    for name in files.listdir(dst):
        if name != keep_name and name not in kept and is_output(name):
            files.remove(files.join(dst, name))
