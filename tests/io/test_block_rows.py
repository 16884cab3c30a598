"""Rows of a columnar reader taken by a ``map`` inside a ``batch`` (``BlockRowIterator.elements_ready``: runs of
rows made without a Python call each) are the rows ``__next__`` gives: same values, dtypes, order, and a state
taken anywhere (inside a run, at its end, between blocks) restores exactly the rest, also chained.

What would break it: a run's position not counted (rows repeated or skipped after a restore or when ``__next__``
takes over), a run made across a block's end, values that are views into the block or of another type."""

from __future__ import annotations

import random
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import headrace as hr
from headrace.io import HDF5Dataset, ParquetDataset
from headrace.io._blocks import READY_ROWS
from tests.conftest import read_through_restores


def _parquet(path: Path, n: int, group: int) -> str:
    rng = np.random.default_rng(n)
    pq.write_table(pa.table({
        "id": pa.array(np.arange(n), pa.int64()), "x": pa.array(rng.random(n), pa.float64()),
        "y": pa.array(rng.random(n).astype(np.float32), pa.float32()),
        "label": pa.array(rng.integers(0, 9, n).astype(np.int32), pa.int32()),
        "name": pa.array([f"row {i}" for i in range(n)], pa.string())}), path, row_group_size=group)
    return str(path)


def _hdf5(path: Path, n: int, vector: bool) -> str:
    with h5py.File(path, "w") as f:
        f["id"] = np.arange(n)
        f["x"] = np.arange(n, dtype=np.float32) / 3
        if vector:  # rows of arrays: copied one by one, no runs
            f["v"] = np.arange(n * 3, dtype=np.int16).reshape(n, 3)
    return str(path)


def _row_fn(r: dict) -> dict:
    return {k: v for k, v in r.items()}  # the row as the map sees it, normalized and batched by headrace


def _plain(ds: hr.Dataset) -> list[dict]:
    """Rows through ``__next__`` only (a map with no batch after it)."""
    return list(ds.map(_row_fn))


def _unbatched(batches: list[dict]) -> list[dict]:
    return [{k: b[k][i] for k in b} for b in batches for i in range(len(next(iter(b.values()))))]


def _same(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.keys() == w.keys(), i
        for k in g:
            assert type(g[k]) is type(w[k]) and np.array_equal(g[k], w[k]), (i, k, g[k], w[k])


@pytest.mark.parametrize("batch", [1, 7, 256, READY_ROWS + 3])
def test_rows_in_a_batch_are_the_rows_one_by_one(tmp_path: Path, batch: int) -> None:
    path = _parquet(tmp_path / "t.parquet", 3 * READY_ROWS + 11, group=READY_ROWS + 100)  # runs cross groups
    want = _plain(ParquetDataset(path))
    got = list(ParquetDataset(path).map(_row_fn).batch(batch))
    assert {b["x"].dtype for b in got} == {np.dtype(np.float64)}
    assert {b["name"].dtype for b in got} == {np.dtype(object)}
    _same(_unbatched(got), want)


def test_hdf5_rows_with_and_without_runs(tmp_path: Path) -> None:
    for vector in (False, True):
        path = _hdf5(tmp_path / f"t{vector}.h5", 2 * READY_ROWS + 5, vector)
        keys = ["id", "x", "v"] if vector else ["id", "x"]
        _same(_unbatched(list(HDF5Dataset(path, keys).map(_row_fn).batch(100))), _plain(HDF5Dataset(path, keys)))


def test_hdf5_single_key_rows_are_values_in_a_batch_too(tmp_path: Path) -> None:
    path = _hdf5(tmp_path / "t.h5", 2 * READY_ROWS + 5, vector=False)
    want = list(HDF5Dataset(path, "x").map(lambda v: v))
    got = [v for b in HDF5Dataset(path, "x").map(lambda v: v).batch(100) for v in b]
    assert [type(v) for v in got] == [type(v) for v in want] == [np.float32] * len(want)
    assert got == want


def _key(batch: dict) -> list:
    return [tuple(r) for r in zip(batch["id"].tolist(), batch["name"].tolist())]


@pytest.mark.parametrize("seed", range(6))
def test_a_chain_of_restores_anywhere_in_a_run_gives_exactly_the_rest(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(READY_ROWS, 3 * READY_ROWS)
    path = _parquet(tmp_path / "t.parquet", n, group=rng.choice([100, READY_ROWS, 2 * READY_ROWS]))
    batch = rng.choice([3, 64, 200])

    def make() -> hr.Dataset:
        return ParquetDataset(path).map(_row_fn).batch(batch)

    want = [r for b in make() for r in _key(b)]
    chain = [rng.randint(0, n // batch) for _ in range(rng.randint(1, 3))]
    got = [r for b in read_through_restores(make, chain) for r in _key(b)]
    assert got == want, (seed, chain, batch)



def test_a_run_not_used_up_is_handed_out_again(tmp_path: Path) -> None:
    # a batch of 3 takes 3 rows per call: remaking a run of READY_ROWS rows each time would cost 170x the work
    path = _parquet(tmp_path / "t.parquet", 2 * READY_ROWS, group=2 * READY_ROWS)
    with iter(ParquetDataset(path)) as it:
        stage = it._root
        next(it)  # a block in hand
        run = stage.elements_ready()
        taken = [next(run) for _ in range(3)]
        assert stage.elements_ready() is run and stage._offset == 4
        assert [int(r["id"]) for r in taken] == [1, 2, 3] and int(next(it)["id"]) == 4  # __next__ goes on
        assert stage.elements_ready() is not run and int(next(stage.elements_ready())["id"]) == 5


def _scalars_fn(r: dict) -> dict:
    """A row -> a flat row of scalars, Python's among them (handed to batch as columns: ``fill_columns``)."""
    return {"f": r["x"] * 2.0 + r["y"], "n": len(r["name"]), "id": int(r["id"]), "half": float(r["label"]) / 2,
            "big": bool(r["id"] % 2), "label": r["label"]}


@pytest.mark.parametrize("batch", [1, 7, 256, READY_ROWS + 3])
def test_scalar_results_in_a_batch_are_the_results_one_by_one(tmp_path: Path, batch: int) -> None:
    path = _parquet(tmp_path / "t.parquet", 3 * READY_ROWS + 11, group=READY_ROWS + 100)
    got = list(ParquetDataset(path).map(_scalars_fn).batch(batch))
    want = list(ParquetDataset(path).map(_scalars_fn).filter(lambda r: True).batch(batch))  # (no fusion)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g) == list(w) == ["f", "n", "id", "half", "big", "label"]
        for k in g:
            assert g[k].dtype == w[k].dtype and g[k].tolist() == w[k].tolist(), k
    dtypes = {k: str(v.dtype) for k, v in got[0].items()}  # Python int -> int64, float -> float32, bool -> bool
    assert dtypes == {"f": "float64", "n": "int64", "id": "int64", "half": "float32", "big": "bool", "label": "int32"}


def _raising_fn(r: dict) -> dict:
    i = int(r["id"])
    if i % 97 == 41:
        raise ValueError(f"bad row {i}")
    return {"id": i, "n": len(r["name"])}


@pytest.mark.filterwarnings("ignore::headrace.IgnoredErrorsWarning")
@pytest.mark.parametrize("seed", range(6))
def test_restores_after_errors_inside_runs_give_exactly_the_rest(tmp_path: Path, seed: int) -> None:
    """Errors raised by the function inside a run (columns made by map over the run): each reported once with its
    element, the batch goes on with what it had, and a chain of restores anywhere gives exactly the rest."""
    rng = random.Random(seed)
    n = rng.randint(READY_ROWS, 3 * READY_ROWS)
    path = _parquet(tmp_path / "t.parquet", n, group=rng.choice([100, READY_ROWS]))
    batch = rng.choice([3, 64, 200])

    def make() -> hr.Dataset:
        return ParquetDataset(path).map(_raising_fn).batch(batch).ignore_errors()

    want = [i for b in make() for i in b["id"].tolist()]
    assert want == [i for i in range(n) if i % 97 != 41]
    chain = [rng.randint(0, n // batch) for _ in range(rng.randint(1, 3))]
    got = [i for b in read_through_restores(make, chain) for i in b["id"].tolist()]
    assert got == want, (seed, chain, batch)


def test_csv_records_reach_the_function_as_arguments_in_runs(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("".join(f"{i},{i / 4},w{i % 7}\n" for i in range(2 * READY_ROWS + 9)))

    def make() -> hr.Dataset:
        return hr.io.CsvDataset(str(path), [np.int32, np.float32, bytes]).map(lambda a, b, c: (a, b * 2, len(c)))

    got = list(make().batch(100))
    want = list(make().filter(lambda *r: True).batch(100))
    assert [c.dtype for c in got[0]] == [np.int32, np.float32, np.int64]
    assert [[c.tolist() for c in b] for b in got] == [[c.tolist() for c in b] for b in want]
