"""``TextLineDataset -> batch``: the lines reach ``batch`` as runs of the block's object array
(``runs.ColumnRuns``). The batches equal the row path's (a map in between) across blocks, an over-long line
(the run stops after it), a damaged GZIP file and the end; every state restores exactly; each batch's bytes,
counted from its lines' lengths, equal its ``nbytes``."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import headrace as hr
from headrace._ops import batch as batch_module
from headrace._structure import nbytes
from tests.io.io_reader_checks import assert_state_roundtrip


def _files(tmp_path: Path) -> list[str]:
    """A file of short and a few long lines, a GZIP file cut in its middle, and a last short file."""
    lines = [b"line %d" % i + (b"x" * 5000 if i % 97 == 0 else b"") + (b"\r" if i % 5 == 0 else b"")
             for i in range(3000)]
    (tmp_path / "a.txt").write_bytes(b"\n".join(lines))
    whole = gzip.compress(b"".join(b"gz %d\n" % i for i in range(40_000)))
    (tmp_path / "cut.txt.gz").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "z.txt").write_bytes(b"last 1\nlast 2\n")
    return [str(tmp_path / n) for n in ("a.txt", "cut.txt.gz", "z.txt")]


def _outcomes(ds: hr.Dataset) -> list[Any]:
    """Each batch's lines, or the error's type in its place; the iteration goes on after an error."""
    out: list[Any] = []
    with iter(ds) as it:
        while True:
            try:
                out.append(next(it).tolist())
            except StopIteration:
                return out
            except hr.DataLossError as e:
                out.append(type(e).__name__)


def test_runs_into_batch_equal_the_row_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[tuple[int, int]] = []
    real = batch_module._concatenated

    def concatenated(runs: list[Any], held: int, count: int) -> tuple[Any, int]:
        out, n = real(runs, held, count)
        sizes.append((n, nbytes(out)))
        return out, n

    monkeypatch.setattr(batch_module, "_concatenated", concatenated)
    ds = hr.io.TextLineDataset(_files(tmp_path), compression_type="AUTO").with_options(
        hr.Options(memory_budget=1 << 20))  # (16 KiB reads: many blocks)
    runs, rows = _outcomes(ds.batch(100)), _outcomes(ds.map(lambda line: line).batch(100))
    assert runs == rows and runs.count("DataLossError") == 1 and runs[-1][-1] == b"last 2"
    assert sizes and all(n == real_n for n, real_n in sizes)  # (the run path was taken, sized exactly)
    assert_state_roundtrip(ds.ignore_errors().batch(100), [0, 1, 7, 30, 31])
    clean = hr.io.TextLineDataset(_files(tmp_path)[0]).with_options(hr.Options(memory_budget=1 << 20))
    assert_state_roundtrip(clean.batch(64), [0, 1, 5, 46, 47])  # (restored between batches of runs)


def test_a_run_stops_after_a_line_larger_than_the_batch_has_room_for(tmp_path: Path) -> None:
    p = tmp_path / "grow.txt"
    p.write_bytes(b"".join(b"%d" % i + b"y" * (i * 200) + b"\n" for i in range(300)))
    got = [x for b in hr.io.TextLineDataset(str(p)).batch(32) for x in b.tolist()]
    assert [len(x) for x in got] == [len(b"%d" % i) + i * 200 for i in range(300)]
    assert np.array_equal(next(iter(hr.io.TextLineDataset(str(p)).batch(4))),
                          np.array([b"0", b"1" + b"y" * 200, b"2" + b"y" * 400, b"3" + b"y" * 600], dtype=object))
