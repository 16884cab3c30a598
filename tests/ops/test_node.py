"""``DatasetNode`` (``headrace._ops.node``): the engine's own reads (``one_iteration``: the first element's spec,
counting records) leave nothing open when the stages fail to build."""

from __future__ import annotations

import pytest

import headrace as hr
from headrace import _memory


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
