"""headrace's own warnings made errors (``-W error``, ``filterwarnings = error``): raised at the consumer's
``next()``, where nothing is half done, and the iteration goes on - never inside a pipeline thread's
bookkeeping (issue 22: a MemoryBudgetWarning raised in a worker, under the budget's lock, crashed the stage;
a restore's replay skipped that crash as a bad element forever: 260 s, then killed for memory).

Each case runs in a subprocess with a deadline and an RSS limit (a hang or a runaway loop fails the test,
it does not take the suite down)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import psutil

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEADLINE_S = 30.0
RSS_LIMIT = 1024 * 1024**2

PIPELINE = """
import json, time, warnings
import numpy as np
import headrace as hr
D = hr.Dataset

def f(i):
    time.sleep(0.001 * (int(i) % 3))
    return np.full(256 * 1024, i, np.int32)  # 1 MiB

def drain(it, got, said):
    while True:
        try:
            x = next(it)
        except StopIteration:
            return
        except hr.MemoryBudgetWarning as e:
            said.append(str(e))
            if len(said) > 5:
                return  # raised on every call: the pipeline is dead
            continue
        got.append(int(x[0]))
        if len(got) == 2:
            time.sleep(0.3)  # the consumer lags: the buffers fill to their (shrunk) share and warn
"""

PLAIN = PIPELINE + """
warnings.simplefilter("error", hr.MemoryBudgetWarning)
got, said = [], []
ds = D.range(40).map(f, num_parallel_calls=2).prefetch(8).with_options(hr.Options(memory_budget="6MiB"))
with iter(ds) as it:
    drain(it, got, said)
print(json.dumps({"got": got, "said": said}))
"""

RESTORE = PIPELINE + """
def ds():
    return (D.range(40).map(f, num_parallel_calls=2, deterministic=False).prefetch(8).shuffle(4, seed=1)
            .with_options(hr.Options(memory_budget="8MiB")))

with warnings.catch_warnings():
    warnings.simplefilter("ignore", hr.MemoryBudgetWarning)
    with iter(ds()) as it:
        got = [int(next(it)[0]) for _ in range(10)]
        state = json.loads(json.dumps(it.get_state()))
warnings.simplefilter("error", hr.MemoryBudgetWarning)
said = []
with iter(ds()) as it:  # a new pipeline: its warnings are said anew
    it.set_state(state)  # the shuffle re-reads its input: the prefetch's worker fills up and warns
    drain(it, got, said)
print(json.dumps({"got": got, "said": said}))
"""


def _run_bounded(code: str) -> dict:
    """Run ``code`` in a subprocess; fail on a hang (``DEADLINE_S``) or RSS (with children) over ``RSS_LIMIT``."""
    env = {**os.environ, "PYTHONPATH": os.path.join(REPO, "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)
    watched = psutil.Process(proc.pid)
    deadline = time.monotonic() + DEADLINE_S
    peak = 0
    try:
        while proc.poll() is None:
            try:
                rss = watched.memory_info().rss + sum(c.memory_info().rss for c in watched.children(recursive=True))
            except psutil.Error:
                rss = 0
            peak = max(peak, rss)
            assert rss <= RSS_LIMIT, f"the child's RSS reached {rss / 2**20:.0f} MiB"
            assert time.monotonic() < deadline, f"no result within {DEADLINE_S:.0f} s (a hang)"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _check(res: dict) -> None:
    got, said = res["got"], res["said"]
    assert len(said) == len(set(said)) and all("was configured for 8 elements" in m or
                                               "was configured for 16 elements" in m for m in said), said
    assert any("prefetch(8)" in m for m in said), said
    assert sorted(got) == list(range(40)), f"{len(got)} elements, missing {sorted(set(range(40)) - set(got))}"


def test_a_budget_warning_made_an_error_is_raised_at_next_and_the_iteration_goes_on():
    """The prefetch's shrunk-buffer warning arises in its worker thread: raised once at next(), then every
    element comes, each once (before: the stage crashed, next() raised the warning forever, 1 element)."""
    _check(_run_bounded(PLAIN))


def test_a_budget_warning_made_an_error_during_a_restore_neither_hangs_nor_loses_elements():
    """The warning arises in the replay a shuffle's restore reads (before: its scan skipped the crashed
    stage's error as a bad element, forever)."""
    _check(_run_bounded(RESTORE))


SCAN_CRASH = """
import json
import headrace as hr
from headrace._engine.pool import workers
D = hr.Dataset

def ds():
    return D.range(200).map(lambda i: i * 2, num_parallel_calls=2, deterministic=False).shuffle(16, seed=1)

with iter(ds()) as it:
    got = [int(next(it)) for _ in range(30)]
    state = json.loads(json.dumps(it.get_state()))

def broken(self, *args):  # a defect in the pool's own machinery, in every worker from now on
    raise RuntimeError("injected pool defect")

workers.WorkerThreads._work_loop = broken
with iter(ds()) as it:
    try:
        it.set_state(state)  # the shuffle scans a replay of its input, whose map crashes
        print(json.dumps({"raised": None}))
    except RuntimeError as e:
        print(json.dumps({"raised": str(e)}))
"""


def test_a_stage_crash_ends_a_restore_s_scan_instead_of_being_skipped_forever():
    """A crashed parallel stage raises its crash on every next(); the shuffle's restore scanning a replay
    skipped it as a bad element and asked again, forever (how the warning above hung for 260 s)."""
    assert _run_bounded(SCAN_CRASH) == {"raised": "injected pool defect"}
