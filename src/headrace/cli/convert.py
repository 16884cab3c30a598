"""``headrace convert SRC DST``: convert a dataset on Apache Beam (:mod:`headrace.convert`).

Like the other ``headrace`` commands it prints a human-readable summary, then one JSON line (the
manifest's summary); a user error prints ``headrace: error: ...`` on stderr and exits with status 1.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import typer

from .._memory import format_bytes
from ..convert.config import FORMATS
from ._app import run
from ._flags import IMAGE_SIZE_HELP, byte_size
from ._flags import image_size as image_size_flag


def command(
    ctx: typer.Context,
    src: str = typer.Argument(..., metavar="SRC", help="Image folder (class subfolders), or CSV / JSON Lines / "
                              "Parquet / TFRecord / text (.txt, a record per line) file(s): a file, directory or "
                              "glob; local or fsspec URL."),
    dst: str = typer.Argument(..., metavar="DST", help="Output directory (must be new or empty unless "
                                                       "--overwrite)."),
    to: Literal[FORMATS] = typer.Option("tfrecord", "--to",  # type: ignore[valid-type]
                           help="Output format: tf.train.Example records, Parquet columns, or text lines (the "
                                "records' single string feature, one a line)."),
    num_shards: int = typer.Option(None, "--num-shards", min=1, metavar="N", help="Exactly this many shards."),
    shard_size: str = typer.Option(None, "--shard-size", parser=byte_size, metavar="SIZE",
                                   help="About this many bytes per shard, e.g. 256MiB (the default)."),
    source_format: Literal["image_folder", "csv", "jsonl", "parquet", "tfrecord", "text"] = typer.Option(
        None, "--from", help="Source format (default: detected)."),
    runner: str = typer.Option("DirectRunner", "--runner", metavar="RUNNER",
                               help="Beam runner: DirectRunner, FlinkRunner, SparkRunner, PortableRunner, "
                                    "DataflowRunner."),
    beam_option: Annotated[list[str] | None, typer.Option(
        "--beam-option", metavar="KEY=VALUE",
        help="A Beam pipeline option (repeatable), e.g. flink_master=host:8081.")] = None,
    image_size: str = typer.Option(None, "--image-size", parser=image_size_flag, metavar="SIZE",
                                   help=f"Resize images to {IMAGE_SIZE_HELP} and re-encode them as JPEG."),
    max_rejected: int = typer.Option(0, "--max-rejected", min=0, metavar="N",
                                     help="Fail when more source rows than this are rejected."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a previous conversion in DST."),
    compression: str = typer.Option(None, "--compression", metavar="CODEC",
                                    help="TFRecord and text: GZIP or ZLIB; Parquet: SNAPPY (default), GZIP, ZSTD, "
                                         "NONE."),
    prefix: str = typer.Option("data", "--prefix", metavar="NAME", help="Shard file name prefix."),
    seed: int = typer.Option(0, "--seed", metavar="N", help="Seed of the record order inside and across shards."),
    label: str = typer.Option(None, "--label", metavar="FEATURE",
                              help="Feature to histogram in the manifest (default: image/class/label or label)."),
    verbose: bool = typer.Option(False, "--verbose", help="Show Apache Beam's log and its workers' output "
                                                          "(default: kept in a file named only if the run fails)."),
) -> None:
    """Convert a dataset to sharded TFRecord, Parquet or text lines on Apache Beam, with a dataset.json manifest."""

    def work() -> dict[str, Any]:
        from ..convert.pipeline import convert

        m = convert(src, dst, to=to, num_shards=num_shards, shard_size=shard_size, source_format=source_format,
                    image_size=image_size, max_rejected=max_rejected, overwrite=overwrite, compression=compression,
                    prefix=prefix, seed=seed, label=label, runner=runner, beam_options=beam_option or None,
                    verbose=verbose)
        return summary(m, dst)

    run(ctx, work, _show, extra_flags={"beam_options": "--beam-option"})


def summary(m: dict[str, Any], dst: str) -> dict[str, Any]:
    """The JSON line's fields: where, how many records / shards / bytes / rejected, and how fast."""
    seconds = m["converter"].get("seconds") or 0.0
    return {"dst": dst, "format": m["output"]["format"], "records": m["records"], "shards": len(m["shards"]),
            "bytes": m["bytes"], "rejected": m["rejected"], "seconds": seconds,
            "records_per_s": round(m["records"] / seconds, 1) if seconds else None,
            "features": sorted(m["features"])}


def _show(s: dict[str, Any]) -> None:
    from ..io.files import is_remote

    dst = s["dst"] if is_remote(s["dst"]) else s["dst"].rstrip("/")
    rate = f", {s['records_per_s']:,.1f} records/s" if s["records_per_s"] else ""
    typer.echo(f"{dst}: {s['records']:,} records in {s['shards']} {s['format']} shard(s), {format_bytes(s['bytes'])}, "
               f"{s['rejected']} rejected ({s['seconds']:.1f} s{rate}); manifest {dst}/dataset.json")
