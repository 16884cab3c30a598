"""Benchmark ``headrace convert``: an image folder of real-photo JPEGs -> sharded TFRecord on Beam's
DirectRunner with 2 worker processes.

Converts a quarter of the images, then all of them, and prints records/s and MB/s (source JPEG bytes per
second) of the full run (wall time, pipeline start-up included), the steady-state rate (the extra images
over the extra time: start-up excluded) and the fixed start-up cost. For scale it measures the bare limit
of the same machine: every image read and checked as the converter checks it (a 1/8-scale DCT decode
that proves the JPEG is not broken) in 2 processes with nothing else. Writes ``bench/results/convert.json``.

Target: the steady-state rate reaches at least half of that bare read+decode limit (the rest is Beam's
data plane, the run files, encoding, writing and hashing). Also prints the peak RSS of the runner and of
the largest worker process (the spawned bare-limit pool counts among the children too). The machine is
shared: run it twice.

    python bench/convert.py [--images 8000] [--workers 2] [--shards 8]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

from headrace._machine import machine_line

TARGET_FRACTION_OF_BARE = 0.5


def _decode_files(paths: list[str]) -> int:
    from headrace.convert.sources.images import _checked_shape

    for p in paths:
        with open(p, "rb") as f:
            _checked_shape(f.read(), "jpeg", p)  # the converter's own check (1/8-scale DCT decode)
    return len(paths)


def bare_limit(paths: list[str], workers: int) -> float:
    """Images/s for read + decode alone in ``workers`` processes."""
    chunks = [paths[i::workers] for i in range(workers)]
    with mp.get_context("spawn").Pool(workers) as pool:
        pool.map(_decode_files, [c[:20] for c in chunks])  # warm up imports
        t0 = time.perf_counter()
        n = sum(pool.map(_decode_files, chunks))
        return n / (time.perf_counter() - t0)


def _convert(src: Path, dst: Path, workers: int, shards: int) -> dict:
    from headrace.convert import convert

    return convert(src, dst, num_shards=shards,
                   beam_options=[f"direct_num_workers={workers}", "direct_running_mode=multi_processing"])


def _quarter(src: Path, dst: Path, paths: list[str]) -> int:
    """Hard-link every 4th image into ``dst`` (same class folders); returns their bytes."""
    n = 0
    for p in paths[::4]:
        target = dst / Path(p).relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(p, target)
        n += os.path.getsize(p)
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=8000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--keep", help="Keep the source folder here (reused when it exists).")
    args = ap.parse_args()
    print(machine_line(), flush=True)

    from headrace.image.photos import make_photo_jpegs

    work = Path(tempfile.mkdtemp(prefix="hr-convert-bench-"))
    src = Path(args.keep) if args.keep else work / "src"
    if not src.exists():
        t0 = time.perf_counter()
        make_photo_jpegs(src, args.images, size=(500, 375), seed=0)
        print(f"made {args.images} JPEGs (500x375) in {time.perf_counter() - t0:.1f} s -> {src}")
    paths = sorted(str(p) for p in src.rglob("*.jpg"))
    src_bytes = sum(os.path.getsize(p) for p in paths)
    try:
        bare = bare_limit(paths, args.workers)
        _quarter(src, work / "small", paths)
        small = _convert(work / "small", work / "out-small", args.workers, args.shards)
        m = _convert(src, work / "out", args.workers, args.shards)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seconds, t_small = m["converter"]["seconds"], small["converter"]["seconds"]
    steady = (m["records"] - small["records"]) / max(1e-9, seconds - t_small)
    result = {
        "images": m["records"], "workers": args.workers, "shards": len(m["shards"]), "seconds": seconds,
        "records_per_s": round(m["records"] / seconds, 1), "source_mb_per_s": round(src_bytes / seconds / 1e6, 2),
        "steady_records_per_s": round(steady, 1),
        "steady_source_mb_per_s": round(steady * src_bytes / len(paths) / 1e6, 2),
        "startup_s": round(t_small - small["records"] / steady, 2), "source_bytes": src_bytes,
        "bare_read_decode_per_s": round(bare, 1), "steady_fraction_of_bare": round(steady / bare, 3),
        "target_fraction_of_bare": TARGET_FRACTION_OF_BARE, "cpus": os.cpu_count(),
        "apache_beam": m["converter"]["apache_beam"],
        "peak_rss_runner_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_rss_largest_worker_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
    }
    ok = result["steady_fraction_of_bare"] >= TARGET_FRACTION_OF_BARE
    print(f"convert {result['images']} images ({src_bytes / 1e6:.0f} MB) -> {result['shards']} TFRecord shards with "
          f"{args.workers} workers: {seconds:.1f} s = {result['records_per_s']:.1f} records/s, "
          f"{result['source_mb_per_s']:.1f} MB/s (start-up included)")
    print(f"steady state: {result['steady_records_per_s']:.1f} records/s, {result['steady_source_mb_per_s']:.1f} MB/s; "
          f"start-up about {result['startup_s']:.1f} s")
    print(f"peak RSS: runner {result['peak_rss_runner_bytes'] / 2**20:.0f} MiB, largest worker "
          f"{result['peak_rss_largest_worker_bytes'] / 2**20:.0f} MiB (the source is {src_bytes / 2**20:.0f} MiB)")
    print(f"bare read+decode limit ({args.workers} processes): {result['bare_read_decode_per_s']:.1f} images/s; "
          f"steady state at {100 * result['steady_fraction_of_bare']:.0f}% of it (target >= "
          f"{100 * TARGET_FRACTION_OF_BARE:.0f}%: {'met' if ok else 'NOT met'})")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "convert.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
