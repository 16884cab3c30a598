"""headrace.torch: each of ``k`` DataLoader workers builds and runs its iterators in ``1/k`` of the memory
budget (docs/memory-budget.md), passed where the worker's iterator is made (``budget_share``), not set
process-wide."""

from __future__ import annotations

import os

import pytest
from torch.utils.data import DataLoader

import headrace as hr
import headrace._iterator as iterator_module
from headrace import _memory
from headrace.torch import MAX_WORKERS, TorchEpochIterator, to_torch

MiB = 1 << 20


def _recording(monkeypatch: pytest.MonkeyPatch, log: list[tuple[int, int, bool]] | None, path: str = "") -> None:
    made = iterator_module.budget_for

    def budget_for(limit: int | None) -> _memory.MemoryBudget:
        b = made(limit)
        if log is not None:
            log.append((os.getpid(), b.limit_bytes, b.shared))
        else:  # (a worker process: through a file)
            with open(path, "a") as f:
                f.write(f"{os.getpid()} {b.limit_bytes} {int(b.shared)}\n")
        return b

    monkeypatch.setattr(iterator_module, "budget_for", budget_for)


def _epoch(ds: hr.Dataset, share: int) -> TorchEpochIterator:
    """Epoch 0 of ``ds`` as a worker with a ``1/share`` budget share iterates it."""
    import torch

    return TorchEpochIterator(ds, 0, share, [0, share], torch.zeros(1 + MAX_WORKERS, dtype=torch.int64), 1)


def test_a_workers_iterator_gets_its_share_and_leaves_nothing_behind(monkeypatch):
    log: list[tuple[int, int, bool]] = []
    _recording(monkeypatch, log)
    ds = hr.Dataset.range(6).with_options(hr.Options(memory_budget="4MiB"))
    assert [int(x) for x in _epoch(ds, 4)] == list(range(6))
    assert [limit for _, limit, _ in log] == [MiB]
    assert _memory.process_share() == 1 and _memory.budget_for(4 * MiB).limit_bytes == 4 * MiB
    log.clear()
    assert len(list(_epoch(hr.Dataset.range(3), 2))) == 3
    assert log == [(os.getpid(), _memory.process_budget(2).limit_bytes, True)]
    assert _memory.process_budget(2) is not _memory.process_budget()


@pytest.mark.parametrize("budget", ["4MiB", None])
def test_dataloader_workers_split_the_budget(tmp_path, monkeypatch, budget):
    path = str(tmp_path / "budgets.txt")
    _recording(monkeypatch, None, path)
    ds = hr.Dataset.range(8)
    if budget is not None:
        ds = ds.with_options(hr.Options(memory_budget=budget))
    loader = DataLoader(to_torch(ds), batch_size=None, num_workers=2, multiprocessing_context="fork")
    assert sorted(int(x) for x in loader) == list(range(8))
    rows = [line.split() for line in (tmp_path / "budgets.txt").read_text().splitlines()]
    assert len({pid for pid, _, _ in rows}) == 2 and os.getpid() not in {int(pid) for pid, _, _ in rows}
    if budget is not None:
        assert {(int(limit), shared) for _, limit, shared in rows} == {(2 * MiB, "0")}
    else:
        assert all(shared == "1" for _, _, shared in rows)
