"""HDF5Dataset on files written by h5py: values, chunk-sized reads, batches, shards, state, errors."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from io_reader_checks import assert_disjoint_complete, assert_same, assert_state_roundtrip, assert_streams_equal

import headrace as hr
from headrace import DataLossError, StateError
from headrace.io import HDF5Dataset

N = 53
CHUNK = 7
KEYS = ["images", "labels", "names", "group/feat"]


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "images": rng.integers(0, 256, (N, 4, 5, 3), dtype=np.uint8),
        "labels": np.arange(N, dtype=np.int64) * 3,
        "names": np.array([f"ex-{i}".encode() for i in range(N)], dtype=object),
        "group/feat": rng.random((N, 2)).astype(np.float32),
    }


@pytest.fixture(scope="module")
def h5_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("hdf5") / "data.h5"
    arrays = _arrays()
    with h5py.File(path, "w") as f:
        f.create_dataset("images", data=arrays["images"], chunks=(CHUNK, 4, 5, 3), compression="gzip")
        f.create_dataset("labels", data=arrays["labels"])  # contiguous
        f.create_dataset("names", data=arrays["names"], dtype=h5py.string_dtype("utf-8"))
        f.create_dataset("group/feat", data=arrays["group/feat"], chunks=(5, 2))
        f.create_dataset("short", data=np.zeros(N - 1))
        f.create_dataset("scalar", data=3.0)
    return str(path)


def _row(arrays: dict[str, np.ndarray], i: int) -> dict:
    return {k: (arrays[k][i].copy() if arrays[k].ndim > 1 else arrays[k][i]) for k in KEYS}


def test_rows_equal_what_h5py_wrote(h5_path: str) -> None:
    arrays = _arrays()
    ds = HDF5Dataset(h5_path, KEYS)
    assert ds.cardinality() == N
    rows = list(ds)
    assert_streams_equal(rows, [_row(arrays, i) for i in range(N)])
    assert isinstance(rows[0]["names"], bytes) and rows[0]["labels"].dtype == np.int64


def test_single_key_yields_bare_values(h5_path: str) -> None:
    got = list(HDF5Dataset(h5_path, "labels"))
    assert_streams_equal(got, list(_arrays()["labels"]))


def test_reads_in_chunk_sized_slices(h5_path: str) -> None:
    ds = HDF5Dataset(h5_path, ["images", "labels"])
    assert ds.block_rows == CHUNK  # the chunked dataset's chunk length (labels is contiguous)
    row_bytes = 4 * 5 * 3 + 8
    with iter(ds.with_options(hr.Options(memory_budget="64KiB"))) as it:
        for _ in range(N):
            next(it)
        stage = next(v for k, v in it.memory_stats()["stages"].items() if k.startswith("hdf5"))
        assert stage["peak_bytes"] == CHUNK * row_bytes


def test_batches(h5_path: str) -> None:
    ds = HDF5Dataset(h5_path, ["images", "group/feat"], batch_size=10)
    batches = list(ds)
    assert [len(b["images"]) for b in batches] == [10] * 5 + [3] and ds.cardinality() == 6
    assert batches[0]["images"].shape == (10, 4, 5, 3) and batches[0]["images"].dtype == np.uint8
    np.testing.assert_array_equal(np.concatenate([b["group/feat"] for b in batches]), _arrays()["group/feat"])


@pytest.mark.parametrize("batch_size", [None, 4])
def test_shards_are_contiguous_disjoint_complete(h5_path: str, batch_size: int | None) -> None:
    shards = []
    for index in range(4):
        ds = HDF5Dataset(h5_path, "labels", batch_size=batch_size, num_shards=4, index=index)
        got = [int(v) for el in ds for v in np.atleast_1d(el)]
        assert got == sorted(got) and got[-1] - got[0] == 3 * (len(got) - 1)  # one contiguous range
        assert len(got) in (N // 4, N // 4 + 1)
        shards.append(got)
    assert_disjoint_complete(shards, list(_arrays()["labels"].tolist()))


@pytest.mark.parametrize("kwargs", [{}, {"batch_size": 6}, {"num_shards": 3, "index": 1}])
def test_state_roundtrip(h5_path: str, kwargs: dict) -> None:
    ds = HDF5Dataset(h5_path, ["labels", "names", "images"], **kwargs)
    assert assert_state_roundtrip(ds) == ds.cardinality()


def test_a_state_taken_after_the_last_partial_batch_restores_to_the_end(h5_path: str) -> None:
    # Sweep seed 693: the reader's state after its last block (the block dropped at the end) named that
    # block's first row, so a restore of it (and of a restore) read the block's rows again (4 duplicates).
    def ds() -> hr.Dataset:
        return HDF5Dataset(h5_path, "labels").batch(CHUNK + 1)  # 53 rows: a partial last batch

    whole = [b.tolist() for b in ds()]
    for stops in ([len(whole)], [len(whole) - 2, len(whole)]):
        got, state = [], None
        for stop in [*stops, None]:
            with iter(ds()) as it:
                if state is not None:
                    it.set_state(state)
                while stop is None or len(got) < stop:
                    try:
                        got.append(next(it).tolist())
                    except StopIteration:
                        break
                state = it.get_state()
        assert got == whole, stops


def test_state_mismatch(h5_path: str) -> None:
    with iter(HDF5Dataset(h5_path, "labels")) as it:
        state = it.get_state()
    assert state["pipeline"]["row"] == 0
    with iter(HDF5Dataset(h5_path, ["labels"])) as it2, pytest.raises(StateError, match="single_key"):
        it2.set_state(state)
    with iter(HDF5Dataset(h5_path, "names")) as it2, pytest.raises(StateError, match="keys"):
        it2.set_state(state)
    state["pipeline"]["row"] = N + 5
    with iter(HDF5Dataset(h5_path, "labels")) as it3, pytest.raises(StateError, match="row 58 is outside"):
        it3.set_state(state)


def test_in_pipeline(h5_path: str) -> None:
    ds = (HDF5Dataset(h5_path, ["images", "labels"]).shuffle(20, seed=1)
          .map(lambda el: (el["images"].astype(np.float32) / 255, el["labels"]), num_parallel_calls=2)
          .batch(16))
    labels = np.concatenate([y for _, y in ds])
    assert sorted(labels.tolist()) == _arrays()["labels"].tolist()


def test_fsspec_memory_url(h5_path: str) -> None:
    import fsspec

    with fsspec.open("memory://hr-h5/data.h5", "wb") as f:
        f.write(Path(h5_path).read_bytes())
    try:
        rows = list(HDF5Dataset("memory://hr-h5/data.h5", ["labels", "images"], batch_size=20))
        assert_same(rows[1], {"labels": _arrays()["labels"][20:40], "images": _arrays()["images"][20:40]})
    finally:
        fsspec.filesystem("memory").rm("hr-h5", recursive=True)


# ---- bad input ----------------------------------------------------------------------------------------------
def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no such file: .*nope\.h5"):
        HDF5Dataset(str(tmp_path / "nope.h5"), "x")


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_file(tmp_path: Path, h5_path: str, damage: str) -> None:
    bad = tmp_path / "bad.h5"
    data = Path(h5_path).read_bytes()
    bad.write_bytes(b"not hdf5 at all" * 10 if damage == "garbage" else data[:1000])
    with pytest.raises(DataLossError, match=r"bad\.h5 is not a readable HDF5 file") as e:
        HDF5Dataset(str(bad), "labels")
    assert e.value.path == str(bad)


def _flip_header_byte(path: Path, key: str, at: int) -> None:
    """Flip byte ``at`` of dataset ``key``'s object header (h5py tells where the header starts)."""
    with h5py.File(path, "r") as f:
        addr = h5py.h5o.get_info(f[key].id).addr
    data = bytearray(path.read_bytes())
    data[addr + at] ^= 0xFF
    path.write_bytes(bytes(data))


# byte 0: the header's version; 9: a message's size (h5py: "Object visitation failed (actual len exceeds EOA)",
# "Unable to synchronously open object (bad object header version number)", ...)
@pytest.mark.parametrize("at", [0, 9])
def test_a_damaged_object_header_is_a_data_loss_error_naming_the_file_and_key(tmp_path: Path, h5_path: str,
                                                                             at: int) -> None:
    """A flipped byte in an object header gave h5py's bare ``RuntimeError: Object visitation failed (...)``
    (or a ``KeyError``) without the file's name."""
    bad = tmp_path / "bad.h5"
    bad.write_bytes(Path(h5_path).read_bytes())
    _flip_header_byte(bad, "labels", at)
    with pytest.raises(DataLossError, match=rf"cannot read dataset 'labels' in {bad}: .*metadata is damaged") as e:
        HDF5Dataset(str(bad), ["images", "labels"])
    assert (e.value.path, e.value.reason) == (str(bad), "bad metadata")
    # a missing key lists the file's datasets: the walk meets the damaged header
    with pytest.raises(DataLossError, match=rf"cannot read the list of datasets in {bad}: ") as e:
        HDF5Dataset(str(bad), "labelz")
    assert e.value.path == str(bad)
    assert list(HDF5Dataset(str(bad), "group/feat").take(2))  # the other datasets still read


def test_missing_key_names_file_key_and_datasets(h5_path: str) -> None:
    with pytest.raises(ValueError, match=r"key 'labelz' is missing in .*data\.h5; the file has datasets "
                                         r"\[.*'group/feat'.*'labels'"):
        HDF5Dataset(h5_path, ["images", "labelz"])
    with pytest.raises(ValueError, match="key 'group' is a group"):
        HDF5Dataset(h5_path, "group")
    with pytest.raises(ValueError, match=r"key 'scalar' .* is a scalar"):
        HDF5Dataset(h5_path, "scalar")


def test_misaligned_lengths_name_each_key(h5_path: str) -> None:
    with pytest.raises(ValueError, match=rf"misaligned on axis 0: lengths \{{'labels': {N}, 'short': {N - 1}\}}"):
        HDF5Dataset(h5_path, ["labels", "short"])


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"keys": []}, "keys="), ({"keys": "labels", "batch_size": -1}, "batch_size=-1"),
    ({"keys": "labels", "num_shards": 2, "index": 5}, "index=5"),
])
def test_bad_arguments(h5_path: str, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        HDF5Dataset(h5_path, **kwargs)
