"""Restore is a fixed point: a state saved after a restore (after several) continues as the uninterrupted run.

Issue #22: ``ParquetDataset`` (4 MiB rows) ``.repeat(2).shuffle(16, seed=0)`` under 64 MiB, restored at 0 and
saved at 5, continued in another order from element 5 on: the restored source had produced nothing yet, so
its memory account guessed its element size; the budget's shares (and the shuffle's "another stage has not
sized an element" rule) differed from the saved run's, and the shuffle capped its buffer where the
uninterrupted run had not. Generated: seeded budgets, row and row-group sizes, save points, chains of restores.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import headrace as hr
from headrace.io import ParquetDataset
from tests.conftest import assert_same_order, straight_and_restored

KiB, MiB = 1024, 1024**2
CASES = 24


def _write(path: Path, n: int, row: int, group: int, compression: str, seed: int) -> str:
    rng = np.random.default_rng(seed)
    table = pa.table({"id": pa.array(np.arange(n), pa.int64()),
                      "x": pa.array([rng.bytes(row) for _ in range(n)], pa.binary())})
    pq.write_table(table, path, row_group_size=group, compression=compression)
    return str(path)


def _case(seed: int, tmp: Path) -> dict:
    rng = random.Random(seed)
    row = rng.choice([64 * KiB, 256 * KiB, MiB])
    group = rng.choice([1, 2, 4, 8])
    compression = rng.choice(["none", "snappy"])
    n = rng.randint(16, 32)
    path = _write(tmp / f"case-{seed}.parquet", n, row, group, compression, seed)
    batch_size = rng.choice([None, None, 2])
    batch_after = batch_size is None and rng.random() < 0.4  # (record batches may be 1 row: no batch of them)
    # every stage's minimum fits in 3/4 of the budget (a quarter is kept in reserve): no stall, no overdraft;
    # the shuffle gets 3 to 20 rows more
    reader = (3 if compression == "snappy" else 2) * group * row + 2 * row  # what a row group's read holds
    minimum = reader + row * (2 + (8 if batch_after else 0))  # + the block, the shuffle's one, batch + unbatch
    chain = [rng.randint(0, 10) for _ in range(rng.randint(2, 3))]
    if rng.random() < 0.5:
        chain[0] = 0  # the issue's chain: restore at 0, then save
    return {"path": path, "budget": minimum * 4 // 3 + row * rng.choice([3, 5, 8, 12, 20]),
            "buffer": rng.choice([4, 8, 16]), "batch_size": batch_size,
            "shuffle_row_groups": rng.random() < 0.3, "batch_after": batch_after, "chain": chain}


def _dataset(case: dict) -> hr.Dataset:
    bs = case["batch_size"]
    ds = (ParquetDataset(case["path"], batch_size=bs, shuffle_row_groups=case["shuffle_row_groups"], seed=1)
          .repeat(2).shuffle(case["buffer"], seed=0))
    if case["batch_after"]:
        ds = ds.batch(2, drop_remainder=True).unbatch()
    return (ds.map(lambda e: e["id"].tolist() if bs else int(e["id"]))
            .with_options(hr.Options(memory_budget=case["budget"])))


@pytest.mark.parametrize("seed", range(CASES))
def test_a_chain_of_restores_continues_as_the_uninterrupted_run(tmp_path: Path, seed: int) -> None:
    _check(_case(seed, tmp_path))


def test_the_issue_chain_4mib_rows_under_64mib(tmp_path: Path) -> None:
    path = _write(tmp_path / "rows.parquet", 24, 4 * MiB, 1, "none", 0)
    for chain in ([0, 5], [0, 5, 3], [3, 2, 0]):
        _check({"path": path, "budget": 64 * MiB, "buffer": 16, "batch_size": None, "shuffle_row_groups": False,
                "batch_after": False, "chain": chain})


def _check(case: dict) -> None:
    want, stats, got = straight_and_restored(lambda: _dataset(case), case["chain"])
    assert stats["stalls"] == 0 and stats["overdraft_bytes"] == 0, f"an infeasible case: {stats}, {case}"
    assert sorted(map(str, got)) == sorted(map(str, want)), f"not exactly once: {case}"
    assert_same_order(got, want, case, 6)
