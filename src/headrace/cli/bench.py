"""``headrace bench PATH``: how fast a pipeline reads a dataset, and how much memory it takes.

For TFRecord shards of image Examples (``image/encoded`` + ``image/class/label``, what ``headrace demo``
writes) it times the training input pipeline of :mod:`headrace.train.data` (interleaved reads, shuffle,
parallel decode + resize to ``image_size``, batches of ``batch_size``); for any other TFRecord it times
reading the raw records. The data is repeated until ``--seconds`` have passed (or ``--max-batches``). It
reports images/s (records/s for raw records) and batches/s, the pipeline's peak buffered bytes (its byte
accounting) and the process's peak RSS above the RSS before it started.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import typer

from .._args import image_hw
from .._memory import format_bytes, parse_bytes
from ._app import run
from ._datasets import training_shards
from ._flags import IMAGE_SIZE_HELP, check_batch_budget, memory_size, positive, size_text, training_image_size

IMAGE_KEY = "image/encoded"


def _has_images(first_file: str) -> bool:
    from ..io.example import decode
    from ..io.tfrecord import TFRecordDataset

    it = iter(TFRecordDataset(first_file))
    try:
        record = next(it, None)
    finally:
        it.close()
    if record is None:
        return False
    try:
        return IMAGE_KEY in decode(record)
    except ValueError:
        return False


def run_bench(path: str, image_size: int | tuple[int, int] = 96, batch_size: int = 64,
              memory_budget: int | str = 256 * 2**20, seconds: float = 10.0, max_batches: int | None = None,
              explain: bool = False, on_corrupt: str = "raise") -> dict[str, Any]:
    """Time the pipeline for ``seconds`` (repeating the data as often as needed), or until ``max_batches``
    batches; returns the figures (with ``explain``: also ``plan``, the pipeline's ``Iterator.explain()``
    taken at the end: settings and why, per-stage rates and shares, the bottleneck). ``on_corrupt``:
    ``"raise"`` or ``"skip"`` undecodable images and corrupt records; ``skipped_records`` counts the
    distinct records skipped.

    Raises:
        FileNotFoundError: no TFRecord files at ``path``. ValueError: not TFRecord shards, or no records.
        DataLossError: a corrupt record or undecodable image (``on_corrupt="raise"``), naming the shard and
            byte offset.
    """
    found = training_shards(path, "bench")
    budget = parse_bytes(memory_budget, "memory_budget")
    hw = image_hw(image_size)
    if "://" not in found[0]:
        images = _has_images(found[0])
        if images:
            check_batch_budget(budget, 1.0, batch_size, hw, "the pipeline")
    from .._options import Options
    from ..io.tfrecord import TFRecordDataset
    from ..train.data import CorruptRecords, find_tfrecords, image_classification_dataset
    from ..train.memory import PeakRSS, release_free_memory, rss_bytes

    if "://" in found[0]:
        found = find_tfrecords(found[0])
        images = _has_images(found[0])
    corrupt = CorruptRecords()
    if images:
        ds = image_classification_dataset(found, hw, training=True, on_corrupt=on_corrupt, corrupt=corrupt)
    else:
        ds = corrupt.watch(TFRecordDataset(found, num_parallel_reads=min(4, len(found)), on_corrupt=on_corrupt))
    ds = ds.repeat().batch(batch_size).prefetch(2).with_options(Options(memory_budget=memory_budget))
    release_free_memory()
    base = rss_bytes()
    n_elements = n_batches = 0
    t0 = time.perf_counter()
    first_s = None
    with PeakRSS() as peak:
        it = iter(ds)
        try:
            for batch in it:
                if first_s is None:
                    first_s = time.perf_counter() - t0
                n_batches += 1
                n_elements += len(batch[1]) if images else len(batch)
                if time.perf_counter() - t0 >= seconds or (max_batches and n_batches >= max_batches):
                    break
            stats = it.memory_stats()
            plan = it.explain() if explain else None
            if plan is not None:
                plan["output_unit"] = "batches"  # what the pipeline's last stage hands out
        finally:
            it.close()
    elapsed = time.perf_counter() - t0
    if n_elements == 0:
        raise ValueError(f"{path}: the dataset is empty ({len(found)} file(s), 0 records)")
    return {"path": path, "pipeline": "decode+resize images" if images else "raw records",
            "unit": "images" if images else "records", "elements": n_elements, "batches": n_batches,
            "seconds": round(elapsed, 3),
            "elements_per_s": round(n_elements / elapsed, 2), "first_batch_s": round(first_s or 0.0, 3),
            "pipeline_peak_bytes": stats["peak_bytes"], "memory_budget_bytes": budget,
            "peak_rss_above_base_bytes": peak.peak_bytes - base, "base_rss_bytes": base,
            "image_size": size_text(hw) if images else None, "batch_size": batch_size,
            "skipped_records": len(corrupt.records()),
            **({"plan": plan} if plan is not None else {})}


def _show(r: dict[str, Any]) -> None:
    unit = r["unit"]
    batches_per_s = r["batches"] / max(r["seconds"], 1e-9)
    typer.echo(f"{r['pipeline']}: {r['elements']:,} {unit} in {r['batches']:,} batches of up to {r['batch_size']} "
               f"in {r['seconds']:.2f} s = {r['elements_per_s']:,.1f} {unit}/s, {batches_per_s:,.1f} batches/s "
               f"(first batch after {r['first_batch_s']:.2f} s)")
    typer.echo(f"pipeline peak {format_bytes(r['pipeline_peak_bytes'])} of the "
               f"{format_bytes(r['memory_budget_bytes'])} budget; process RSS peak base + "
               f"{format_bytes(r['peak_rss_above_base_bytes'])}")
    if "plan" in r:
        typer.echo(str(r["plan"]))


def command(ctx: typer.Context,
            path: str = typer.Argument(..., metavar="PATH", help="TFRecord file, directory of shards or glob "
                                                                 "pattern; headrace convert output."),
            image_size: str = typer.Option("96", parser=training_image_size, metavar="SIZE",
                                           help=f"Decode and resize images to {IMAGE_SIZE_HELP}."),
            batch_size: int = typer.Option(64, min=1, metavar="N", help="Images (or records) per batch."),
            memory_budget: str = typer.Option("256MiB", parser=memory_size, metavar="SIZE",
                                              help="The pipeline's memory budget, e.g. 256MiB."),
            seconds: float = typer.Option(10.0, parser=positive, metavar="S",
                                          help="Run this long (the data is repeated as often as needed)."),
            max_batches: int = typer.Option(0, min=0, metavar="N", help="Stop after this many batches (0: no "
                                                                        "limit)."),
            explain: bool = typer.Option(False, "--explain", help="Print the pipeline's plan at the end: each "
                                         "stage's settings and why (AUTOTUNE), its rate, its share of time "
                                         "computing / waiting, the bytes it holds, and the bottleneck."),
            on_corrupt: Literal["raise", "skip"] = typer.Option(
                "raise", help="At an undecodable image or corrupt record: stop, or skip it (warned, counted).")
            ) -> None:
    """Measure input pipeline throughput and peak memory on a dataset."""
    run(ctx, lambda: run_bench(path, image_size=image_size, batch_size=batch_size,  # type: ignore[arg-type]
                               memory_budget=memory_budget, seconds=seconds,
                               max_batches=max_batches or None, explain=explain, on_corrupt=on_corrupt), _show)
