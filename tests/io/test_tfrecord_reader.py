"""TFRecordDataset: TensorFlow-written fixtures, file name forms, compression, state, parallel reads."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from tfrecord_helpers import assert_restores_everywhere, fixture, load_json, make_records, write_records

import headrace as hr
from headrace._files.framing import masked_crc32c
from headrace.io import TFRecordDataset


def test_masked_crc_matches_tensorflow_definition():
    # crc32c("123456789") = 0xE3069283 (the standard check value); masked as TensorFlow's crc32c::Mask
    crc = 0xE3069283
    expected = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    assert masked_crc32c(b"123456789") == expected


def test_raw_fixture_lengths_and_hashes():
    got = [{"len": len(r), "sha256": hashlib.sha256(r).hexdigest()} for r in TFRecordDataset(fixture("raw.tfrecord"))]
    assert got == load_json("raw.expected.json")


@pytest.mark.parametrize(("name", "compression"), [("examples.tfrecord", None), ("examples.tfrecord", ""),
                                                   ("examples.tfrecord.gz", "GZIP"),
                                                   ("examples.tfrecord.zlib", "ZLIB"),
                                                   ("examples.tfrecord.gz", "gzip")])
def test_examples_fixture_all_compressions_give_the_same_records(name, compression):
    plain = list(TFRecordDataset(fixture("examples.tfrecord")))
    assert len(plain) == len(load_json("examples.expected.json")["examples"]) == 8
    records = list(TFRecordDataset(fixture(name), compression_type=compression))
    assert records == plain
    assert all(type(r) is bytes for r in records)


def test_wrong_compression_type_is_a_data_loss_error_not_garbage():
    with pytest.raises(hr.DataLossError) as e:
        list(TFRecordDataset(fixture("examples.tfrecord.gz")))
    assert "examples.tfrecord.gz" in str(e.value) and e.value.offset == 0
    with pytest.raises(hr.DataLossError) as e:
        list(TFRecordDataset(fixture("examples.tfrecord"), compression_type="ZLIB"))
    assert e.value.reason == "compressed_stream"


def test_filename_forms(tmp_path):
    a = write_records(tmp_path / "a.tfrecord", [b"a0", b"a1"])
    b = write_records(tmp_path / "b.tfrecord", [b"b0"])
    expected = [b"a0", b"a1", b"b0"]
    assert list(TFRecordDataset([a, b])) == expected
    assert list(TFRecordDataset((Path(a), b.encode()))) == expected
    assert list(TFRecordDataset(np.array([a, b]))) == expected
    assert list(TFRecordDataset(Path(a))) == [b"a0", b"a1"]
    assert list(TFRecordDataset(a.encode())) == [b"a0", b"a1"]
    names = hr.Dataset.list_files(str(tmp_path / "*.tfrecord"), shuffle=False)
    assert list(TFRecordDataset(names)) == expected
    assert list(TFRecordDataset([])) == []
    assert TFRecordDataset(a).cardinality() == hr.UNKNOWN_CARDINALITY


def test_fsspec_memory_url():
    fsspec = pytest.importorskip("fsspec")
    with fsspec.open("memory://headrace-test/x.tfrecord", "wb") as f:
        f.write(Path(fixture("raw.tfrecord")).read_bytes())
    assert list(TFRecordDataset("memory://headrace-test/x.tfrecord")) == list(TFRecordDataset(fixture("raw.tfrecord")))


@pytest.mark.parametrize("buffer_size", [0, 1, 7, np.int64(1 << 20)])  # 0: tf.data's "no buffering"
def test_buffer_size_does_not_change_records(tmp_path, buffer_size):
    records = make_records(30)
    for options in (None, "GZIP"):
        path = write_records(tmp_path / f"x{options}.tfrecord", records, options)
        assert list(TFRecordDataset(path, options, buffer_size=buffer_size)) == records


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"compression_type": "LZ4"}, "compression_type='LZ4'"),
    ({"buffer_size": -1}, r"buffer_size\)=-1 must be >= 0"),
    ({"num_parallel_reads": -3}, "num_parallel_reads=-3"),
    ({"on_corrupt": "ignore"}, "on_corrupt='ignore'"),
])
def test_bad_arguments_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TFRecordDataset("x.tfrecord", **kwargs)


def test_bad_filenames_type():
    with pytest.raises(TypeError, match="filenames"):
        TFRecordDataset(3.5)


def test_missing_file_raises_then_continues_with_next_file(tmp_path):
    good = write_records(tmp_path / "good.tfrecord", [b"g"])
    missing = str(tmp_path / "missing.tfrecord")
    with iter(TFRecordDataset([missing, good])) as it:
        with pytest.raises(FileNotFoundError, match=r"missing\.tfrecord"):
            next(it)
        assert list(it) == [b"g"]
    assert list(TFRecordDataset([missing, good]).ignore_errors()) == [b"g"]


@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
def test_state_restores_at_every_record(tmp_path, compression):
    paths = [write_records(tmp_path / f"{i}.tfrecord", make_records(4 + i, f"f{i}-"), compression) for i in range(3)]
    paths.insert(1, write_records(tmp_path / "empty.tfrecord", [], compression))
    full = assert_restores_everywhere(TFRecordDataset(paths, compression))
    assert len(full) == 4 + 5 + 6


def test_state_with_a_dataset_of_names(tmp_path):
    for i in range(3):
        write_records(tmp_path / f"{i}.tfrecord", make_records(3, f"f{i}-"))
    ds = TFRecordDataset(hr.Dataset.list_files(str(tmp_path / "*.tfrecord"), shuffle=False))
    assert len(assert_restores_everywhere(ds)) == 9


def test_state_names_the_file_and_offset_and_rejects_other_files(tmp_path):
    a = write_records(tmp_path / "a.tfrecord", [b"1", b"22"])
    b = write_records(tmp_path / "b.tfrecord", [b"3"])
    with iter(TFRecordDataset([a, b])) as it:
        next(it)
        state = it.get_state()
    inner = state["pipeline"]
    assert (inner["kind"], inner["file_index"], inner["offset"], inner["path"]) == ("tfrecord", 0, 17, a)
    with iter(TFRecordDataset([b, a])) as it, pytest.raises(hr.StateError, match="same files"):
        it.set_state(state)
    with iter(TFRecordDataset([a, b], "GZIP")) as it, pytest.raises(hr.StateError, match="compression_type"):
        it.set_state(state)
    json.dumps(state)


def test_num_parallel_reads_interleaves_like_tf_data(tmp_path):
    paths = [write_records(tmp_path / f"{i}.tfrecord", [f"{i}-{j}".encode() for j in range(2 + i)]) for i in range(3)]
    got = list(TFRecordDataset(paths, num_parallel_reads=2))
    # tf.data: cycle of 2 files, one record each in turn; an exhausted file's slot takes the next file
    assert got == [b"0-0", b"1-0", b"0-1", b"1-1", b"1-2", b"2-0", b"2-1", b"2-2", b"2-3"]
    assert sorted(TFRecordDataset(paths, num_parallel_reads=8)) == sorted(TFRecordDataset(paths))
    assert_restores_everywhere(TFRecordDataset(paths, num_parallel_reads=2))


def test_num_parallel_reads_shares_the_skip_list(tmp_path):
    good = write_records(tmp_path / "good.tfrecord", [b"ok"])
    ds = TFRecordDataset([fixture("truncated.tfrecord"), good], num_parallel_reads=2, on_corrupt="skip")
    with pytest.warns(UserWarning, match="truncated"):
        got = list(ds)
    assert len(got) == 7 and b"ok" in got
    assert [(s.offset, s.reason) for s in ds.skipped_records] == [(8217, "truncated")]


def test_in_a_pipeline_with_batch_and_map(tmp_path):
    path = write_records(tmp_path / "x.tfrecord", [str(i).encode() for i in range(10)])
    batches = list(TFRecordDataset(path).map(lambda r: np.int64(int(r))).batch(4))
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_close_is_idempotent_and_ends_iteration_with_a_clear_error(tmp_path):
    path = write_records(tmp_path / "x.tfrecord", [b"a", b"b"])
    it = iter(TFRecordDataset(path))
    assert next(it) == b"a"
    it.close()
    it.close()
    with pytest.raises(hr.IteratorClosedError):
        next(it)


def test_resuming_past_the_end_of_a_file_is_an_error(tmp_path):
    path = write_records(tmp_path / "x.tfrecord", [b"a"])
    with iter(TFRecordDataset(path)) as it:
        state = it.get_state()
        state["pipeline"]["offset"] = 10_000
        it.set_state(state)
        with pytest.raises(hr.DataLossError, match="10000"):
            next(it)


def test_parallel_reads_with_corrupt_files_raise_or_ignore():
    names = [fixture("corrupt-data-crc.tfrecord"), fixture("truncated.tfrecord"), fixture("raw.tfrecord")]
    good = sorted(list(TFRecordDataset(names[0]).ignore_errors()) + list(TFRecordDataset(names[1]).ignore_errors())
                  + list(TFRecordDataset(names[2])))
    assert len(good) == 7 + 6 + 4
    assert sorted(TFRecordDataset(names, num_parallel_reads=2).ignore_errors()) == good
    with pytest.raises(hr.DataLossError) as e:
        list(TFRecordDataset(names, num_parallel_reads=2))
    assert (e.value.path, e.value.offset) == (names[0], 3863)


def test_endless_dataset_of_names(tmp_path):
    for i in range(2):
        write_records(tmp_path / f"{i}.tfrecord", [f"{i}-{j}".encode() for j in range(2)])
    names = hr.Dataset.list_files(str(tmp_path / "*.tfrecord"), shuffle=False).repeat()
    ds = TFRecordDataset(names)
    with iter(ds) as it:
        first = [next(it) for _ in range(9)]
        state = json.loads(json.dumps(it.get_state()))
        after = [next(it) for _ in range(5)]
    assert first == [b"0-0", b"0-1", b"1-0", b"1-1"] * 2 + [b"0-0"]
    with iter(ds) as it:
        it.set_state(state)
        assert [next(it) for _ in range(5)] == after == [b"0-1", b"1-0", b"1-1", b"0-0", b"0-1"]
