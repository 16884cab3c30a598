"""``to="text"``: sharded line files of the records' single string feature, read back by TextLineDataset exactly
once and in shard order (unicode, empty strings, every compression), and the one-line refusals (a schema that
is not one string feature, a value with a line break)."""

from __future__ import annotations

import json
import random

import pytest

from headrace.convert import ConvertConfig, ConvertError, load_manifest, open_dataset, shard_paths, verify
from headrace.convert.output import finalize, write_shard
from headrace.convert.schema import INT64, STRING, SchemaAccumulator
from headrace.convert.sinks import row_encoder, text_line
from headrace.io import TextLineDataset

VALUES = ["héllo ✓", "", "日本語のテキスト", "tab\there", "  spaces  ", "emoji 🐍", "", "x" * 5000, "plain"]


def _values(n, seed=0):
    """``n`` strings: :data:`VALUES` and random unicode ones (no line breaks), some empty."""
    rng = random.Random(seed)
    alphabet = "abcé ü✓日本\t🐍,\"'\\"
    return VALUES + ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40))) for _ in range(n)]


def _schema(rows):
    acc = SchemaAccumulator()
    for r in rows:
        acc.add(r)
    return acc.schema()


def _publish(cfg, rows):
    """``rows`` through the shard writer and finalize (no Beam): shard ``i`` gets the rows ``j % n == i``."""
    schema = _schema(rows)
    n = cfg.shards
    infos = []
    for i in range(n):
        encode = row_encoder("text", schema, f"shard {i}")
        infos.append(write_shard(cfg, schema, i, [encode(r, f) for r, f in rows[i::n]], f"t{i}"))
    return finalize(cfg, schema, infos, [], {"kind": "test", "path": cfg.src})


@pytest.mark.parametrize(("compression", "ext"), [(None, ".txt"), ("GZIP", ".txt.gz"), ("ZLIB", ".txt.zlib")])
def test_records_in_equal_lines_out_per_shard(tmp_path, compression, ext):
    values = _values(60)
    rows = [(f"r{i}", {"text": (STRING, [v.encode("utf-8")])}) for i, v in enumerate(values)]
    cfg = ConvertConfig(src="src", dst=str(tmp_path / "out"), to="text", num_shards=3, compression=compression)
    m = _publish(cfg, rows)
    assert [s["path"] for s in m["shards"]] == [f"data-0000{i}-of-00003{ext}" for i in range(3)]
    assert m["output"] == {"format": "text", "compression": compression, "prefix": "data", "seed": 0}
    assert all(s["index"] is None for s in m["shards"]) and m["records"] == len(values)
    assert load_manifest(tmp_path / "out") == m and verify(tmp_path / "out") == m  # sizes and SHA-256
    for i, path in enumerate(shard_paths(tmp_path / "out")):
        lines = list(TextLineDataset(path, compression_type=compression))
        assert [x.decode("utf-8") for x in lines] == values[i::3]  # exactly once, in the shard's order
        assert len(lines) == m["shards"][i]["records"]
    got = list(open_dataset(tmp_path / "out", verify_checksums=True, num_parallel_reads=2))
    assert sorted(got) == sorted(v.encode("utf-8") for v in values)


def test_a_file_ends_with_a_newline_per_record(tmp_path):
    rows = [("a", {"text": (STRING, [b""])}), ("b", {"text": (STRING, [b"x"])}), ("c", {"text": (STRING, [b""])})]
    cfg = ConvertConfig(src="src", dst=str(tmp_path / "out"), to="text", num_shards=1)
    _publish(cfg, rows)
    assert (tmp_path / "out" / "data-00000-of-00001.txt").read_bytes() == b"\nx\n\n"
    assert list(open_dataset(tmp_path / "out")) == [b"", b"x", b""]


@pytest.mark.parametrize(("rows", "named"), [
    ([("a", {"text": (STRING, [b"x"]), "label": (INT64, [1])})], r"2 feature\(s\): label \(FixedLenFeature int64 "
                                                                 r"\[\]\), text \(FixedLenFeature string \[\]\)"),
    ([("a", {"n": (INT64, [1])})], r"1 feature\(s\): n \(FixedLenFeature int64 \[\]\)"),
    ([("a", {"t": (STRING, [b"x"])}), ("b", {})], r"1 feature\(s\): t \(VarLenFeature string\)"),
    ([("a", {"t": (STRING, [b"x", b"y"])})], r"1 feature\(s\): t \(FixedLenFeature string \[2\]\)"),
])
def test_a_schema_that_is_not_one_string_is_refused(rows, named):
    with pytest.raises(ConvertError, match=named + r"; convert to tfrecord or parquet") as e:
        row_encoder("text", _schema(rows), "data-00000-of-00001.txt")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("value", [b"two\nlines", b"carriage\rreturn", b"windows line\r\n", b"\n"])
def test_a_value_with_a_line_break_is_refused_naming_record_shard_and_value(value):
    with pytest.raises(ConvertError) as e:
        text_line("src.jsonl:7", {"text": (STRING, [value])}, "text", "data-00001-of-00004.txt.gz")
    msg = str(e.value)
    assert "\n" not in msg and "\r" not in msg
    assert "record src.jsonl:7 (shard data-00001-of-00004.txt.gz)" in msg and repr(value[:60]) in msg
    assert "cannot be one line" in msg


def test_text_compressions_are_tfrecords():
    assert ConvertConfig(src="a", dst="b", to="text", compression="gzip").compression == "GZIP"
    with pytest.raises(ValueError, match=r"compression='SNAPPY' for text must be one of GZIP, ZLIB"):
        ConvertConfig(src="a", dst="b", to="text", compression="SNAPPY")


def test_beam_conversion_to_text_matches_the_tfrecord_conversion_shard_by_shard(tmp_path):
    pytest.importorskip("apache_beam", reason="headrace.convert pipelines need pip install 'headrace[beam]'")
    from headrace.convert import convert, feature_spec
    from headrace.io import TFRecordDataset, parse_example

    from .convert_helpers import IN_PROCESS

    values = _values(80, seed=1)
    src = tmp_path / "s.jsonl"
    src.write_text("".join(json.dumps({"text": v}, ensure_ascii=False) + "\n" for v in values), encoding="utf-8")
    m = convert(src, tmp_path / "txt", to="text", num_shards=3, compression="GZIP", beam_options=IN_PROCESS)
    ref = convert(src, tmp_path / "rec", num_shards=3, beam_options=IN_PROCESS)
    assert m["records"] == len(values) and [s["records"] for s in m["shards"]] == [s["records"] for s in ref["shards"]]
    spec = feature_spec(tmp_path / "rec")
    for text_path, rec_path in zip(shard_paths(tmp_path / "txt"), shard_paths(tmp_path / "rec"), strict=True):
        assert text_path.endswith(".txt.gz")
        want = list(parse_example(list(TFRecordDataset(rec_path)), spec)["text"]) if ref["records"] else []
        assert list(TextLineDataset(text_path, compression_type="GZIP")) == want
    assert sorted(x.decode("utf-8") for x in open_dataset(tmp_path / "txt", verify_checksums=True)) == sorted(values)
