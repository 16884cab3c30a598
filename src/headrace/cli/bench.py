"""``headrace bench PATH``: how fast a pipeline reads a dataset, and how much memory it takes.

For TFRecord shards of image Examples (``image/encoded`` + ``image/class/label``, what ``headrace demo``
writes) it times the training input pipeline of :mod:`headrace.train.data` (interleaved reads, shuffle,
parallel decode + resize to ``image_size``, batches of ``batch_size``); for any other TFRecord it times
reading the raw records. It reports elements/s, MB/s of input, the pipeline's peak buffered bytes
(its byte accounting) and the process's peak RSS above the RSS before it started.
"""

from __future__ import annotations

import time
from typing import Any

import typer

from .._memory import format_bytes, parse_bytes
from .._options import Options
from ..train.data import IMAGE_KEY, find_tfrecords, image_classification_dataset
from ..train.memory import PeakRSS, release_free_memory, rss_bytes
from ._app import run


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


def run_bench(path: str, image_size: int = 96, batch_size: int = 64, memory_budget: str | int = "256MiB",
              seconds: float = 10.0, max_batches: int | None = None) -> dict[str, Any]:
    """Time the pipeline for at most ``seconds`` (and ``max_batches`` batches); returns the figures.

    Raises:
        FileNotFoundError: no TFRecord files at ``path``. ValueError: bad sizes, or no records.
    """
    from ..io.tfrecord import TFRecordDataset

    found = find_tfrecords(path)
    budget = parse_bytes(memory_budget)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be an int >= 1")
    images = _has_images(found[0])
    if images:
        ds = image_classification_dataset(found, image_size, training=True)
    else:
        ds = TFRecordDataset(found, num_parallel_reads=min(4, len(found)))
    ds = ds.batch(batch_size).prefetch(2).with_options(Options(memory_budget=budget))
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
        finally:
            it.close()
    elapsed = time.perf_counter() - t0
    if n_elements == 0:
        raise ValueError(f"{path}: the dataset is empty ({len(found)} file(s), 0 records)")
    return {"path": path, "pipeline": "decode+resize images" if images else "raw records",
            "elements": n_elements, "batches": n_batches, "seconds": round(elapsed, 3),
            "elements_per_s": round(n_elements / elapsed, 2), "first_batch_s": round(first_s or 0.0, 3),
            "pipeline_peak_bytes": stats["peak_bytes"], "memory_budget_bytes": budget,
            "peak_rss_above_base_bytes": peak.peak_bytes - base, "base_rss_bytes": base,
            "image_size": image_size if images else None, "batch_size": batch_size}


def _show(r: dict[str, Any]) -> None:
    typer.echo(f"{r['pipeline']}: {r['elements']:,} elements in {r['seconds']:.2f} s = "
               f"{r['elements_per_s']:,.1f} elements/s (first batch after {r['first_batch_s']:.2f} s)")
    typer.echo(f"pipeline peak {format_bytes(r['pipeline_peak_bytes'])} of the "
               f"{format_bytes(r['memory_budget_bytes'])} budget; process RSS peak base + "
               f"{format_bytes(r['peak_rss_above_base_bytes'])}")


def command(path: str = typer.Argument(..., help="TFRecord file, directory of shards or glob pattern."),
            image_size: int = typer.Option(96, help="Decode and resize images to this many pixels square."),
            batch_size: int = typer.Option(64, help="Elements per batch."),
            memory_budget: str = typer.Option("256MiB", help="The pipeline's memory budget, e.g. 256MiB."),
            seconds: float = typer.Option(10.0, help="Stop after this many seconds."),
            max_batches: int = typer.Option(0, help="Stop after this many batches (0: no limit).")) -> None:
    """Measure input pipeline throughput and peak memory on a dataset."""
    run(lambda: run_bench(path, image_size=image_size, batch_size=batch_size, memory_budget=memory_budget,
                          seconds=seconds, max_batches=max_batches or None), _show)
