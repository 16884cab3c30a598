"""``headrace.service._worker.SplitWorker`` in this process (no Ray): chunks bounded by elements / bytes / time,
a split opened with the elements to skip, a finished split answered with nothing, an element's error after the
chunk made before it, and ``close()`` (a restore) forgetting the split finished last."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import headrace as hr
from headrace.service._splits import plan_splits
from headrace.service._worker import SplitWorker


def _drain(worker: SplitWorker, split: list, skip: int = 0) -> list:
    out: list = []
    while True:
        chunk, finished, _ = worker.next_chunk(split, skip)
        out += [int(x) for x in chunk]
        if finished:
            return out


def _worker(ds: hr.Dataset, **chunk) -> tuple[SplitWorker, list]:
    settings = {"chunk_bytes": 1 << 20, "chunk_elements": 7, "chunk_s": 10.0, **chunk}
    plan = plan_splits(ds._node, "distributed_epoch", 2)
    return SplitWorker(ds._node, None, **settings), [list(s) for s in plan.splits]


def test_chunks_are_bounded_and_a_split_is_opened_at_its_skip(monkeypatch):
    monkeypatch.delitem(sys.modules, "ray", raising=False)  # (outside Ray, even where a test module started one)
    w, splits = _worker(hr.Dataset.range(1000))
    assert splits[3] == ["index", 187, 250]
    chunk, finished, report = w.next_chunk(splits[3], 2)
    assert [int(x) for x in chunk] == list(range(189, 196)) and not finished  # 7 a chunk, 2 skipped
    assert report["elements"] == 7 and report["node_id"] == "local" and report["start_rss_bytes"] > 0
    w2, _ = _worker(hr.Dataset.range(1000).map(lambda x: np.zeros(1000, np.int64) + x), chunk_bytes=20_000)
    assert len(w2.next_chunk(splits[0], 0)[0]) == 3  # 8 KB elements: the third passes 20 KB


def test_a_finished_split_answers_nothing_until_close():
    w, splits = _worker(hr.Dataset.range(300))
    first = _drain(w, splits[0])
    assert first == list(range(splits[0][1], splits[0][2])) and len(first) > 1
    assert w.next_chunk(splits[0], 0)[:2] == ([], True)  # a call still queued for it
    w.close()  # a restore: the split may come again
    assert _drain(w, splits[0], 1) == first[1:]


def test_an_error_comes_after_the_elements_made_before_it():
    def f(x):
        if x == 3:
            raise KeyError(3)
        return x

    w, _ = _worker(hr.Dataset.range(16).map(f))
    chunk, finished, _ = w.next_chunk(["index", 0, 8], 0)
    assert [int(x) for x in chunk] == [0, 1, 2] and not finished
    with pytest.raises(KeyError):
        w.next_chunk(["index", 0, 8], 0)
    assert _drain(w, ["index", 0, 8]) == [4, 5, 6, 7]
    assert _drain(w, ["index", 0, 8], 0) == []  # finished
    w.close()
    assert _drain(w, ["index", 0, 8], 4) == [5, 6, 7]  # 0, 1, 2, 4 delivered: the failed element has no count
    w.close()
    with pytest.raises(KeyError):  # restored right after 0, 1, 2: the element that failed fails again
        w.next_chunk(["index", 0, 8], 3)
