"""Per-element overhead of the engine: range(1e6) -> map(x * 2) -> batch(32), next to plain Python; and the
cost of exact checkpoints in a deep parallel pipeline.

Target (issue 2): <= 1,000 ns per element on a 2-core machine. For reference on such a machine, tf.data
measures 15,000-20,000 ns and the PyTorch DataLoader with 0 workers ~620 ns.

Deep pipeline (issue 15, defect 8): interleave(4 parallel slots) -> map(2 threads) -> map(2 threads) ->
batch(32, 2 threads) -> prefetch(2) of small elements, with the parallel stages snapshotting their input's
state every 16 pulls (headrace's default, ``_engine/pool/parallel.SNAPSHOT_EVERY``) vs every pull (the engine before,
which issue 15 measured at 71 vs 40 us/element).

    python bench/overhead.py [--elements 1000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import headrace as hr
from headrace._machine import machine_line

TARGET_NS = 1_000


def run_headrace(n: int) -> float:
    ds = hr.Dataset.range(n).map(lambda x: x * 2).batch(32)
    t0 = time.perf_counter()
    count = 0
    for b in ds:
        count += len(b)
    elapsed = time.perf_counter() - t0
    if count != n:
        raise RuntimeError(f"expected {n} elements, got {count}")
    return elapsed / n * 1e9


def run_plain(n: int) -> float:
    def gen():
        for i in range(n):
            yield np.int64(i) * 2

    t0 = time.perf_counter()
    buf = []
    for x in gen():
        buf.append(x)
        if len(buf) == 32:
            np.array(buf)
            buf = []
    if buf:
        np.array(buf)
    return (time.perf_counter() - t0) / n * 1e9


def deep_pipeline() -> hr.Dataset:
    per = 25_000
    return (hr.Dataset.range(8)
            .interleave(lambda f: hr.Dataset.range(int(f) * per, int(f) * per + per), cycle_length=4,
                        num_parallel_calls=4)
            .map(lambda x: x + 1, num_parallel_calls=2)
            .map(lambda x: x * 3, num_parallel_calls=2)
            .batch(32, num_parallel_calls=2)
            .prefetch(2))


def run_deep(snapshot_every: int) -> float:
    from headrace._engine.pool import parallel

    saved, parallel.SNAPSHOT_EVERY = parallel.SNAPSHOT_EVERY, snapshot_every
    try:
        t0 = time.perf_counter()
        n = sum(len(b) for b in deep_pipeline())
    finally:
        parallel.SNAPSHOT_EVERY = saved
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--elements", type=int, default=1_000_000)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    print(machine_line(), flush=True)
    ours = min(run_headrace(args.elements) for _ in range(args.repeats))
    plain = min(run_plain(args.elements) for _ in range(args.repeats))
    print(f"headrace range -> map(x*2) -> batch(32): {ours:,.0f} ns/element (best of {args.repeats})")
    print(f"plain Python generator + list batching:  {plain:,.0f} ns/element")
    print(f"target: <= {TARGET_NS:,} ns/element -> {'MET' if ours <= TARGET_NS else 'NOT MET'}")
    every16 = min(run_deep(16) for _ in range(3))
    every1 = min(run_deep(1) for _ in range(3))
    print(f"deep pipeline (interleave -> 2 maps -> batch -> prefetch, all parallel): {every16:.1f} us/element with "
          f"snapshots every 16 pulls, {every1:.1f} us/element with a snapshot per pull (state recording "
          f"{1 - every16 / every1:.0%} cheaper)")


if __name__ == "__main__":
    main()
