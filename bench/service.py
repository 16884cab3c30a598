"""``headrace.service.distribute``: trainer-side throughput against the number of Ray workers, and the transfer
cost through Ray's object store; a paper estimate of 64 workers feeding 8 trainers from those figures.

Contenders, interleaved ``--repeats`` times (the median counts; a 2-core VM's speed drifts):

- GIL-bound map: a pure-Python loop of about 1 ms per element (``range(n).map(work)``), on one local thread
  (``map`` with no ``num_parallel_calls``) vs ``distribute("distributed_epoch", ..., num_workers=k)``, k = 1, 2;
- image pipeline: JPEGs made by ``headrace.image.photos`` (500x375), ``decode_and_resize`` to 224x224 (150 KB
  uint8 per element), local thread vs 1 and 2 Ray workers;
- transfer: 4 MiB float32 arrays made by one worker (``np.full``, cheap): bytes/s the trainer receives.

Rates are taken from the first element delivered to the last (the actors' start, 1-2 s, is printed apart). The
trainer does nothing with the elements but count them. Ray runs on this machine (``ray.init(num_cpus=2)``, on
127.0.0.1).

    python bench/service.py [--elements 1500] [--images 300] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # every Ray process on 127.0.0.1

import numpy as np

import headrace as hr
from headrace._machine import machine_line
from headrace.service import distribute, service_report

LOOP = 20_000  # iterations of the pure-Python loop: about 1 ms on a 2.5 GHz Xeon core


def work(x):
    s = 0
    for i in range(LOOP):
        s += (i * i) % 7
    return x + s


def _resize(jpeg):
    from headrace.image import decode_and_resize

    return decode_and_resize(jpeg, (224, 224))


def _big(i):
    return np.full(1 << 20, i, np.float32)


def timed(ds: hr.Dataset) -> tuple[float, float, float]:
    """(seconds to the first element, elements/s after it, the cores the Ray workers got: their CPU seconds
    over the wall time; the trainer's own for a local run)."""
    t0 = time.perf_counter()
    it = iter(ds)
    cpu0 = time.process_time()
    next(it)
    t1 = time.perf_counter()
    n = 1
    for _ in it:
        n += 1
    t2 = time.perf_counter()
    try:
        cores = sum(w["cpu_s"] for w in service_report(it)[0]["worker_reports"]) / (t2 - t1)
    except ValueError:  # no distribute stage: the local thread
        cores = (time.process_time() - cpu0) / (t2 - t1)
    it.close()
    return t1 - t0, (n - 1) / max(1e-9, t2 - t1), cores


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--elements", type=int, default=1500)
    p.add_argument("--images", type=int, default=300)
    p.add_argument("--transfers", type=int, default=150)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    import ray

    from headrace.image.photos import iter_photo_jpegs

    print(machine_line())
    print(f"load average before: {os.getloadavg()}")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        t = time.perf_counter()
        work(0)
        print(f"work(): {1e3 * (time.perf_counter() - t):.2f} ms per element here")
        jpegs = np.array([j for j, _ in iter_photo_jpegs(a.images)], dtype=object)
        gil = hr.Dataset.range(a.elements).map(work)
        img = hr.Dataset.from_tensor_slices(jpegs).map(_resize)
        big = hr.Dataset.range(a.transfers).map(_big)
        tiny = hr.Dataset.range(20 * a.elements)
        runs: dict[str, list[tuple[float, float, float]]] = {}
        cases = {
            "gil local 1 thread": lambda: gil,
            "gil ray 1 worker": lambda: gil.apply(distribute("distributed_epoch", "local", num_workers=1)),
            "gil ray 2 workers": lambda: gil.apply(distribute("distributed_epoch", "local", num_workers=2)),
            "image local 1 thread": lambda: img,
            "image ray 1 worker": lambda: img.apply(distribute("distributed_epoch", "local", num_workers=1)),
            "image ray 2 workers": lambda: img.apply(distribute("distributed_epoch", "local", num_workers=2)),
            "transfer 4 MiB ray 1 worker": lambda: big.apply(distribute("distributed_epoch", "local", num_workers=1)),
            "int64 scalars ray 1 worker": lambda: tiny.apply(distribute("distributed_epoch", "local", num_workers=1)),
        }
        for _ in range(a.repeats):
            for name, make in cases.items():
                runs.setdefault(name, []).append(timed(make()))
        med = {name: statistics.median(r[1] for r in rs) for name, rs in runs.items()}
        print(f"{'contender':32s} {'elements/s':>11s} {'x local':>8s} {'start s':>8s} {'cores':>6s}  (median of "
              f"{a.repeats}; cores: CPU seconds the workers, or the local thread, got per second)")
        for name, rs in runs.items():
            base = med["gil local 1 thread" if name.startswith("gil") else "image local 1 thread"]
            ratio = f"{med[name] / base:.2f}" if name.startswith(("gil", "image")) else "-"
            print(f"{name:32s} {med[name]:11.1f} {ratio:>8s} {statistics.median(r[0] for r in rs):8.2f} "
                  f"{statistics.median(r[2] for r in rs):6.2f}")
        mb_s = med["transfer 4 MiB ray 1 worker"] * 4.0
        print(f"transfer through the object store to one trainer: {mb_s:.0f} MiB/s ({mb_s / 4:.0f} x 4 MiB/s)")
        print("elements through the dispatcher (int64 scalars, nothing to compute): "
              f"{med['int64 scalars ray 1 worker']:.0f}/s")
        estimate(med, mb_s)
    finally:
        ray.shutdown()
    print(f"load average after: {os.getloadavg()}")


def estimate(med: dict[str, float], mb_s: float) -> None:
    """64 workers feeding 8 trainers (8 workers per trainer), from the rates measured here: each trainer gets
    min(8 x the per-worker rate, its receive rate in bytes / the element size, the dispatcher's element rate)."""
    ceiling = med["int64 scalars ray 1 worker"]
    print("paper estimate, 64 workers -> 8 trainers (8 workers each; a worker = one core like these; a trainer "
          "receives as measured here):")
    for what, per_worker, size_mb in (("gil", med["gil ray 1 worker"], 8 / 2**20),
                                      ("image", med["image ray 1 worker"], 224 * 224 * 3 / 2**20)):
        limits = {"workers": 8 * per_worker, "transfer": mb_s / size_mb, "dispatcher": ceiling}
        bound = min(limits, key=lambda k: limits[k])
        per_trainer = limits[bound]
        print(f"  {what:5s}: per worker {per_worker:6.0f}/s; per trainer min(workers {limits['workers']:.0f}, "
              f"transfer {limits['transfer']:.0f}, dispatcher {ceiling:.0f}) = {per_trainer:.0f}/s ({bound}-bound); "
              f"64 workers: {8 * per_trainer:.0f}/s, {per_trainer * size_mb:.0f} MiB/s into each trainer")


if __name__ == "__main__":
    main()
