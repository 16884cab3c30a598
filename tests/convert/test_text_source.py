"""``headrace convert`` of text files: one record per line (tf.data's lines), a damaged GZIP file rejected with
its offset, and a conversion to TFRecord read back line for line."""

from __future__ import annotations

import gzip

import pytest

from headrace.convert.schema import STRING
from headrace.convert.sources import Rejected, detect_format, open_source


def _lines(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_bytes(b"first line\r\n\nthird \xff\n")
    (tmp_path / "src" / "b.txt.gz").write_bytes(gzip.compress(b"gz one\ngz two"))
    return tmp_path / "src"


def test_text_source_one_record_per_line(tmp_path):
    src = open_source(str(_lines(tmp_path)))
    assert detect_format(str(tmp_path / "src")) == "text" and src.kind == "text"
    got = {rid: feats for unit in src.units() for rid, feats in src.read(unit)}
    assert got == {"a.txt:1": {"text": (STRING, [b"first line"])}, "a.txt:2": {"text": (STRING, [b""])},
                   "a.txt:3": {"text": (STRING, [b"third \xff"])}, "b.txt.gz:1": {"text": (STRING, [b"gz one"])},
                   "b.txt.gz:2": {"text": (STRING, [b"gz two"])}}


def test_a_truncated_gzip_file_is_rejected_with_its_offset(tmp_path):
    whole = gzip.compress(b"".join(b"line %d\n" % i for i in range(100000)))
    (tmp_path / "cut.txt.gz").write_bytes(whole[: len(whole) // 2])
    items = list(open_source(str(tmp_path / "cut.txt.gz")).read("cut.txt.gz"))
    rejected = [x for x in items if isinstance(x, Rejected)]
    assert len(rejected) == 1 and len(items) > 1
    assert "truncated GZIP stream" in rejected[0].reason and "are not read" in rejected[0].reason
    assert rejected[0].location.startswith(str(tmp_path / "cut.txt.gz") + " byte ")


def test_text_to_tfrecord_reads_back_line_for_line(tmp_path):
    pytest.importorskip("apache_beam", reason="headrace.convert pipelines need pip install 'headrace[beam]'")
    from headrace.convert import convert, feature_spec, shard_paths
    from headrace.io import TFRecordDataset, parse_example

    from .convert_helpers import IN_PROCESS

    m = convert(_lines(tmp_path), tmp_path / "out", num_shards=1, beam_options=IN_PROCESS)
    assert m["records"] == 5 and m["rejected"] == 0
    ex = parse_example(list(TFRecordDataset(shard_paths(tmp_path / "out"))), feature_spec(tmp_path / "out"))
    assert sorted(ex["text"].tolist()) == sorted([b"first line", b"", b"third \xff", b"gz one", b"gz two"])
