"""``DatasetNode`` (``headrace._engine.recipe``): the engine's own reads (``one_iteration``: the first element's spec,
counting records) leave nothing open when the stages fail to build, nor worker processes once they are done."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import headrace as hr
from headrace import _memory
from tests.conftest import REPO


def test_one_iteration_that_fails_to_build_closes_what_it_opened(tmp_path, monkeypatch):
    monkeypatch.setattr(_memory, "_process_budget", None)  # a fresh process budget, restored afterwards
    budget = _memory.process_budget()
    cached = hr.Dataset.range(3).cache(str(tmp_path / "c"))
    with iter(cached) as writer:  # holds the cache file's writer lock
        next(writer)
        reader = hr.Dataset.zip(hr.Dataset.range(10).shuffle(10**9, seed=1), cached)
        held = list(budget._accounts)
        with (pytest.raises(FileExistsError, match="another iterator is writing this cache file"),
              reader._node.one_iteration()):
            pass
        assert list(budget._accounts) == held  # the shuffle's account was left open on the process budget
    assert (budget._accounts, budget.total_bytes) == ([], 0)


_SPEC_READ = """
import gc, json, time
import psutil
import headrace as hr
from tests.engine.pool.proc_fns import untraceable_plus_one

gc.disable()  # what ends with the garbage collector stays: one_iteration must end it itself
ds = hr.Dataset.range(5, 9).map(untraceable_plus_one, num_parallel_calls=2, executor="process")
spec = ds.element_spec
time.sleep(0.5)
alive = [p.pid for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE]
print(json.dumps({"spec": str(spec), "alive": alive}))
"""


def test_one_iteration_ends_the_worker_processes_it_started():
    # Issue 37: the first element's spec read on worker processes left them to the garbage collector.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    out = subprocess.run([sys.executable, "-c", _SPEC_READ], capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["alive"] == [] and "int64" in result["spec"], result
