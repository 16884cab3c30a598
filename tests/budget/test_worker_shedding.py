"""Worker processes give way before the budget is overdrawn: a process map's workers whose measured size grew
after the other stages' buffers were sized (a seeded shuffle's capacity, a batch being assembled) are ended,
down to the stage's last, before any stage goes over the budget (docs/design/budget.md, "Shedding before the
stall breaker"). Judged from outside, in a child process with a watchdog: a pipeline that yields no batch for
20 s is a hang, not a slow run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

MiB = 1024**2

# The child: a worker's RSS is a synthetic measurement (small for its first calls, then large: a function that
# imports a library or fills a cache), measured after every call, so the sizes do not depend on the machine.
CHILD = r"""
import json, os, sys, threading, time, warnings
import numpy as np
import headrace as hr
from headrace._engine.pool import process_worker

limit, small, big, grow_at, n = (int(a) for a in sys.argv[1:6])
process_worker.REMEASURE_S = 0.0
process_worker._Proc.rss = lambda self: big if self.calls >= grow_at else small


def make(i):
    time.sleep(0.002)
    return np.full(64 * 1024, i, np.float32)  # 256 KiB


def executor_of(tree):
    return tree.get("executor") or next((e for t in tree["inputs"] if (e := executor_of(t))), None)


warnings.simplefilter("ignore", hr.MemoryBudgetWarning)
ds = (hr.Dataset.range(n).map(make, num_parallel_calls=2, executor="process")
      .shuffle(1000, seed=0).batch(64).prefetch(2).with_options(hr.Options(memory_budget=limit)))
it = iter(ds)
last = [time.monotonic()]


def watchdog():
    while time.monotonic() - last[0] < 20.0:
        time.sleep(0.2)
    print(json.dumps({"stalled": it.memory_stats()}), flush=True)
    os._exit(3)


threading.Thread(target=watchdog, daemon=True).start()
seen = []
for batch in it:
    seen.extend(int(x) for x in batch[:, 0])
    last[0] = time.monotonic()
stats = it.memory_stats()
executor = executor_of(it.explain()["tree"])
it.close()
print(json.dumps({"elements": sorted(seen) == list(range(n)), "peak": stats["peak_bytes"],
                  "overdraft": stats["overdraft_bytes"], "executor": executor}))
"""


@pytest.mark.parametrize("grow_at", [4, 30], ids=["grown-before-the-buffers-fill", "grown-once-they-are-full"])
def test_worker_processes_grown_past_the_room_beside_full_buffers_are_ended_not_overdrawn(grow_at):
    # The seed image pipeline on `speed`: its map's two worker processes (133 MB measured) beside its seeded
    # shuffle's fixed capacity (70 MB) and batch(64)'s assembly (77 MB) needed 280 MB of 256 MiB; the stall
    # breaker overdrew once, and from then on the total never fell below the limit: every element waited
    # for the stall breaker (1 s, restarted by each element's own hand-off), ~1 element/s: a hang.
    # Here two workers of 38 MiB, the shuffle's ~34 MiB and the batch's 32 MiB need 142 MiB of 128 MiB; one
    # worker fits. Growth after 4 calls (runs of elements) is charged while it fits (a stall sheds a worker
    # later); after 30, the buffers are full and the growth itself does not fit (the grown worker is ended).
    # Before the fix, both went over the budget and then crawled: the watchdog's 20 s without a batch.
    limit = 128 * MiB
    args = [str(v) for v in (limit, 12 * MiB, 38 * MiB, grow_at, 640)]
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["elements"], "each element exactly once"
    assert out["executor"]["executor"] == "process", out["executor"]
    assert out["peak"] <= limit and out["overdraft"] == 0, out
