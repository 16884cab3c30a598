"""GIL-bound map functions, a generated family: headrace's ``map(num_parallel_calls=AUTOTUNE)`` with default
Options against one thread, a bare ``multiprocessing.Pool(2)`` and the PyTorch DataLoader (2 workers).

Targets (on 2 cores): for every function of the family, headrace's elements/s >= 0.85x the bare process
pool's, >= the DataLoader's with 2 workers, and never below sequential (one thread).

The family (``bench/gil_family_fns.py``): three shapes (a pure-Python arithmetic loop; str, dict and regex
word counting; json dumps / loads of small records) times call lengths (default 0.2, 1.4, 6 and 10 ms,
calibrated on this machine). The pipeline: ``range(n).map(f, num_parallel_calls=AUTOTUNE).batch(32)``;
the DataLoader: a map-style dataset of ``f(i)``, ``batch_size=32``, ``num_workers=2`` (forkserver); the bare
pool: ``Pool(2).imap(f, range(n), chunksize=32)``. Rates count the elements after the first 10% (worker
start excluded for all: the pool is started before it is timed; the DataLoader's workers start within its
first 10%; headrace is timed from the later of its first 10% and ``executor="auto"`` settled: its first calls
measured and, on processes, every worker up and computing; the seconds that took are printed as "start s").
Each row prints the executor "auto" chose (``Iterator.explain()``). Contenders of
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
from collections.abc import Callable

from gil_family_fns import SHAPES, Call, Items, calibrate

import headrace as hr
from headrace._machine import machine_line

BATCH = 32
WARMUP = 0.1
POOL_TARGET = 0.85


TAIL = 5 * BATCH
"""Elements left uncounted at the end: more than any contender computes ahead of its consumer (the DataLoader's
2 workers x prefetch_factor 2 x 32), so the clock stops while every contender's workers are still busy. Timed to
the last element, work done ahead before the clock started is counted with no tail left out to balance it: the
DataLoader's 10 ms calls came out at 2.3x sequential on 2 cores."""
MIN_N = 20 * BATCH


def _timed(batches, n: int, started: Callable[[], bool] = lambda: True) -> float:
    """Elements per second between the first ``WARMUP * n`` elements (and ``started()`` true, asked every 50
    ms until it is) and the last ``TAIL``; ``batches`` yields sized batches."""
    seen, t0, t1, counted, next_look = 0, None, None, 0, 0.0
    for b in batches:
        k = len(b)
        seen += k
        if t0 is None:
            now = time.perf_counter()
            if seen >= n * WARMUP and now >= next_look:
                next_look = now + 0.05
                if started():
                    t0 = now
            continue
        if t1 is None:
            counted += k
            if seen >= n - TAIL:
                t1 = time.perf_counter()
    if t0 is None or t1 is None:
        return float("nan")
    return counted / max(1e-9, t1 - t0)


def rate_sequential(call: Call, n: int) -> float:
    return _timed(([call(i) for i in range(s, min(n, s + BATCH))] for s in range(0, n, BATCH)), n)


def _map_executor(it) -> dict:
    node = it.explain()["tree"]
    while node["kind"] != "map" and node.get("inputs"):
        node = node["inputs"][0]
    return node.get("executor", {})


def _settled(ex: dict) -> bool:
    """``executor="auto"`` decided, and on processes: all its workers up and computing (its worker start)."""
    kind = ex.get("executor")
    if kind == "process":
        return ex.get("processes", 0) >= ex.get("target_processes", 1) and ex.get("elements", 0) > 0
    return kind == "thread"


def rate_headrace(call: Call, n: int) -> tuple[float, str, float]:
    """``_timed`` once ``executor="auto"`` has also settled (its measurement and its worker start excluded, as
    the pool's start is: the issue's "worker start excluded for all"); also the seconds it took to settle,
    printed beside."""
    ds = hr.Dataset.range(n).map(call, num_parallel_calls=hr.AUTOTUNE).batch(BATCH)
    t_start = time.perf_counter()
    settle_s = [float("nan")]

    def started() -> bool:
        if _settled(_map_executor(it)):
            settle_s[0] = time.perf_counter() - t_start
            return True
        return False

    with iter(ds) as it:
        rate = _timed(it, n, started)
        chosen = _map_executor(it).get("executor", "?")
    return rate, chosen, settle_s[0]


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
    print(f"{'function':<24}{'sequential':>11}{'headrace':>10}{'(auto)':>9}{'start s':>8}{'Pool(2)':>9}"
          f"{'DataLoader':>11}{'vs Pool':>9}{'vs DL':>7}{'vs seq':>8}  verdict", flush=True)
    failed = 0
    for shape in args.shapes.split(","):
        for ms in (float(x) for x in args.lengths_ms.split(",")):
            call = Call(shape, calibrate(shape, ms))
            n = max(MIN_N, int(args.seconds * 1000 / ms))
            seq = rate_sequential(call, n)
            ours, chosen, settle_s = rate_headrace(call, n)
            pool = rate_pool(call, n)
            loader = rate_dataloader_isolated(call, n)
            ok = ours >= POOL_TARGET * pool and ours >= loader and ours >= seq
            failed += not ok
            print(f"{f'{shape} {ms:g} ms':<24}{seq:>11.0f}{ours:>10.0f}{chosen:>9}{settle_s:>8.2f}{pool:>9.0f}"
                  f"{loader:>11.0f}{ours / pool:>9.2f}{ours / loader:>7.2f}{ours / seq:>8.2f}  "
                  f"{'met' if ok else 'NOT MET'}",
                  flush=True)
    print(f"targets: headrace >= {POOL_TARGET}x Pool(2), >= 1.0x DataLoader(2 workers), >= 1.0x sequential; "
          f"{failed} function(s) not met; load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
