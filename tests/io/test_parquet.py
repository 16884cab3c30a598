"""ParquetDataset on files written by pyarrow: values, projection, batches, shuffling, shards, state, errors."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from io_reader_checks import assert_disjoint_complete, assert_same, assert_state_roundtrip, assert_streams_equal

import headrace as hr
from headrace import DataLossError, StateError
from headrace.io import ParquetDataset

ROWS = [17, 9, 14]          # rows per file
ROW_GROUP = 5               # rows per row group


def _table(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "x": pa.array(ids * 0.5, pa.float32()),
        "flag": pa.array(ids % 3 == 0),
        "name": pa.array([f"row-{i}" for i in ids]),
        "blob": pa.array([bytes([i % 256]) * (i % 4) for i in ids], pa.binary()),
        "emb": pa.array([[i, -i, 2 * i] for i in ids], pa.list_(pa.float32(), 3)),
        "tags": pa.array([list(range(i % 3)) for i in ids], pa.list_(pa.int64())),
        "pair": pa.array([[i, i + 1] for i in ids], pa.list_(pa.int16())),
        "cat": pa.array([["a", "b"][i % 2] for i in ids]).dictionary_encode(),
    })


def _expected_row(i: int) -> dict:
    return {"id": np.int64(i), "x": np.float32(i * 0.5), "flag": np.bool_(i % 3 == 0),
            "name": f"row-{i}".encode(), "blob": bytes([i % 256]) * (i % 4),
            "emb": np.array([i, -i, 2 * i], np.float32), "tags": np.arange(i % 3, dtype=np.int64),
            "pair": np.array([i, i + 1], np.int16), "cat": [b"a", b"b"][i % 2]}


@pytest.fixture(scope="module")
def pq_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    d = tmp_path_factory.mktemp("parquet")
    paths, start = [], 0
    for k, n in enumerate(ROWS):
        p = d / f"part-{k}.parquet"
        pq.write_table(_table(start, n), p, row_group_size=ROW_GROUP)
        paths.append(str(p))
        start += n
    return paths


def _ids(ds: hr.Dataset) -> list[int]:
    out: list[int] = []
    for el in ds:
        ids = el["id"]
        out.extend(ids.tolist() if isinstance(ids, np.ndarray) else [int(ids)])
    return out


def test_rows_equal_what_pyarrow_wrote(pq_files: list[str]) -> None:
    ds = ParquetDataset(pq_files)
    assert ds.cardinality() == sum(ROWS) and len(ds) == sum(ROWS)
    got = list(ds)
    assert_streams_equal(got, [_expected_row(i) for i in range(sum(ROWS))])


def test_glob_pattern_and_bytes_paths(pq_files: list[str]) -> None:
    pattern = str(Path(pq_files[0]).parent / "part-*.parquet")
    assert _ids(ParquetDataset(pattern, columns=["id"])) == list(range(sum(ROWS)))
    assert _ids(ParquetDataset([p.encode() for p in pq_files[1:]], columns="id")) == list(range(17, 40))


def test_column_projection(pq_files: list[str]) -> None:
    rows = list(ParquetDataset(pq_files[0], columns=["name", "id"]))
    assert list(rows[3]) == ["name", "id"]
    assert_same(rows[3], {"name": b"row-3", "id": np.int64(3)})


def test_batches_stay_inside_row_groups(pq_files: list[str]) -> None:
    ds = ParquetDataset(pq_files, columns=["id", "x", "emb", "pair", "name"], batch_size=4)
    batches = list(ds)
    per_rg = [min(ROW_GROUP, n - s) for n in ROWS for s in range(0, n, ROW_GROUP)]
    assert [len(b["id"]) for b in batches] == [m for r in per_rg for m in [4] * (r // 4) + [r % 4] if m]
    assert ds.cardinality() == len(batches)
    b = batches[0]
    assert b["id"].dtype == np.int64 and b["x"].dtype == np.float32
    assert b["emb"].shape == (4, 3) and b["pair"].shape == (4, 2) and b["pair"].dtype == np.int16
    assert b["name"].dtype == object and b["name"][1] == b"row-1"
    np.testing.assert_array_equal(np.concatenate([b["id"] for b in batches]), np.arange(sum(ROWS)))


def test_ragged_lists_in_batches_raise(pq_files: list[str]) -> None:
    with pytest.raises(ValueError, match=r"column 'tags' of .*part-0\.parquet \(row group 0\).*lengths"):
        list(ParquetDataset(pq_files, columns=["tags"], batch_size=4))


def test_shuffle_row_groups(pq_files: list[str]) -> None:
    ds = ParquetDataset(pq_files, columns=["id"], shuffle_row_groups=True, seed=3)
    first, second = _ids(ds), _ids(ds)
    assert sorted(first) == sorted(second) == list(range(sum(ROWS)))
    assert first != list(range(sum(ROWS))) and first != second  # a new order each epoch
    assert first == _ids(ParquetDataset(pq_files, columns=["id"], shuffle_row_groups=True, seed=3))
    # rows inside a row group stay together and in order: at most one break per row-group boundary
    row_groups = sum(-(-n // ROW_GROUP) for n in ROWS)
    assert sum(b - a != 1 for a, b in itertools.pairwise(first)) <= row_groups - 1


@pytest.mark.parametrize("batch_size", [None, 3])
def test_shards_are_disjoint_and_complete(pq_files: list[str], batch_size: int | None) -> None:
    shards = []
    for index in range(3):
        ds = ParquetDataset(pq_files, columns=["id"], batch_size=batch_size, num_shards=3, index=index,
                            shuffle_row_groups=True, seed=index)
        ids = _ids(ds)
        assert ds.cardinality() == (len(ids) if batch_size is None else len(list(ds)))
        shards.append(ids)
    assert all(shards)
    assert_disjoint_complete(shards, list(range(sum(ROWS))))


@pytest.mark.parametrize("kwargs", [{}, {"batch_size": 4}, {"shuffle_row_groups": True, "seed": None}])
def test_state_roundtrip(pq_files: list[str], kwargs: dict) -> None:
    ds = ParquetDataset(pq_files[:2], columns=["id", "tags"] if not kwargs.get("batch_size") else ["id"],
                        **kwargs)
    assert assert_state_roundtrip(ds) == ds.cardinality()


def test_state_restores_in_a_new_dataset_object(pq_files: list[str]) -> None:
    ds = ParquetDataset(pq_files, columns=["id"], shuffle_row_groups=True)  # seed drawn at random
    with iter(ds) as it:
        for _ in range(12):
            next(it)
        state = it.get_state()
        rest = _ids_of(it)
    assert state["pipeline"]["row_group"] >= 0 and state["pipeline"]["file"] in pq_files
    with iter(ParquetDataset(pq_files, columns=["id"], shuffle_row_groups=True)) as it2:
        it2.set_state(state)
        assert _ids_of(it2) == rest


def _ids_of(it: hr.Iterator) -> list[int]:
    return [int(el["id"]) for el in it]


def test_state_mismatch_raises(pq_files: list[str]) -> None:
    with iter(ParquetDataset(pq_files, columns=["id"])) as it:
        state = it.get_state()
    with iter(ParquetDataset(pq_files, columns=["id"], batch_size=2)) as it2, \
            pytest.raises(StateError, match="batch_size"):
        it2.set_state(state)
    with iter(ParquetDataset(pq_files, columns=["id"], shuffle_row_groups=True, seed=1)) as it3:
        s3 = it3.get_state()
    with iter(ParquetDataset(pq_files, columns=["id"], shuffle_row_groups=True, seed=2)) as it4, \
            pytest.raises(StateError, match="seed"):
        it4.set_state(s3)


def test_row_mode_block_is_charged_to_the_budget(pq_files: list[str]) -> None:
    ds = ParquetDataset(pq_files, columns=["id", "emb"]).with_options(hr.Options(memory_budget="1MiB"))
    with iter(ds) as it:
        next(it)
        stages = it.memory_stats()["stages"]
        held = [v for k, v in stages.items() if k.startswith("parquet")]
        # the block in hand: one row group of 5 rows x (8 + 12 bytes)
        assert held and held[0]["current_bytes"] == ROW_GROUP * (8 + 12)
    assert it.memory_stats()["current_bytes"] == 0


def test_in_pipeline_with_list_files_interleave_map_batch(pq_files: list[str]) -> None:
    pattern = str(Path(pq_files[0]).parent / "part-*.parquet")
    ds = (hr.Dataset.list_files(pattern, shuffle=False)
          .interleave(lambda f: ParquetDataset(f, columns=["id", "x"]), cycle_length=2,
                      num_parallel_calls=2)
          .map(lambda el: el["x"] * 2, num_parallel_calls=2)
          .batch(8))
    got = np.concatenate(list(ds))
    np.testing.assert_array_equal(np.sort(got), np.arange(sum(ROWS), dtype=np.float32))


def test_fsspec_memory_url(pq_files: list[str]) -> None:
    import fsspec

    with fsspec.open("memory://hr-test/part-0.parquet", "wb") as f:
        f.write(Path(pq_files[0]).read_bytes())
    try:
        assert _ids(ParquetDataset("memory://hr-test/*.parquet", columns=["id"])) == list(range(17))
    finally:
        fsspec.filesystem("memory").rm("hr-test", recursive=True)


# ---- bad input ---------------------------------------------------------------------------------------------
def test_missing_file(tmp_path: Path, pq_files: list[str]) -> None:
    missing = str(tmp_path / "nope.parquet")
    with pytest.raises(FileNotFoundError, match=r"nope\.parquet"):
        len(ParquetDataset([pq_files[0], missing]))
    with pytest.raises(FileNotFoundError, match=r"pattern .*\*\.parquet.* matches no file"):
        ParquetDataset(str(tmp_path / "*.parquet"))


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_corrupt_file(tmp_path: Path, pq_files: list[str], damage: str) -> None:
    data = Path(pq_files[0]).read_bytes()
    bad = tmp_path / "bad.parquet"
    bad.write_bytes({"garbage": b"PAR1" + b"x" * 100, "truncated": data[: len(data) - 20], "empty": b""}[damage])
    with pytest.raises(DataLossError, match=r"bad\.parquet is not a readable Parquet file") as e:
        list(ParquetDataset([pq_files[1], str(bad)]))
    assert e.value.path == str(bad)


def test_corrupt_row_group_names_file_and_row_group(tmp_path: Path) -> None:
    path = tmp_path / "pages.parquet"
    pq.write_table(pa.table({"v": np.arange(4000, dtype=np.int64)}), path, row_group_size=2000,
                   compression="snappy")
    data = bytearray(path.read_bytes())
    md = pq.ParquetFile(path).metadata.row_group(1).column(0)
    start = md.data_page_offset
    data[start + 30: start + 200] = b"\xff" * 170  # smash the second row group's page data
    path.write_bytes(bytes(data))
    ds = ParquetDataset(str(path), batch_size=1000)
    with pytest.raises(DataLossError, match=r"pages\.parquet \(row group 1\)"):
        list(ds)


def test_missing_column_names_file_and_column(pq_files: list[str], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"column\(s\) \['nope'\] not in .*part-0\.parquet.*has columns"):
        len(ParquetDataset(pq_files, columns=["id", "nope"]))
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"id": [1, 2]}), other)
    with pytest.raises(ValueError, match=r"other\.parquet lacks column\(s\) \['x'"):
        len(ParquetDataset([pq_files[0], str(other)]))


def test_nulls_are_reported_not_filled(tmp_path: Path) -> None:
    path = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"a": [1, None, 3], "b": [1, 2, 3]}), path)
    assert _ids_b(ParquetDataset(str(path), columns=["b"])) == [1, 2, 3]
    with pytest.raises(ValueError, match=r"column 'a' of .*nulls\.parquet \(row group 0\) has 1 null"):
        list(ParquetDataset(str(path)))


def _ids_b(ds: hr.Dataset) -> list[int]:
    return [int(el["b"]) for el in ds]


def test_unsupported_type(tmp_path: Path) -> None:
    path = tmp_path / "struct.parquet"
    pq.write_table(pa.table({"s": [{"a": 1}, {"a": 2}]}), path)
    with pytest.raises(ValueError, match=r"column 's' .* has type struct"):
        list(ParquetDataset(str(path)))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"batch_size": 0}, "batch_size=0"), ({"num_shards": 2, "index": 2}, "index=2"),
    ({"num_shards": 0}, "num_shards=0"), ({"columns": []}, "columns="),
])
def test_bad_arguments(pq_files: list[str], kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ParquetDataset(pq_files, **kwargs)


def test_row_mode_blocks_shrink_to_fit_small_budgets(tmp_path: Path) -> None:
    # 20 KB rows of zeros: the encoded size in the footer is tiny, the decoded block is not
    path = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"x": pa.array([np.zeros(5000, np.float32)] * 100, pa.list_(pa.float32(), 5000))}),
                   path)
    ds = ParquetDataset(str(path)).with_options(hr.Options(memory_budget="512KiB"))
    with iter(ds) as it:
        assert sum(1 for _ in it) == 100
        stage = next(v for k, v in it.memory_stats()["stages"].items() if k.startswith("parquet"))
        assert 0 < stage["peak_bytes"] <= 512 * 1024 // 16 + 20_000  # one block: at most 1/16 of the budget


def _smash_row_group(path: Path, group: int) -> None:
    """Overwrite the page data of one row group's column chunk (offsets from the footer) so decoding fails."""
    data = bytearray(path.read_bytes())
    md = pq.ParquetFile(path).metadata.row_group(group).column(0)
    end = (md.dictionary_page_offset or md.data_page_offset) + md.total_compressed_size
    data[md.data_page_offset + 30: end] = b"\xff" * (end - md.data_page_offset - 30)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(("batch_size", "lost", "total"), [(None, 10, 100), (4, 3, 30)])
def test_ignore_errors_counts_every_element_of_a_lost_row_group(tmp_path: Path, batch_size: int | None,
                                                                lost: int, total: int) -> None:
    path = tmp_path / "groups.parquet"
    pq.write_table(pa.table({"v": np.arange(100, dtype=np.int64)}), path, row_group_size=10,
                   compression="snappy")
    _smash_row_group(path, 9)
    ds = ParquetDataset(str(path), batch_size=batch_size)
    with pytest.raises(DataLossError, match=r"row group 9") as e:
        list(ds)
    assert e.value.lost_elements == lost
    with pytest.warns(hr.IgnoredErrorsWarning, match=rf"dropped {lost} of {total} elements"):
        got = list(ds.ignore_errors())
    assert len(got) == total - lost
    if batch_size is None:  # 10 of 100 rows lost: more than 5%
        with pytest.raises(hr.TooManyErrorsError, match=r"10 of 100 elements failed"):
            list(ds.ignore_errors(max_drop_ratio=0.05))


@pytest.mark.parametrize(("batch_size", "taken", "lost"), [(None, 95, 5), (4, 28, 2)])
def test_lost_elements_after_a_restore_counts_only_what_was_left(tmp_path: Path, batch_size: int | None,
                                                                 taken: int, lost: int) -> None:
    path = tmp_path / "groups.parquet"
    pq.write_table(pa.table({"v": np.arange(100, dtype=np.int64)}), path, row_group_size=10,
                   compression="snappy")
    ds = ParquetDataset(str(path), batch_size=batch_size)
    with iter(ds) as it:
        for _ in range(taken):  # into row group 9: 5 of its rows, or 1 of its 3 batches
            next(it)
        state = it.get_state()
    _smash_row_group(path, 9)
    with iter(ds) as it:
        it.set_state(state)
        with pytest.raises(DataLossError, match=r"row group 9") as e:
            next(it)
    assert e.value.lost_elements == lost
