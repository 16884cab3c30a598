"""TFRecordWriter / TFRecordOptions: byte-identical to TensorFlow's files, compression, lifecycle."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pytest
from tfrecord_helpers import fixture, make_records, write_records

from headrace.io import TFRecordDataset, TFRecordOptions, TFRecordWriter


def test_raw_fixture_written_back_is_byte_identical(tmp_path):
    records = list(TFRecordDataset(fixture("raw.tfrecord")))
    out = write_records(tmp_path / "raw.tfrecord", records)
    assert Path(out).read_bytes() == Path(fixture("raw.tfrecord")).read_bytes()


@pytest.mark.parametrize(("options", "name"), [("GZIP", "examples.tfrecord.gz"), ("ZLIB", "examples.tfrecord.zlib"),
                                               (TFRecordOptions("GZIP"), "examples.tfrecord.gz"),
                                               (None, "examples.tfrecord")])
def test_compressed_files_match_tensorflow_bytes(tmp_path, options, name):
    records = list(TFRecordDataset(fixture("examples.tfrecord")))
    out = write_records(tmp_path / "out", records, options)
    # TensorFlow's defaults (zlib level -1, memLevel 9, one stream) give the very same bytes
    assert Path(out).read_bytes() == Path(fixture(name)).read_bytes()


def test_compressed_files_are_standard_streams(tmp_path):
    records = make_records(20)
    plain = Path(write_records(tmp_path / "plain", records)).read_bytes()
    assert gzip.decompress(Path(write_records(tmp_path / "g", records, "GZIP")).read_bytes()) == plain
    assert zlib.decompress(Path(write_records(tmp_path / "z", records, "ZLIB")).read_bytes()) == plain


def test_compression_level(tmp_path):
    records = [b"a" * 10_000] * 10
    stored = write_records(tmp_path / "0", records, TFRecordOptions("ZLIB", compression_level=0))
    best = write_records(tmp_path / "9", records, TFRecordOptions("ZLIB", compression_level=9))
    assert Path(stored).stat().st_size > 100_000 > 10 * Path(best).stat().st_size
    assert list(TFRecordDataset(stored, "ZLIB")) == list(TFRecordDataset(best, "ZLIB")) == records


def test_write_returns_offsets_and_accepts_bytes_likes(tmp_path):
    with TFRecordWriter(str(tmp_path / "x")) as w:
        assert w.write(b"abc") == 0
        assert w.write(bytearray(b"de")) == 19
        assert w.write(memoryview(b"")) == 37
        assert (w.offset, w.records) == (53, 3)
    assert list(TFRecordDataset(str(tmp_path / "x"))) == [b"abc", b"de", b""]


def test_flush_makes_records_readable_before_close(tmp_path):
    for options in (None, "GZIP", "ZLIB"):
        path = str(tmp_path / f"f{options}")
        w = TFRecordWriter(path, options)
        w.write(b"first")
        w.flush()
        head = Path(path).read_bytes()
        raw = head if options is None else zlib.decompressobj(31 if options == "GZIP" else 15).decompress(head)
        assert b"first" in raw
        w.close()
        w.close()  # idempotent
        assert list(TFRecordDataset(path, options)) == [b"first"]


def test_errors_name_the_problem(tmp_path):
    w = TFRecordWriter(str(tmp_path / "x"))
    with pytest.raises(TypeError, match="expected bytes, got str"):
        w.write("text")
    w.close()
    with pytest.raises(ValueError, match="closed TFRecordWriter"):
        w.write(b"x")
    with pytest.raises(ValueError, match="compression_type='BZ2'"):
        TFRecordOptions("BZ2")
    with pytest.raises(ValueError, match="compression_level=12"):
        TFRecordOptions("GZIP", compression_level=12)
    with pytest.raises(TypeError, match="options=5"):
        TFRecordWriter(str(tmp_path / "y"), 5)


def test_options_coerce():
    assert TFRecordOptions.coerce(None).compression_type == ""
    assert TFRecordOptions.coerce("gzip").compression_type == "GZIP"
    opts = TFRecordOptions("ZLIB", 3)
    assert TFRecordOptions.coerce(opts) is opts
