"""Stream a dataset many times larger than its memory budget; print throughput, tracked peak and RSS.

Pipeline: range -> map(make a 1 MiB element, AUTOTUNE threads) -> shuffle(1000) -> prefetch(64) with
memory_budget=256MiB, 4 GiB in total (16x the budget). Targets (issue 2): tracked peak <= budget; process
RSS grows by <= budget x 1.1 + 64 MiB.

    python bench/memory_budget.py [--total-gib 4] [--budget 256MiB]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import psutil

import headrace as hr
from headrace._machine import machine_line

MiB = 1024**2


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-gib", type=float, default=4.0)
    p.add_argument("--budget", default="256MiB")
    args = p.parse_args()
    print(machine_line(), flush=True)
    budget = hr.parse_bytes(args.budget)
    n = int(args.total_gib * 1024)

    def make(i):
        return np.full(MiB, i % 251, np.uint8)

    ds = (hr.Dataset.range(n).map(make, num_parallel_calls=hr.AUTOTUNE).shuffle(1000, seed=0).prefetch(64)
          .with_options(hr.Options(memory_budget=budget)))
    proc = psutil.Process()
    base = proc.memory_info().rss
    peak = base
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hr.MemoryBudgetWarning)
        with iter(ds) as it:
            for k, _ in enumerate(it):
                if k % 32 == 0:
                    peak = max(peak, proc.memory_info().rss)
            stats = it.memory_stats()
    dt = time.perf_counter() - t0
    growth = peak - base
    rss_limit = budget * 1.1 + 64 * MiB
    print(f"streamed {n} MiB through a {budget / MiB:.0f} MiB budget in {dt:.1f} s "
          f"({n / dt:,.0f} MiB/s, {n / dt:,.0f} elements/s)")
    print(f"tracked peak: {stats['peak_bytes'] / MiB:.1f} MiB (target <= {budget / MiB:.0f} MiB) -> "
          f"{'MET' if stats['peak_bytes'] <= budget else 'NOT MET'}")
    print(f"RSS growth: {growth / MiB:.1f} MiB (target <= {rss_limit / MiB:.0f} MiB) -> "
          f"{'MET' if growth <= rss_limit else 'NOT MET'}")
    print("per stage peak MiB: " + ", ".join(f"{k}={v['peak_bytes'] / MiB:.1f}" for k, v in stats["stages"].items()))


if __name__ == "__main__":
    main()
