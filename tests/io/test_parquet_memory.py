"""ParquetDataset under a memory budget, in a child process whose RSS is sampled from outside (psutil).

pyarrow reads a row group's column chunks and decodes their pages before it returns a record batch; a page of
large binary values is the whole chunk. Those buffers are charged before the row group is read (issue #22:
64 rows of 4 MiB per row group under 128 MiB grew RSS by 540 MiB while the tracked peak said 4 MiB).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rss_child import cap as _cap
from rss_child import reader_child, run_child

MiB = 1024**2
ROW = 4 * MiB

_CHILD = reader_child('ParquetDataset', 'ParquetDataset(path, batch_size=batch_size)', 'el["id"]')


def _write(path: Path, rows_per_group: int, groups: int, row: int = ROW) -> str:
    """Binary rows of 4 MiB (random: they do not compress), written as pyarrow does by default: one page per
    column chunk, so pyarrow decodes a whole row group's column at once."""
    rng = np.random.default_rng(0)
    writer = None
    for g in range(groups):
        ids = np.arange(g * rows_per_group, (g + 1) * rows_per_group)
        table = pa.table({"id": pa.array(ids, pa.int64()),
                          "x": pa.array([rng.bytes(row) for _ in ids], pa.binary())})
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema, compression="snappy")
        writer.write_table(table, row_group_size=rows_per_group)
    assert writer is not None
    writer.close()
    return str(path)


def _run(path: str, budget: int, batch_size: int | None) -> tuple[dict, int]:
    return run_child(_CHILD, path, str(budget), json.dumps(batch_size))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("pq-mem")
    return {"big": _write(d / "big.parquet", 16, 1), "fits": _write(d / "fits.parquet", 8, 3)}


def test_a_row_group_larger_than_the_budget_is_refused_before_it_is_read(files: dict[str, str]) -> None:
    budget = 32 * MiB  # the row group: 16 rows of 4 MiB, 64 MiB as stored (snappy), decompressed and decoded
    out, growth = _run(files["big"], budget, None)
    assert out["error"] is not None, f"no MemoryBudgetError; RSS grew by {growth / MiB:.0f} MiB"
    for part in ("big.parquet", "row group 0", "16 rows", "192.0 MiB of column chunks", "32.0 MiB", "row_group_size="):
        assert part in out["error"], (part, out["error"])
    assert out["rows"] == 0
    assert growth <= _cap(budget), f"RSS grew by {growth / MiB:.0f} MiB > cap {_cap(budget) / MiB:.0f} MiB"


@pytest.mark.parametrize("batch_size", [None, 2])
def test_a_row_group_that_fits_is_charged_while_it_is_read(files: dict[str, str], batch_size: int | None) -> None:
    budget = 128 * MiB  # a row group: 8 rows of 4 MiB, 32 MiB as stored (snappy), decompressed and decoded
    out, growth = _run(files["fits"], budget, batch_size)
    assert out["error"] is None and out["rows"] == 24
    assert out["buffers"] >= 96 * MiB, f"pyarrow's buffers not charged: {out}"
    assert out["peak"] <= budget and out["overdraft"] == 0, out
    assert growth <= _cap(budget), f"RSS grew by {growth / MiB:.0f} MiB > cap {_cap(budget) / MiB:.0f} MiB"


@pytest.mark.parametrize("batch_size", [None, 2])
def test_interleaved_readers_whose_buffers_cannot_be_held_together_are_refused(tmp_path, monkeypatch, batch_size):
    # Issue 22: two Parquet files interleaved (cycle_length=2), row groups of 8 rows x 4 MiB (~104 MiB of
    # buffers each, held while the row group is read) under 160 MiB: every turn of the cycle waited for the
    # stall breaker (152 s, 192 stalls, 5.8 GB overdrawn). Both readers hold their buffers at once, so it
    # cannot run inside the budget: it is refused at once, naming both. The same proportions, 1/16 the size.
    import headrace as hr
    import headrace._budget.admission as memory  # (where the stall breaker reads STALL_S)
    from headrace.io import ParquetDataset

    monkeypatch.setattr(memory, "STALL_S", 0.05)  # before the fix: stalls of 0.05 s, not 1 s
    row = ROW // 16
    paths = [_write(tmp_path / f"{name}.parquet", 8, 2, row) for name in ("a", "b")]
    budget = 10 * MiB

    def run(cycle_length: int) -> tuple[int, dict]:
        ds = (hr.Dataset.from_tensor_slices(paths)
              .interleave(lambda p: ParquetDataset(p, batch_size=batch_size), cycle_length=cycle_length)
              .with_options(hr.Options(memory_budget=budget)))
        with iter(ds) as it:
            n = sum(1 for _ in it)
            return n, it.memory_stats()

    with pytest.raises(hr.MemoryBudgetError, match=r"2 readers .* more than the whole memory budget .*cycle") as e:
        run(2)
    assert "parquet buffers" in str(e.value) and "parquet#2 buffers" in str(e.value)
    n, stats = run(1)  # one reader at a time holds its buffers alone: it runs inside the budget
    assert n == (32 if batch_size is None else 16)
    assert stats["stalls"] == 0 and stats["overdraft_bytes"] == 0 and stats["peak_bytes"] <= budget
