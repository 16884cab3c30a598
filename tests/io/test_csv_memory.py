"""``CsvDataset`` under a memory budget, as the OS sees it (RSS of a child process, ``rss_child.py``): a file of
many chunks read in batches stays within the budget; a 64 MiB record under a 16 MiB budget is refused with an
error naming the file and line, before it is read whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.io.rss_child import MiB, cap, reader_child, run_child

_CSV = "CsvDataset(path, [__import__('numpy').int64, [b'']])"
CODE = reader_child("CsvDataset", f"({_CSV}.batch(batch_size) if batch_size else {_CSV})", "el[0]")


def test_many_chunks_stay_within_the_budget(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    rng = np.random.default_rng(0)
    with path.open("wb") as f:
        for start in range(0, 400_000, 50_000):
            ids = np.arange(start, start + 50_000)
            words = rng.integers(0, 10**12, 50_000)
            f.write("".join(f"{i},word{w}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n"
                            for i, w in zip(ids.tolist(), words.tolist())).encode())
    assert path.stat().st_size > 24 * MiB
    budget = 16 * MiB
    out, growth = run_child(CODE, str(path), str(budget), "256")
    assert out["error"] is None and out["rows"] == 400_000
    assert growth <= cap(budget), f"RSS grew {growth / MiB:.1f} MiB under a {budget / MiB:.0f} MiB budget"
    assert out["overdraft"] == 0 and 0 < out["peak"] <= budget


def test_a_record_larger_than_the_budget_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.csv"
    with path.open("wb") as f:
        f.write(b"1,small\n2,")
        block = b"x" * MiB
        for _ in range(64):
            f.write(block)
        f.write(b"\n3,small\n")
    budget = 16 * MiB
    out, growth = run_child(CODE, str(path), str(budget), "null")
    assert out["error"] is not None and "huge.csv" in out["error"] and "line 2" in out["error"]
    assert out["rows"] == 1
    assert growth <= cap(budget), f"RSS grew {growth / MiB:.1f} MiB under a {budget / MiB:.0f} MiB budget"


def test_a_long_quoted_field_stays_within_the_budget(tmp_path: Path) -> None:
    # finding the last record end by quote parity made int64 temporaries of 8 bytes per buffered byte (uncharged):
    # a quoted field grown to the 16 MiB a record may take under 64 MiB grew RSS ~270 MiB
    path = tmp_path / "quoted.csv"
    with path.open("wb") as f:
        f.write(b'1,"')
        for _ in range(20):
            f.write(b"x" * MiB)
        f.write(b'"\n2,b\n')
    budget = 64 * MiB
    out, growth = run_child(CODE, str(path), str(budget), "null")
    assert out["error"] is not None and "quoted.csv" in out["error"] and "line 1" in out["error"]
    assert growth <= cap(budget), f"RSS grew {growth / MiB:.1f} MiB under a {budget / MiB:.0f} MiB budget"
