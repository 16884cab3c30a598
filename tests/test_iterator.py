"""``headrace.Iterator`` (``headrace._iterator``): ``close()`` is fast, reports threads stuck in user code, and a
closed iterator says so (issue 15, engine review); an error met while ``iter()`` builds the stages is raised by
the first ``next()``, where tf.data raises it (issue 23), one test per kind of build error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

import headrace as hr
from headrace import _memory
from tests.conftest import REPO, wait_no_threads

D = hr.Dataset


def test_close_is_fast_reports_stuck_threads_and_a_closed_iterator_says_so():
    ds = D.range(10**9)
    for _ in range(4):
        ds = ds.map(lambda x: x, num_parallel_calls=2)
    it = iter(ds)
    next(it)
    t0 = time.monotonic()
    it.close()
    assert time.monotonic() - t0 < 1.5
    assert wait_no_threads(1.0) == []
    with pytest.raises(hr.IteratorClosedError, match="closed by close"):
        next(it)

    release = threading.Event()
    stuck = iter(D.range(10).map(lambda x: release.wait(5) and x, num_parallel_calls=1))
    def wait_in_next() -> None:
        with pytest.raises(hr.IteratorClosedError):
            next(stuck)

    with pytest.warns(ResourceWarning, match=r"still running after close\(\).*headrace-map"):
        t = threading.Thread(target=wait_in_next, daemon=True)
        t.start()
        time.sleep(0.3)
        stuck.close()
    assert stuck.threads_alive and all(n.startswith("headrace-map") for n in stuck.threads_alive)
    release.set()
    t.join(5)
    assert wait_no_threads(5.0) == []


def _gone():
    raise FileNotFoundError("no such shard: gone.tfrecord")


def _check_build_error(it: hr.Iterator, error: type[Exception], match: str) -> None:
    """``it``'s build failed: the first next() raises the error, so do the calls that need the stages, and
    again; memory_stats() answers; close() works, then the iterator is closed as any other."""
    with pytest.raises(error, match=match) as first:
        next(it)
    for call in (it.get_next, it.get_state, lambda: it.set_state({}), it.explain, it.__next__):
        with pytest.raises(error, match=match) as again:
            call()
        assert again.value is first.value
    assert it.memory_stats()["stages"] == {} and it.threads_alive == []
    it.close()
    it.close()
    for call in (it.__next__, it.get_state):
        with pytest.raises(hr.IteratorClosedError, match="closed by close"):
            call()


def test_a_second_cache_writer_raises_at_its_first_next_not_at_iter(tmp_path, monkeypatch):
    monkeypatch.setattr(_memory, "_process_budget", None)  # a fresh process budget, restored afterwards
    budget = _memory.process_budget()
    ds = D.range(5).shuffle(10**9, seed=1).cache(str(tmp_path / "c"))
    first = iter(ds)
    head = int(next(first))
    held = list(budget._accounts)
    second = iter(ds)  # tf.data: the lockfile's AlreadyExistsError comes from the first GetNext
    assert list(budget._accounts) == held  # the second's shuffle and cache accounts: closed at the build
    _check_build_error(second, FileExistsError, r"another iterator is writing this cache file \(lock .*c\.hrcache")
    assert sorted([head, *(int(x) for x in first)]) == list(range(5))  # the first writer goes on, fills it
    first.close()
    assert sorted(int(x) for x in ds) == list(range(5))  # read from the file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.hrcache"]
    assert (budget._accounts, budget.total_bytes) == ([], 0)


def test_a_from_source_factory_that_raises_raises_at_the_first_next(monkeypatch):
    monkeypatch.setattr(_memory, "_process_budget", None)
    budget = _memory.process_budget()
    ds = D.zip(D.range(10).shuffle(10**9, seed=1), D.from_source(_gone, name="shards"))
    it = iter(ds)
    assert (budget._accounts, budget.total_bytes) == ([], 0)
    _check_build_error(it, FileNotFoundError, r"gone\.tfrecord")
    for x in D.range(3):  # nothing of it is left: a later pipeline runs as before
        assert int(x) in range(3)


def test_a_file_missing_when_the_reader_opens_it_raises_at_the_first_next(tmp_path):
    from headrace.io import ParquetDataset

    it = iter(ParquetDataset(str(tmp_path / "gone.parquet")))
    _check_build_error(it, FileNotFoundError, r"ParquetDataset: no such file: .*gone\.parquet")


def test_the_calls_that_iterate_for_the_user_raise_a_build_error_from_themselves(tmp_path):
    """reduce, get_single_element, save, a for loop: each iterates (and closes) its own iterator, so the error
    comes from the call, as before and as in tf.data; nothing is left open."""
    ds = D.zip(D.range(3), D.from_source(_gone))
    for call in (lambda: ds.reduce(0, lambda s, x: s), ds.get_single_element, lambda: [x for x in ds],
                 lambda: ds.save(str(tmp_path / "saved"))):
        with pytest.raises(FileNotFoundError, match=r"gone\.tfrecord"):
            call()
    assert not (tmp_path / "saved").exists()


def test_an_interrupt_while_building_is_raised_by_iter_itself():
    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        iter(D.from_source(interrupted))


_CLOSE_INTERRUPTED = """
import json, signal, threading, time
import psutil
import headrace as hr
from headrace._engine.pool import process_pool as proc_pool
from tests.engine.pool.proc_fns import times_three

signal.signal(signal.SIGINT, signal.default_int_handler)
real_close = proc_pool.ProcessWorkers.close

def slow_close(self):  # close()'s slowest step, made slower: Ctrl-C pressed again lands inside it
    time.sleep(0.6)
    real_close(self)

proc_pool.ProcessWorkers.close = slow_close
it = iter(hr.Dataset.range(10**6).map(times_three, num_parallel_calls=2, executor="process"))
for _ in range(20):
    next(it)
threading.Timer(0.2, signal.pthread_kill, (threading.get_ident(), signal.SIGINT)).start()
interrupted = False
try:
    it.close()
except KeyboardInterrupt:
    interrupted = True
time.sleep(1.5)
alive = [p.pid for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE]
print(json.dumps({"interrupted": interrupted, "alive": alive}))
"""


def test_an_interrupt_inside_close_still_ends_every_worker_process():
    # Issue 37: Ctrl-C pressed again while close() (the first one's) ran cut the teardown short: the worker
    # processes of the closed iterator lived on until the interpreter ended.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    out = subprocess.run([sys.executable, "-c", _CLOSE_INTERRUPTED], capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=120, start_new_session=True)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"interrupted": True, "alive": []}
