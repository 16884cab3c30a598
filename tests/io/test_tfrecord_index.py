"""build_index / read_index / TFRecordRandomAccess."""

from __future__ import annotations

import pickle
import shutil
import threading
from pathlib import Path

import pytest
from tfrecord_helpers import fixture, make_records, write_records

import headrace as hr
from headrace.io import TFRecordDataset, TFRecordRandomAccess, build_index, read_index


def test_build_index_of_the_tensorflow_fixture(tmp_path):
    path = shutil.copy(fixture("raw.tfrecord"), tmp_path / "raw.tfrecord")
    idx = build_index(path)
    assert idx == str(path) + ".idx"
    # DALI's text format: "<offset> <framed length>" per line
    assert Path(idx).read_text() == "0 16\n16 17\n33 1040\n1073 1048592\n"
    assert read_index(idx).tolist() == [[0, 16], [16, 17], [33, 1040], [1073, 1048592]]


def test_build_index_refuses_a_corrupt_file(tmp_path):
    with pytest.raises(hr.DataLossError) as e:
        build_index(fixture("corrupt-data-crc.tfrecord"), str(tmp_path / "x.idx"))
    assert e.value.offset == 3863
    assert not (tmp_path / "x.idx").exists()


def test_random_access_matches_sequential_reading(tmp_path):
    paths = [write_records(tmp_path / f"{i}.tfrecord", make_records(5 + i, f"f{i}-")) for i in range(3)]
    paths.append(write_records(tmp_path / "empty.tfrecord", []))
    for p in paths:
        build_index(p)
    source = TFRecordRandomAccess(paths)
    sequential = list(TFRecordDataset(paths))
    assert len(source) == len(sequential) == 18
    assert [source[i] for i in range(len(source))] == sequential
    assert source[-1] == sequential[-1] and source[-18] == sequential[0]
    assert source.locate(5) == (1, 0, len(sequential[5]) + 16)


def test_index_errors(tmp_path):
    path = write_records(tmp_path / "x.tfrecord", [b"a", b"b"])
    with pytest.raises(FileNotFoundError):
        TFRecordRandomAccess(path)
    source = TFRecordRandomAccess(path, build_missing=True)
    assert Path(path + ".idx").exists()
    with pytest.raises(IndexError, match="record index 2 is out of range for 2 records"):
        source[2]
    with pytest.raises(TypeError, match="must be an int"):
        source["0"]
    with pytest.raises(ValueError, match="one index per file"):
        TFRecordRandomAccess([path], index_files=[])
    Path(path + ".idx").write_text("0 17\n")  # covers only the first record
    with pytest.raises(hr.StaleIndexError, match="stale") as e:
        TFRecordRandomAccess(path)
    assert isinstance(e.value, hr.HeadraceError) and isinstance(e.value, ValueError)
    assert path + ".idx" in str(e.value) and path in str(e.value) and "build_index" in str(e.value)
    assert e.value.path == path and e.value.index == path + ".idx"
    Path(path + ".idx").write_text("0 17\nabc\n")
    with pytest.raises(hr.StaleIndexError, match="line 2"):
        TFRecordRandomAccess(path)
    Path(path + ".idx").write_text("0 17\n20 17\n")
    with pytest.raises(hr.StaleIndexError, match="not a consistent"):
        TFRecordRandomAccess(path)


def test_corrupt_record_under_random_access(tmp_path):
    path = str(tmp_path / "c.tfrecord")
    shutil.copy(fixture("examples.tfrecord"), path)
    build_index(path)
    data = bytearray(Path(path).read_bytes())
    data[3863 + 12 + 100] ^= 1  # record 3's payload
    Path(path).write_bytes(bytes(data))
    source = TFRecordRandomAccess(path)
    assert source[2] == list(TFRecordDataset(fixture("examples.tfrecord")))[2]
    with pytest.raises(hr.DataLossError) as e:
        source[3]
    assert (e.value.path, e.value.offset, e.value.reason) == (path, 3863, "data_crc")
    data[3863] ^= 1  # its length field
    Path(path).write_bytes(bytes(data))
    with pytest.raises(hr.DataLossError, match="length") as e:
        TFRecordRandomAccess(path)[3]


def test_pickle_and_threads(tmp_path):
    path = write_records(tmp_path / "x.tfrecord", make_records(50))
    build_index(path)
    source = TFRecordRandomAccess(path)
    clone = pickle.loads(pickle.dumps(source))
    assert [clone[i] for i in range(50)] == make_records(50)
    results: dict[int, list[bytes]] = {}

    def read(k: int) -> None:
        results[k] = [source[i] for i in range(k, 50, 4)]

    threads = [threading.Thread(target=read, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert all(results[k] == make_records(50)[k::4] for k in range(4))
    source.close()
