"""The service sweep: generated cases of ``headrace.service.distribute`` on one 2-node local Ray cluster,
judged element by element (the cases and the judge: ``tests/service/sweep.py``).

Upstream shapes (a ``range`` or an ``interleave`` of TFRecord files; maps sequential, parallel in order and
``deterministic=False``; seeded, unseeded and fixed shuffles; filters; ``batch`` then ``unbatch``;
``ignore_errors``) x kill points (none, a worker actor, the whole worker node, the trainer with a saved state
restored into a fresh pipeline, 1-3 times: restores of restores) x the trainer's epoch (0-2). The cluster
(``ray.cluster_utils.Cluster`` on 127.0.0.1: a head and a worker node of 1 CPU each) is started once and
reused by every case; a node kill removes the worker node and adds a fresh one.

Prints the machine (read now), the date, then ``N cases, N lost, N duplicated, N reordered, N hangs, N reshuffle
failures, N errors`` (element counts for the first three), the cases per kill point, the longest ``next()``,
and each failing case with its seed (rerun one: ``--first-seed S --cases 1``)::

    python bench/service_sweep.py --cases 200
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # every Ray process on 127.0.0.1
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "service"))

import sweep  # noqa: E402

from headrace._machine import machine_line  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--first-seed", type=int, default=0)
    a = p.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    print(machine_line())
    print(f"date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; load average before: {os.getloadavg()}")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1"})
    cluster.holder = {"worker": cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")}
    ray.init(address=cluster.address, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sweep)  # (the workers cannot import the tests' modules)
    totals: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()
    failures = []
    worst = 0.0
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            files = sweep.write_files(Path(tmp))
            for seed in range(a.first_seed, a.first_seed + a.cases):
                case = sweep.generate(seed)
                v = sweep.run_case(case, files, cluster)
                kinds[case.kill] += 1
                kinds["restores"] += len(case.at) if case.kill == "trainer" else 0
                for k in ("lost", "duplicated", "reordered", "hang", "reshuffle", "epoch_blind"):
                    totals[k] += getattr(v, k)
                totals["errors"] += bool(v.error)
                worst = max(worst, v.worst_next_s)
                if v.failed():
                    failures.append((case, v))
                    print(f"FAIL {case.describe()}: {v}", flush=True)
                elif seed % 20 == 0:
                    print(f"  ... {seed - a.first_seed + 1} cases, {time.monotonic() - started:.0f} s", flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(f"{a.cases} cases in {time.monotonic() - started:.0f} s: {totals['lost']} lost, {totals['duplicated']} "
          f"duplicated, {totals['reordered']} reordered, {totals['hang']} hangs, {totals['reshuffle']} reshuffle "
          f"failures, {totals['errors']} errors")
    print(f"kill points: {kinds['none']} none, {kinds['actor']} actor, {kinds['node']} node, {kinds['trainer']} "
          f"trainer ({kinds['restores']} restores); longest next(): {worst:.1f} s; epoch-blind (a reshuffling "
          f"upstream whose splits kept their order between two epochs: too few elements): {totals['epoch_blind']}")
    print(f"load average after: {os.getloadavg()}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
