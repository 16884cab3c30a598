"""The promise sweep: hundreds of generated cases, each run in its own process and judged from outside.

Each case (``tests/promises/cases.py``, seeded) is a source of the public API - ``range``,
``from_tensor_slices``, ``from_generator``, ``from_random_access``, an ``interleave`` of files,
``TFRecordDataset``, ``ParquetDataset``, ``HDF5Dataset``, ``image_folder``, ``Dataset.load`` of a
``Dataset.save`` (small files written in a temporary directory per case) - followed by 0-5 of the API's
transformations (``tests/promises/ops.py``: map on threads or processes, filter, flat_map, interleave,
batch, padded_batch, ragged_batch, unbatch, rebatch, shuffle, repeat, take, skip, shard, zip, concatenate,
enumerate, window, scan, cache, prefetch, ignore_errors, take_while, unique, group_by_window,
bucket_by_sequence_length, sample_from_datasets, choose_from_datasets, rejection_resample; and in about a fifth
of the cases, drawn apart so that the others stay as they were, headrace's ``pack``), under a budget
that is sometimes below two elements (the case must run or refuse with a clear ``MemoryBudgetError``), on
inputs that are sometimes damaged at one record (with ``ignore_errors()``: exactly the good records; without
it: a clear error). Judged (``tests/promises/judge.py``):

- memory: RSS of the case's process and its children (PSS while worker processes share pages) sampled from
  a thread; over the cap if the growth over the base > budget x 1.1 + 64 MiB or the tracked peak > budget;
  ``overdraft`` if anything was overdrawn;
- exactly-once: the ids against the expected stream (its order too where that is predictable); a restore
  chain (state -> json -> fresh pipeline -> restore -> read k -> state ...) compared element by element with
  the uninterrupted run where the pipeline is deterministic: lost, duplicated, reordered;
- ``to_torch`` under 2 DataLoader workers (fork or spawn) for about 1 case in 10: the workers together yield
  the stream once, each worker inside the cap;
- hangs: any child without its results in time (a watchdog dumps its threads); every ``--kill-every``-th
  case also runs the older shape checks: SIGKILL at a random element and recovery from the last checkpoint,
  repeated SIGINTs inside ``next()`` (``tests/promises/shapes.py``).

``--load N`` runs N busy processes (``while True: pass``) beside the last ``--loaded-fraction`` (default half)
of the cases, stopped at the end (in a ``finally``). The acceptance run::

    python bench/promises.py --shapes 600 --load 2 --skip-throughput

Its time, measured on a 2-core VM shared with other jobs: 80 cases without load in 183 s (quiet), 100 in
467 s (load 7-12 before ours), 100 under ``--load 2`` in 1,108 s (busy; about half of it three hung cases, each
costing a watchdog); so about 25-40 min on a 2-core machine of its own once no case hangs.

Prints the machine, then ``N cases, N over the cap, N overdraft, N lost, N duplicated, N reordered, N hangs,
N errors, N clear refusals`` and each failing case: its seed and a one-line description. Rerun one with
``python bench/promises.py --first-seed S --shapes 1 --skip-throughput`` (add ``--load 2 --loaded-fraction 1``
for a case that failed under load). Then throughput under tight budgets (issue 10's target: with room for
>= 2 elements per active slot, >= 60% of the throughput with an unlimited budget), best of 3.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import headrace as hr  # noqa: E402
from headrace._machine import machine_line  # noqa: E402
from tests.promises.cases import describe, random_case  # noqa: E402
from tests.promises.harness import check_interrupts, check_kill  # noqa: E402
from tests.promises.judge import check_case  # noqa: E402
from tests.promises.shapes import build, random_shape  # noqa: E402

MiB = 1024**2
KINDS = ["over_cap", "overdraft", "lost", "duplicated", "reordered", "hang", "error", "refused"]


def busy(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait(10)


def run_case(seed: int, kill_every: int, k: int) -> list[tuple[str, object]]:
    case = random_case(seed)
    verdicts = list(check_case(case))
    if kill_every and k % kill_every == 0:  # the older shapes' kill / interrupt checks, same seed
        shape = random_shape(seed, max_stream_bytes=256 * MiB)
        rng = random.Random(seed)
        verdicts.append(("kill", check_kill(shape, after_elements=rng.randint(2, 40), every=rng.choice([1, 3, 7]))))
        verdicts.append(("interrupt", check_interrupts(shape, seconds=1.5, seed=seed)))
    return verdicts


def sweep(n: int, first_seed: int, load: int, loaded_fraction: float, kill_every: int) -> tuple[Counter, list]:
    """(counts of cases per failure kind, failures as (seed, loaded, description, [(phase, verdict)]))."""
    totals: Counter[str] = Counter()
    failures = []
    first_loaded = n - round(n * loaded_fraction) if load else n
    procs: list[subprocess.Popen] = []
    t0 = time.monotonic()
    try:
        for k, seed in enumerate(range(first_seed, first_seed + n)):
            if k == first_loaded:
                print(f"  from case {k} on: {load} busy processes beside the sweep", flush=True)
                procs = busy(load)
            t_case = time.monotonic()
            verdicts = run_case(seed, kill_every, k)
            if time.monotonic() - t_case > 60:
                print(f"  seed {seed}: {time.monotonic() - t_case:.0f} s", flush=True)
            kinds = {v.kind for _, v in verdicts}  # type: ignore[attr-defined]
            for kind in kinds - {"ok"}:
                totals[kind] += 1  # cases, not checks: a case that lost and duplicated counts in both
            bad = [(p, v) for p, v in verdicts if not v.ok and v.kind != "refused"]  # type: ignore[attr-defined]
            if bad:
                failures.append((seed, k >= first_loaded, describe(random_case(seed)), bad))
                for phase, v in bad:
                    figures = {a: b for a, b in v.figures.items() if a != "stderr"}  # type: ignore[attr-defined]
                    print(f"  seed {seed} {phase}: {v.kind}: {v.detail} {figures}", flush=True)  # type: ignore
                    if v.kind in ("error", "hang") and "stderr" in v.figures:  # type: ignore[attr-defined]
                        # a hang's thread dump whole (the frame that matters can be any thread's); an error's tail
                        text = str(v.figures["stderr"])  # type: ignore[attr-defined]
                        print("    " + (text if v.kind == "hang" else text[-2000:]).replace("\n", "\n    "))
            if (k + 1) % 25 == 0:
                print(f"  {k + 1} cases in {time.monotonic() - t0:.0f} s", flush=True)
    finally:
        stop(procs)
    return totals, failures


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
    p.add_argument("--shapes", type=int, default=600, help="generated cases")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--load", type=int, default=0, help="busy processes beside the loaded part of the sweep")
    p.add_argument("--loaded-fraction", type=float, default=0.5, help="the last fraction of cases run under --load")
    p.add_argument("--kill-every", type=int, default=20, help="every k-th case also: SIGKILL + SIGINT checks (0: off)")
    p.add_argument("--skip-throughput", action="store_true")
    args = p.parse_args()
    print(machine_line(), flush=True)
    t0 = time.monotonic()
    totals, failures = sweep(args.shapes, args.first_seed, args.load, args.loaded_fraction, args.kill_every)
    counts = [totals[k] for k in KINDS]
    met = sum(counts[:-1]) == 0
    n_loaded = round(args.shapes * args.loaded_fraction)
    loaded = f"the last {n_loaded} under --load {args.load}" if args.load else "no load"
    print(f"{args.shapes} cases, {counts[0]} over the cap, {counts[1]} overdraft, {counts[2]} lost, "
          f"{counts[3]} duplicated, {counts[4]} reordered, {counts[5]} hangs, {counts[6]} errors, "
          f"{counts[7]} clear refusals ({time.monotonic() - t0:.0f} s, {loaded}; target: all zeros but "
          f"refusals) -> {'MET' if met else 'NOT MET'}")
    print(machine_line())
    for seed, loaded, text, bad in failures:
        kinds = ", ".join(f"{phase} {v.kind}" for phase, v in bad)
        print(f"  seed {seed}{' (under load)' if loaded else ''}: {kinds}: {text}")
    if not args.skip_throughput:
        for name, free, tight in throughput():
            ratio = tight / free
            print(f"{name}: {free:,.0f}/s unlimited, {tight:,.0f}/s with 2 elements per slot = {ratio:.0%} "
                  f"(target >= 60%) -> {'MET' if ratio >= 0.6 else 'NOT MET'}")


if __name__ == "__main__":
    main()
