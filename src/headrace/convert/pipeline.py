"""``build_pipeline`` and ``convert``: a source dataset -> sharded TFRecord or Parquet + ``dataset.json``,
on Apache Beam (DirectRunner on one machine; Flink, Spark or Dataflow unchanged)."""

from __future__ import annotations

import difflib
import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..io.files import remove
from ._beam import beam_output, import_beam
from .config import ConvertConfig
from .manifest import load_manifest
from .output import ConvertError, check_destination, staging_dir
from .sources import open_source

SMALL_SOURCE_BYTES = 64 * 2**20
"""A source estimated below this size is converted in one in-process worker by default (DirectRunner): on
small inputs starting worker processes (~3 s) costs more than the second core wins back."""


def pipeline_options(runner: str | None = "DirectRunner",
                     beam_options: Sequence[str] | Mapping[str, Any] | None = None,
                     source_bytes: int | None = None) -> Any:
    """Beam ``PipelineOptions`` for ``runner`` plus ``beam_options`` (``["key=value", ...]`` or a dict;
    ``--flink_master=host:8081`` style flags work too).

    DirectRunner defaults to ``direct_num_workers`` = the machine's cores in ``multi_processing`` mode,
    workers logging errors only; for a source of fewer than ``SMALL_SOURCE_BYTES`` (``source_bytes``, the
    source's estimate) one in-process worker (``direct_running_mode=in_memory``). Override any through
    ``beam_options``. Raises ``ValueError`` for an option that is not ``key=value`` or not a Beam option
    (naming the closest ones: Beam itself would drop it silently).
    """
    beam = import_beam()
    items: list[tuple[str, str]] = []
    if isinstance(beam_options, Mapping):
        items = [(str(k), str(v)) for k, v in beam_options.items()]
    else:
        for opt in beam_options or ():
            key, sep, value = str(opt).lstrip("-").partition("=")
            if not sep or not key:
                raise ValueError(f"beam option {opt!r} is not key=value (e.g. flink_master=localhost:8081)")
            items.append((key, value))
    given = dict(items)
    known = beam.options.pipeline_options.PipelineOptions([]).get_all_options()
    for key in given:
        if key not in known:
            near = difflib.get_close_matches(key, list(known), n=3)
            raise ValueError(f"beam option {key!r} is not a Beam pipeline option"
                             + (f"; did you mean {', '.join(near)}?" if near else
                                " (see python -m apache_beam.options.pipeline_options --help)"))
    runner = given.pop("runner", None) or runner or "DirectRunner"
    flags = [f"--runner={runner}"]
    if runner in ("DirectRunner", "direct"):
        if source_bytes is not None and source_bytes < SMALL_SOURCE_BYTES and \
                not {"direct_num_workers", "direct_running_mode"} & set(given):
            given.update(direct_num_workers="1", direct_running_mode="in_memory")
        given.setdefault("direct_num_workers", str(os.cpu_count() or 1))
        given.setdefault("direct_running_mode", "multi_processing")
        given.setdefault("default_sdk_harness_log_level", "ERROR")  # the workers' start-up chatter
    flags += [f"--{k}={v}" for k, v in given.items()]
    return beam.options.pipeline_options.PipelineOptions(flags)


def build_pipeline(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, to: str = "tfrecord",
                   num_shards: int | None = None, shard_size: int | str | None = None,
                   source_format: str | None = None, image_size: tuple[int, int] | str | None = None,
                   quality: int = 95, max_rejected: int = 0, overwrite: bool = False, compression: str | None = None,
                   prefix: str = "data", seed: int = 0, label: str | None = None, runner: str | None = "DirectRunner",
                   beam_options: Sequence[str] | Mapping[str, Any] | None = None, options: Any = None,
                   pipeline: Any = None) -> Any:
    """The Beam pipeline that converts ``src`` into shards in ``dst`` (not run yet: call ``.run()``).

    Args:
        src: an image folder (class subfolders), CSV / JSON Lines / Parquet / TFRecord file(s): a file, a
            directory or a glob; local or an fsspec URL (:mod:`headrace.convert.sources`).
        dst: the output directory (local or fsspec URL reachable from every worker).
        to: ``"tfrecord"`` (``tf.train.Example`` records, a ``.idx`` index per uncompressed shard) or
            ``"parquet"`` (one column per feature).
        num_shards: exactly this many shards (1..99999); or ``shard_size``: about this many bytes per
            shard (int or ``"256MiB"``, the default), from the records' estimated size.
        source_format: ``image_folder``, ``csv``, ``jsonl``, ``parquet``, ``tfrecord`` or ``text``; default:
            detected.
        image_size: image folders only: resize to ``(width, height)`` (or ``"WxH"``) and re-encode as JPEG
            at ``quality``.
        max_rejected: the run fails (no manifest is published) when more source rows than this are
            rejected; every rejected row is listed in ``dst/_rejected.jsonl`` either way.
        overwrite: replace an existing conversion in ``dst`` (a non-empty ``dst`` is refused otherwise).
        compression: TFRecord ``"GZIP"`` / ``"ZLIB"`` (no index then); Parquet ``"SNAPPY"`` (default),
            ``"GZIP"``, ``"ZSTD"``, ``"NONE"``.
        prefix: shard file name prefix. seed: seed of the record order (records are spread over shards
            and ordered in them by a seeded hash of their source ID). label: the feature to histogram
            (default ``image/class/label`` for images, ``label`` for tables).
        runner, beam_options: see :func:`pipeline_options`; or pass ready ``options`` (PipelineOptions).
        pipeline: an existing ``beam.Pipeline`` to add the conversion to (then runner options are ignored).

    Returns:
        The ``beam.Pipeline``; its ``converted`` attribute is the one-element ``PCollection`` of the
        manifest, ``convert_staging`` the staging folder (removed by a successful run; delete it after a
        failed one). For your own pipelines, :class:`headrace.convert.ConvertTransform` is the same as a
        ``PTransform``.

    Raises:
        ImportError: Apache Beam is not installed (``pip install 'headrace[beam]'``).
        FileExistsError: ``dst`` is not empty and ``overwrite`` is false, or holds foreign files.
        FileNotFoundError / ValueError: a missing source, an unknown format, a bad setting (named).
    """
    beam = import_beam()
    from ._pipeline import ConvertTransform

    cfg = ConvertConfig(src=os.fspath(src), dst=os.fspath(dst), to=to, num_shards=num_shards, shard_size=shard_size,
                        source_format=source_format, image_size=image_size, quality=quality,
                        max_rejected=max_rejected, overwrite=overwrite, compression=compression, prefix=prefix,
                        seed=seed, label=label)
    check_destination(cfg.dst, cfg.overwrite)
    source = open_source(cfg.src, cfg.source_format, **cfg.source_options())
    if pipeline is None:
        if options is None:
            options = pipeline_options(runner, beam_options, source_bytes=source.estimate_bytes())
        pipeline = beam.Pipeline(options=options)
    from .. import __version__

    extra = {"headrace": __version__, "apache_beam": beam.__version__,
             "runner": type(pipeline.runner).__name__ if getattr(pipeline, "runner", None) else str(runner),
             "shard_size": cfg.shard_size}
    pipeline.converted = pipeline | f"Convert {cfg.run_id}" >> ConvertTransform(cfg, source, extra)
    pipeline.convert_staging = staging_dir(cfg)
    return pipeline


_WORKER_ERROR = re.compile(r"(?:ConvertError|SchemaConflictError|ManifestError): (convert: .*?|feature .*?)(?:\n|"
                           r" \[while running|$)", re.S)


def convert(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, verbose: bool = False,
            **kwargs: Any) -> dict[str, Any]:
    """Build the pipeline (same arguments as :func:`build_pipeline`), run it to the end and return the
    manifest (``dst/dataset.json``), with ``seconds`` (wall time) in its ``converter`` entry. Whatever
    happens, the staging folder (run files, unpublished shards) is removed.

    Apache Beam's log lines and its worker processes' output (start-up warnings about Google Cloud clients
    that are not used, harness chatter) go to a temporary file while it runs, which a failure's note names
    (:func:`headrace.convert._beam.beam_output`); ``verbose=True`` leaves them on the terminal.

    Raises:
        ConvertError: too many rejected rows, an empty source, or a feature with strings and numbers (the
            worker's message, not the runner's traceback); other worker errors propagate as the runner
            raises them. Plus :func:`build_pipeline`'s errors.
    """
    t0 = time.perf_counter()
    with beam_output(verbose):
        return _run(build_pipeline(src, dst, **kwargs), dst, t0)


def _run(p: Any, dst: str | os.PathLike[str], t0: float) -> dict[str, Any]:
    try:
        try:
            p.run().wait_until_finish()
        finally:
            remove(p.convert_staging)  # a failed run leaves no run files or partial shards behind
    except ConvertError as e:  # SchemaConflictError included: raised as is by the in-process runner
        text = str(e).split(" [while running")[0]  # Beam appends the step's name to the message
        if text == str(e):
            raise
        raise type(e)(text) from e
    except Exception as e:  # other runners wrap a worker's exception in their own, with its text
        m = _WORKER_ERROR.search(str(e))
        if m:
            raise ConvertError(m.group(1).split(" [while running")[0].strip()) from e
        raise
    manifest = load_manifest(dst)
    manifest["converter"]["seconds"] = round(time.perf_counter() - t0, 3)
    return manifest
