"""Python calls per element inside headrace, counted by a profiler hook: the engine's per-element cost as a
figure that does not depend on the machine or its load (``bench/overhead.py`` gives the time).

Four pipelines, the first two the same as ``bench/overhead.py``'s:

- ``range -> map(x * 2) -> batch(32)`` (the per-element path: inline map, sequential batch);
- the deep pipeline: ``interleave(4) -> map(2 threads) -> map(2 threads) -> batch(32, 2 threads) ->
  prefetch(2)``, smaller, whose count varies a little with thread timing (waits, retries);
- ``bench/peers.py``'s Parquet workload: rows of a Parquet file (dicts of numpy scalars and ``bytes``) -> a
  per-row map returning a dict -> ``batch(256)``;
- ``(features, label)`` tuples -> ``batch(32)``;
- inside a pool worker (:func:`pool_worker`): the image pipeline's shape without the decode,
  ``interleave(4 readers) -> map(2 threads) -> shuffle(1000) -> batch(64) -> prefetch``, counting only what the
  map's worker threads run: Python calls of headrace and lock acquisitions (``acquire`` of a lock or
  condition, a ``with`` on one included), per element. Every bytecode a worker runs between two calls of the
  function holds the GIL the other worker needs (``docs/design/pool.md``: runs).

A ``sys.setprofile`` / ``threading.setprofile`` hook counts every Python function call whose code lives in
the imported ``headrace`` package (user lambdas and numpy excluded), in every thread. Used to show that a
refactor keeps the hot path's calls (issue 23: "every benchmark gives the same results"). Run it against
another checkout with ``PYTHONPATH=<checkout>/src``.

    python bench/calls.py [--elements 20000]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import headrace as hr
from headrace._machine import machine_line

ROOT = os.path.dirname(os.path.abspath(hr.__file__)) + os.sep


def count_calls(run: Callable[[], int], thread: str | None = None) -> tuple[int, Counter[str], int]:
    """Run ``run()`` (returns the element count) with the hook installed: the elements, a per-function tally of
    the calls and the lock acquisitions (``acquire`` calls the profiler sees: every lock of headrace is a timed
    one of ``headrace._sync``, whose ``with`` calls ``acquire``; ``Condition.wait`` / ``notify`` call it too),
    in every thread or (``thread``) in the threads whose name starts so."""
    tally: Counter[str] = Counter()
    locks = [0]
    lock = threading.Lock()  # (its ``with`` calls no ``acquire`` the profiler sees)

    def hook(frame: Any, event: str, arg: Any) -> None:
        if thread is not None and not threading.current_thread().name.startswith(thread):
            return
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(ROOT):
                key = f"{code.co_filename[len(ROOT):]}:{code.co_name}"
                with lock:
                    tally[key] += 1
        elif event == "c_call" and getattr(arg, "__name__", "") == "acquire":
            locks[0] += 1

    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        n = run()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return n, tally, locks[0]


def flat(n: int) -> Callable[[], int]:
    def run() -> int:
        return sum(len(b) for b in hr.Dataset.range(n).map(lambda x: x * 2).batch(32))
    return run


def deep(n: int) -> Callable[[], int]:
    per = max(1, n // 8)

    def run() -> int:
        ds = (hr.Dataset.range(8)
              .interleave(lambda f: hr.Dataset.range(int(f) * per, int(f) * per + per), cycle_length=4,
                          num_parallel_calls=4)
              .map(lambda x: x + 1, num_parallel_calls=2)
              .map(lambda x: x * 2, num_parallel_calls=2)
              .batch(32, num_parallel_calls=2)
              .prefetch(2))
        return sum(len(b) for b in ds)
    return run


def parquet_rows(n: int) -> Callable[[], int]:
    """``bench/peers.py``'s Parquet workload, smaller: rows of a file written here -> a per-row map -> batch(256)."""
    import tempfile

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from peers_runs import BATCH_PARQUET, row_fn

    from headrace.io import ParquetDataset

    path = os.path.join(tempfile.mkdtemp(prefix="headrace-calls-"), "rows.parquet")
    rng = np.random.default_rng(0)
    pq.write_table(pa.table({"id": np.arange(n), "x": rng.random(n), "y": rng.random(n).astype(np.float32),
                             "label": rng.integers(0, 10, n).astype(np.int32),
                             "name": pa.array([f"row {i}" for i in range(n)])}), path, row_group_size=65_536)

    def run() -> int:
        return sum(len(b["f"]) for b in ParquetDataset(path).map(row_fn).batch(BATCH_PARQUET))
    return run


def pairs(n: int) -> Callable[[], int]:
    """``(features, label)`` tuples (the shape of most supervised pipelines) -> batch(32)."""
    import numpy as np

    features = np.zeros(8, np.float32)

    def run() -> int:
        ds = hr.Dataset.range(n).map(lambda i: (features, i % 10)).batch(32)
        return sum(len(b[1]) for b in ds)
    return run


def pool_worker(n: int) -> Callable[[], int]:
    """The image pipeline's shape without the decode; its map's worker threads are ``headrace-map(work)-<i>``."""
    import numpy as np

    per = max(1, n // 8)
    image = np.zeros((8, 8, 3), np.float32)

    def run() -> int:
        ds = (hr.Dataset.range(8)
              .interleave(lambda f: hr.Dataset.range(int(f) * per, int(f) * per + per), cycle_length=4,
                          num_parallel_calls=4)
              .map(lambda x: (image, x), num_parallel_calls=2, name="work", executor="thread")
              .shuffle(1000, seed=0).batch(64).prefetch(2))
        return sum(len(b[1]) for b in ds)
    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--elements", type=int, default=20_000)
    p.add_argument("--top", type=int, default=8, help="the functions called most, per pipeline")
    args = p.parse_args()
    print(machine_line())
    print(f"headrace from {ROOT}")
    for name, make in (("range->map->batch", flat), ("deep pipeline", deep), ("parquet rows->map->batch(256)",
                       parquet_rows), ("(features, label)->batch", pairs)):
        n, tally, _ = count_calls(make(args.elements))
        total = sum(tally.values())
        print(f"{name}: {n} elements, {total} headrace calls, {total / n:.2f} per element")
        for key, c in tally.most_common(args.top):
            print(f"    {c / n:7.2f}  {key}")
    n, tally, locks = count_calls(pool_worker(args.elements), "headrace-map(work)-")
    total = sum(tally.values())
    print(f"inside a map pool worker (interleave -> map(2 threads) -> shuffle -> batch -> prefetch): {n} elements, "
          f"{total / n:.2f} headrace calls and {locks / n:.2f} lock acquisitions per element")
    for key, c in tally.most_common(args.top):
        print(f"    {c / n:7.2f}  {key}")


if __name__ == "__main__":
    main()
