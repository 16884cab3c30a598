"""Corrupt and truncated TFRecord files: detected, located, never silent (raise, skip, ignore_errors)."""

from __future__ import annotations

import gzip
import warnings
from pathlib import Path

import pytest
from tfrecord_helpers import fixture, load_json, write_records

import headrace as hr
from headrace.io import TFRecordDataset
from headrace.io.tfrecord import CorruptRecordWarning

EXPECTED = load_json("corrupt.expected.json")
GOOD = list(TFRecordDataset(fixture("examples.tfrecord")))
CASES = {  # file -> (index of the bad record, its offset, reason, records after it that are still good)
    "corrupt-data-crc.tfrecord": (EXPECTED["corrupt-data-crc.tfrecord"]["bad_record_index"],
                                  EXPECTED["corrupt-data-crc.tfrecord"]["bad_record_offset"], "data_crc", True),
    "corrupt-length-crc.tfrecord": (EXPECTED["corrupt-length-crc.tfrecord"]["bad_record_index"],
                                    EXPECTED["corrupt-length-crc.tfrecord"]["bad_record_offset"], "length_crc", False),
    "truncated.tfrecord": (EXPECTED["truncated.tfrecord"]["complete_records"],
                           EXPECTED["truncated.tfrecord"]["truncated_record_offset"], "truncated", False),
}


def _good_records(name: str) -> list[bytes]:
    bad, _, _, resync = CASES[name]
    return GOOD[:bad] + (GOOD[bad + 1:] if resync else [])


@pytest.mark.parametrize("name", sorted(CASES))
def test_raise_after_every_good_record_before_it(name):
    bad, offset, reason, _ = CASES[name]
    got = []
    with iter(TFRecordDataset(fixture(name))) as it, pytest.raises(hr.DataLossError) as e:
        for r in it:
            got.append(r)
    assert got == GOOD[:bad]  # TensorFlow too reads exactly these, then raises
    assert (e.value.path, e.value.offset, e.value.reason) == (fixture(name), offset, reason)
    assert name in str(e.value) and f"byte {offset}" in str(e.value)
    # the run stops here: the message does not say that reading goes on (it said "the reader continues")
    assert "continues" not in str(e.value)
    assert ("records after it can still be read" if CASES[name][3] else "rest of this file cannot be read") \
        in str(e.value)


@pytest.mark.parametrize("name", sorted(CASES))
def test_iterator_stays_usable_after_the_error(name):
    with iter(TFRecordDataset([fixture(name), fixture("raw.tfrecord")])) as it:
        got = []
        while True:
            try:
                got.append(next(it))
            except hr.DataLossError:
                continue
            except StopIteration:
                break
    raw = list(TFRecordDataset(fixture("raw.tfrecord")))
    assert got == _good_records(name) + raw


@pytest.mark.parametrize("name", sorted(CASES))
def test_ignore_errors_yields_exactly_the_good_records(name):
    assert list(TFRecordDataset(fixture(name)).ignore_errors()) == _good_records(name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_skip_policy_yields_good_records_warns_and_lists(name):
    _, offset, reason, resync = CASES[name]
    ds = TFRecordDataset(fixture(name), on_corrupt="skip")
    with pytest.warns(CorruptRecordWarning) as caught:
        got = list(ds)
    assert got == _good_records(name)
    assert [(s.path, s.offset, s.reason) for s in ds.skipped_records] == [(fixture(name), offset, reason)]
    message = str(caught[0].message)
    assert f"byte {offset}" in message
    assert ("records after it can still be read" if resync else "rest of this file cannot be read") in message
    assert ds.skipped_records[0].message in message


def test_skip_list_accumulates_over_iterations_and_is_a_copy():
    ds = TFRecordDataset(fixture("corrupt-data-crc.tfrecord"), on_corrupt="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CorruptRecordWarning)
        list(ds)
        list(ds)
    listed = ds.skipped_records
    assert len(listed) == 2
    listed.clear()
    assert len(ds.skipped_records) == 2


def _gzip_of(path: str) -> bytes:
    return gzip.compress(Path(path).read_bytes())


@pytest.mark.parametrize("cut", [5, 30, -10])
def test_damaged_gzip_stream_is_data_loss_after_the_good_records(tmp_path, cut):
    data = Path(fixture("examples.tfrecord.gz")).read_bytes()
    path = tmp_path / "cut.tfrecord.gz"
    path.write_bytes(data[:cut])
    got = []
    with pytest.raises(hr.DataLossError) as e:
        for r in TFRecordDataset(str(path), "GZIP"):
            got.append(r)
    assert got == GOOD[:len(got)]
    assert e.value.path == str(path) and e.value.reason in ("compressed_stream", "truncated")


def test_garbage_inside_a_zlib_stream(tmp_path):
    data = bytearray(Path(fixture("examples.tfrecord.zlib")).read_bytes())
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "bad.zlib"
    path.write_bytes(bytes(data))
    got = list(TFRecordDataset(str(path), "ZLIB").ignore_errors())
    assert got == GOOD[:len(got)] and len(got) < 8


def test_gzip_with_several_members_reads_all(tmp_path):
    path = tmp_path / "two.gz"
    path.write_bytes(_gzip_of(fixture("examples.tfrecord")) + _gzip_of(fixture("raw.tfrecord")))
    assert list(TFRecordDataset(str(path), "GZIP")) == GOOD + list(TFRecordDataset(fixture("raw.tfrecord")))


def test_skip_continues_into_the_next_file_and_lists_each_file(tmp_path):
    good = write_records(tmp_path / "good.tfrecord", [b"ok"])
    names = [fixture("corrupt-length-crc.tfrecord"), good, fixture("corrupt-data-crc.tfrecord")]
    ds = TFRecordDataset(names, on_corrupt="skip")
    with pytest.warns(CorruptRecordWarning):
        got = list(ds)
    assert got == [*_good_records("corrupt-length-crc.tfrecord"), b"ok", *_good_records("corrupt-data-crc.tfrecord")]
    assert [s.path for s in ds.skipped_records] == [names[0], names[2]]


def test_header_cut_short_is_truncation(tmp_path):
    data = Path(fixture("raw.tfrecord")).read_bytes()
    path = tmp_path / "short.tfrecord"
    path.write_bytes(data[:12 + 0 + 4 + 5])  # the empty record, then 5 bytes of the next header
    with iter(TFRecordDataset(str(path))) as it:
        assert next(it) == b""
        with pytest.raises(hr.DataLossError, match="only 5 of 12 header bytes") as e:
            next(it)
        assert e.value.offset == 16
        assert list(it) == []


def test_check_crc_false_returns_the_damaged_record_unchecked():
    got = list(TFRecordDataset(fixture("corrupt-data-crc.tfrecord"), check_crc=False))
    assert len(got) == 8 and got[3] != GOOD[3] and got[:3] + got[4:] == GOOD[:3] + GOOD[4:]


def test_public_names():
    assert hr.io.CorruptRecordWarning is CorruptRecordWarning
    assert hr.io.SkippedRecord._fields == ("path", "offset", "reason", "message")


def test_ignore_errors_counts_the_tail_lost_after_a_bad_length_field(tmp_path):
    records = [b"%019d" % i for i in range(100)]  # 100 records of 19 bytes: 35 bytes each on disk
    path = Path(write_records(tmp_path / "tail.tfrecord", records))
    data = bytearray(path.read_bytes())
    data[60 * 35 + 9] ^= 0xFF  # record 60's length CRC: the reader cannot find any record after it
    path.write_bytes(bytes(data))
    ds = TFRecordDataset(str(path))
    with pytest.raises(hr.DataLossError, match="length field") as e:
        list(ds)
    assert (e.value.lost_elements, e.value.lost_estimated) == (40, True)
    with pytest.warns(hr.IgnoredErrorsWarning, match=r"dropped about 40 of 100 elements"):
        assert list(ds.ignore_errors()) == records[:60]
    with pytest.raises(hr.TooManyErrorsError, match=r"about 40 of 100 elements failed"):
        list(ds.ignore_errors(max_drop_ratio=0.1))
