"""The promise sweep: hundreds of generated pipeline shapes, each run in its own process and judged from outside.

For every shape (``tests/promises/shapes.py``: interleave / map / batch / padded_batch / shuffle / prefetch /
unbatch combinations, element sizes from bytes to tens of MiB, skewed sizes, tight to loose budgets,
deterministic on and off):

- memory: RSS of the process and its children sampled every 2 ms; over the cap if the growth over the base
  exceeds budget x 1.1 + 64 MiB, or the tracked peak exceeds the budget, or anything was overdrawn;
- exactly-once: restored at 3 random points through ``json`` into freshly built pipelines; every 5th shape
  also SIGKILLed at a random element and recovered from its last checkpoint; ids lost / duplicated;
- hangs: any child without a result in time; every 10th shape also gets repeated SIGINTs inside ``next()``;
- cache: every 4th shape is also checked for memory and restored with a ``cache(filename)`` inserted at a
  random place.

Then throughput under tight budgets (issue 10's target: with room for >= 2 elements per active slot, a
pipeline keeps >= 60% of its throughput with an unlimited budget), best of 3, in this process.

Prints ``N shapes, N over the cap, N lost, N duplicated, N hangs`` (target: all zeros) and the ratios.

    python bench/promises.py [--shapes 300] [--first-seed 0] [--skip-throughput]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import headrace as hr  # noqa: E402
from headrace._machine import machine_line  # noqa: E402
from tests.promises.harness import (  # noqa: E402
    Verdict,
    check_interrupts,
    check_kill,
    check_memory,
    check_restore,
)
from tests.promises.shapes import build, random_shape  # noqa: E402

MiB = 1024**2


def sweep(n_shapes: int, first_seed: int) -> Counter[str]:
    totals: Counter[str] = Counter()
    t0 = time.monotonic()
    for k, seed in enumerate(range(first_seed, first_seed + n_shapes)):
        shape = random_shape(seed)
        rng = random.Random(seed)
        checks: list[tuple[str, Verdict]] = [("memory", check_memory(shape))]
        checks.append(("restore", check_restore(shape, sorted(rng.sample(range(1, 60), 3)))))
        if k % 5 == 0:
            checks.append(("kill", check_kill(shape, after_elements=rng.randint(2, 40), every=rng.choice([1, 3, 7]))))
        if k % 10 == 0:
            checks.append(("interrupt", check_interrupts(shape, seconds=1.5, seed=seed)))
        if k % 4 == 0:  # the same shape with a file cache inserted at a random place (memory and restore)
            cached = {**shape, "stages": list(shape["stages"])}
            cached["stages"].insert(rng.randint(0, len(cached["stages"])), {"op": "cache"})
            with tempfile.TemporaryDirectory() as d:
                checks.append(("cache memory", check_memory(cached, cache_dir=d)))
            with tempfile.TemporaryDirectory() as d:
                checks.append(("cache restore", check_restore(cached, sorted(rng.sample(range(1, 60), 3)),
                                                              cache_dir=d)))
        for what, verdict in checks:
            totals[verdict.kind] += 1  # "lost" counts a check that lost ids (whether or not it also repeated some)
            if not verdict.ok:
                figures = {k: v for k, v in verdict.figures.items() if k != "stderr"}
                print(f"  seed {seed} {what}: {verdict.kind}: {verdict.detail} {figures}", flush=True)
                if "stderr" in verdict.figures:
                    print("    " + str(verdict.figures["stderr"])[-600:].replace("\n", "\n    "))
        if (k + 1) % 25 == 0:
            print(f"  {k + 1} shapes in {time.monotonic() - t0:.0f} s", flush=True)
    return totals


def _rate(ds: hr.Dataset, repeats: int = 3) -> float:
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", hr.MemoryBudgetWarning)
            n = sum(1 for _ in ds)
        best = max(best, n / (time.perf_counter() - t0))
    return best


def throughput() -> list[tuple[str, float, float]]:
    """(pipeline, unlimited elements/s, tight elements/s) for pipelines sized to hold 2 elements per slot."""
    rows = []
    slots, element = 16, 4 * MiB
    shape = {"seed": 0, "n": 512, "sizes": {"kind": "fixed", "small": element},
             "source": {"kind": "interleave", "files": 16, "cycle_length": slots, "parallel": True,
                        "deterministic": True}, "stages": [], "budget": 4096 * MiB}
    tight = int(2 * slots * element * 17 / 16)  # 2 elements per slot, plus the budget's reserve
    rows.append(("interleave(16 slots, parallel) of 4 MiB records",
                 _rate(build(shape)), _rate(build({**shape, "budget": tight}))))
    shape = {"seed": 0, "n": 512, "sizes": {"kind": "fixed", "small": element}, "source": {"kind": "range"},
             "stages": [{"op": "map", "parallel": 2, "deterministic": True, "blowup": 1.0},
                        {"op": "prefetch", "buffer": 2}], "budget": 4096 * MiB}
    tight = int((2 * 2 * 2 + 2 * 2) * element * 17 / 16)  # 2 per map worker (input + output) and per prefetch slot
    rows.append(("map(2 threads) of 4 MiB elements -> prefetch(2)",
                 _rate(build(shape)), _rate(build({**shape, "budget": tight}))))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", type=int, default=300)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--skip-throughput", action="store_true")
    args = p.parse_args()
    print(machine_line(), flush=True)
    t0 = time.monotonic()
    totals = sweep(args.shapes, args.first_seed)
    over, lost, dup = totals["over_cap"], totals["lost"], totals["duplicated"]
    hangs, errors = totals["hang"], totals["error"]
    print(f"{args.shapes} shapes, {over} over the cap, {lost} lost, {dup} duplicated, {hangs} hangs, {errors} errors "
          f"({sum(totals.values())} checks in {time.monotonic() - t0:.0f} s; target: all zeros) -> "
          f"{'MET' if over == lost == dup == hangs == errors == 0 else 'NOT MET'}")
    if not args.skip_throughput:
        for name, free, tight in throughput():
            ratio = tight / free
            print(f"{name}: {free:,.0f}/s unlimited, {tight:,.0f}/s with 2 elements per slot = {ratio:.0%} "
                  f"(target >= 60%) -> {'MET' if ratio >= 0.6 else 'NOT MET'}")


if __name__ == "__main__":
    main()
