"""Stream 8x the memory budget through shuffle + parallel map + prefetch: the budget holds, RSS stays put."""

from __future__ import annotations

import warnings

import numpy as np
import psutil
import pytest

import headrace as hr

MiB = 1024**2


@pytest.mark.slow
def test_stream_4gib_through_a_256mib_budget():
    budget = 256 * MiB
    element = MiB
    n = 4096  # 4 GiB in total, 16x the budget

    def make(i):
        return {"pixels": np.full(element, i % 251, np.uint8), "id": i}

    ds = (hr.Dataset.range(n)
          .map(make, num_parallel_calls=2)
          .shuffle(1000, seed=0)           # wants ~1 GiB: must shrink to its share of the budget
          .prefetch(64)
          .with_options(hr.Options(memory_budget=budget)))
    proc = psutil.Process()
    baseline = proc.memory_info().rss
    peak_rss = baseline
    ids = np.zeros(n, np.int64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with iter(ds) as it:
            for k, x in enumerate(it):
                assert x["pixels"][0] == x["id"] % 251
                ids[k] = x["id"]
                if k % 64 == 0:
                    peak_rss = max(peak_rss, proc.memory_info().rss)
            stats = it.memory_stats()
    assert sorted(ids.tolist()) == list(range(n)), "every element exactly once"
    assert stats["peak_bytes"] <= budget, stats
    assert stats["overdraft_bytes"] == 0
    assert stats["stages"]["shuffle(1000)"]["peak_bytes"] > budget // 4, "the shuffle used its share"
    assert any("shuffle(1000)" in str(w.message) for w in caught if issubclass(w.category, hr.MemoryBudgetWarning))
    growth = peak_rss - baseline
    assert growth <= budget * 1.1 + 64 * MiB, f"RSS grew by {growth / MiB:.0f} MiB for a {budget / MiB:.0f} MiB budget"
