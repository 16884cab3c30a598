"""GIL-bound map functions, a generated family: headrace's ``map(num_parallel_calls=AUTOTUNE)`` with default
Options against one thread, a bare ``multiprocessing.Pool(2)`` and the PyTorch DataLoader (2 workers).

Targets (on 2 cores): for every function of the family, headrace's elements/s >= 0.85x the bare process
pool's, >= the DataLoader's with 2 workers, and never below sequential (one thread).

The family (``bench/gil_family_fns.py``): three shapes (a pure-Python arithmetic loop; str, dict and regex
word counting; json dumps / loads of small records) times call lengths (default 0.2, 1.4, 6 and 10 ms,
calibrated on this machine). The pipeline: ``range(n).map(f, num_parallel_calls=AUTOTUNE).batch(32)``;
the DataLoader: a map-style dataset of ``f(i)``, ``batch_size=32``, ``num_workers=2`` (forkserver); the bare
pool: ``Pool(2).imap(f, range(n), chunksize=32)``. Rates count the elements after the first 10% (worker
start excluded for all). Each row prints the executor "auto" chose (``Iterator.explain()``). Contenders of
one row run interleaved; the DataLoader in a fresh interpreter (importing torch slows pure-Python code in
the importing process).

    python bench/gil_family.py [--lengths-ms 0.2,1.4,6,10] [--shapes arithmetic,words,json] [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time

from gil_family_fns import SHAPES, Call, Items, calibrate

import headrace as hr
from headrace._machine import machine_line

BATCH = 32
WARMUP = 0.1
POOL_TARGET = 0.85


def _timed(batches, n: int) -> float:
    """Elements per second after the first ``WARMUP * n`` elements; ``batches`` yields sized batches."""
    seen, t0, counted = 0, None, 0
    for b in batches:
        k = len(b)
        seen += k
        if t0 is None:
            if seen >= n * WARMUP:
                t0 = time.perf_counter()
            continue
        counted += k
    return counted / max(1e-9, time.perf_counter() - (t0 or time.perf_counter()))


def rate_sequential(call: Call, n: int) -> float:
    return _timed(([call(i) for i in range(s, min(n, s + BATCH))] for s in range(0, n, BATCH)), n)


def rate_headrace(call: Call, n: int) -> tuple[float, str]:
    ds = hr.Dataset.range(n).map(call, num_parallel_calls=hr.AUTOTUNE).batch(BATCH)
    with iter(ds) as it:
        rate = _timed(it, n)
        node = it.explain()["tree"]
        while node["kind"] != "map" and node.get("inputs"):
            node = node["inputs"][0]
        chosen = node.get("executor", {}).get("executor", "?")
    return rate, chosen


def rate_pool(call: Call, n: int) -> float:
    with mp.get_context("forkserver").Pool(2) as pool:
        pool.map(call, range(4))  # the workers are up
        results = pool.imap(call, range(n), chunksize=BATCH)
        return _timed((list(next(results) for _ in range(min(BATCH, n - s))) for s in range(0, n, BATCH)), n)


def rate_dataloader(call: Call, n: int) -> float:
    import torch.utils.data as tud

    loader = tud.DataLoader(Items(call, n), batch_size=BATCH, num_workers=2, multiprocessing_context="forkserver")
    return _timed(loader, n)


def rate_dataloader_isolated(call: Call, n: int) -> float:
    out = subprocess.run([sys.executable, __file__, "--dataloader-only", json.dumps([call.shape, call.work, n])],
                         check=True, capture_output=True, text=True, timeout=900).stdout
    return float(out.split()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths-ms", default="0.2,1.4,6,10")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--seconds", type=float, default=3.0, help="about how long one contender's run takes")
    p.add_argument("--dataloader-only", help=argparse.SUPPRESS)
    args = p.parse_args()
    print(machine_line(), flush=True)
    if args.dataloader_only:  # (the parent reads the last word)
        shape, work, n = json.loads(args.dataloader_only)
        print(rate_dataloader(Call(shape, work), n))
        return
    print(f"{'function':<24}{'sequential':>11}{'headrace':>10}{'(auto)':>9}{'Pool(2)':>9}{'DataLoader':>11}"
          f"{'vs Pool':>9}{'vs DL':>7}{'vs seq':>8}  verdict", flush=True)
    failed = 0
    for shape in args.shapes.split(","):
        for ms in (float(x) for x in args.lengths_ms.split(",")):
            call = Call(shape, calibrate(shape, ms))
            n = max(10 * BATCH, int(args.seconds * 1000 / ms))
            seq = rate_sequential(call, n)
            ours, chosen = rate_headrace(call, n)
            pool = rate_pool(call, n)
            loader = rate_dataloader_isolated(call, n)
            ok = ours >= POOL_TARGET * pool and ours >= loader and ours >= seq
            failed += not ok
            print(f"{f'{shape} {ms:g} ms':<24}{seq:>11.0f}{ours:>10.0f}{chosen:>9}{pool:>9.0f}{loader:>11.0f}"
                  f"{ours / pool:>9.2f}{ours / loader:>7.2f}{ours / seq:>8.2f}  {'met' if ok else 'NOT MET'}",
                  flush=True)
    print(f"targets: headrace >= {POOL_TARGET}x Pool(2), >= 1.0x DataLoader(2 workers), >= 1.0x sequential; "
          f"{failed} function(s) not met; load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
