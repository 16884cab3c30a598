"""``headrace._memory``: which budget an iterator uses - the shared process budget, its own, a DataLoader
worker's share (issue 15, engine review)."""

from __future__ import annotations

import pytest

import headrace as hr

D = hr.Dataset
MiB = 1024**2


def test_iterators_without_a_budget_share_the_process_budget():
    a, b = iter(D.range(3).prefetch(1)), iter(D.range(3).prefetch(1))
    sa, sb = a.memory_stats(), b.memory_stats()
    assert sa["shared"] and sb["shared"] and sa["limit_bytes"] == sb["limit_bytes"]
    own = iter(D.range(3).with_options(hr.Options(memory_budget="1MiB")))
    assert not own.memory_stats()["shared"] and own.memory_stats()["limit_bytes"] == MiB
    for it in (a, b, own):
        it.close()


def test_workers_split_the_budget():
    from headrace import _memory

    with _memory.budget_share(4):  # a DataLoader worker, one of 4 (headrace.torch passes it so)
        it = iter(D.range(3).with_options(hr.Options(memory_budget="4MiB")))
        assert it.memory_stats()["limit_bytes"] == MiB
        it.close()
    assert _memory.process_share() == 1  # nothing process-wide is left set
    with pytest.raises(ValueError, match="workers=0"), _memory.budget_share(0):
        pass
