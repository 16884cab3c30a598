"""The text and CSV readers inside DataLoader workers started by ``spawn`` and ``forkserver``: the recipe (files,
formats, a lambda) pickles into fresh interpreters, each worker reads its share of the files, and together they
give every element exactly once."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

import headrace as hr

torch_data = pytest.importorskip("torch.utils.data")
to_torch = pytest.importorskip("headrace.torch").to_torch


def _text(tmp_path: Path) -> tuple[hr.Dataset, list[int]]:
    paths = []
    for f in range(2):
        p = tmp_path / f"part-{f}.txt.gz"
        p.write_bytes(gzip.compress(b"".join(b"%d words here\r\n" % (f * 100 + i) for i in range(60))))
        paths.append(str(p))
    ds = hr.io.TextLineDataset(paths, compression_type="GZIP").map(lambda line: np.int64(line.split()[0]))
    return ds, [f * 100 + i for f in range(2) for i in range(60)]


def _csv(tmp_path: Path) -> tuple[hr.Dataset, list[int]]:
    paths = []
    for f in range(2):
        p = tmp_path / f"part-{f}.csv"
        p.write_bytes(b"id,name\n" + b"".join(b'%d,"n, %d"\n' % (f * 100 + i, i) for i in range(60)))
        paths.append(str(p))
    ds = hr.io.CsvDataset(paths, [np.int64, bytes], header=True).map(lambda i, name: i)
    return ds, [f * 100 + i for f in range(2) for i in range(60)]


@pytest.mark.slow
@pytest.mark.parametrize(("context", "reader"), [("spawn", _csv), ("forkserver", _text)])
def test_a_reader_in_spawned_and_forkserver_workers(tmp_path: Path, context: str, reader: object) -> None:
    ds, expected = reader(tmp_path)  # type: ignore[operator]
    loader = torch_data.DataLoader(to_torch(ds), batch_size=None, num_workers=2, multiprocessing_context=context)
    got = [int(x) for x in loader]
    assert sorted(got) == expected
