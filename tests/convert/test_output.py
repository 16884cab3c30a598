"""The destination protocol without Beam: staging, finalize (empty shards, manifest last), overwrite rules,
the manifest readers and checksum verification."""

from __future__ import annotations

import json
import os

import pytest

from headrace.convert import ConvertConfig, ConvertError, ManifestError, load_manifest, open_dataset, verify
from headrace.convert.output import check_destination, finalize, staging_dir, write_shard
from headrace.convert.schema import INT64, SchemaAccumulator, encode_row


def _rows(n):
    return [(f"r{i}", {"label": (INT64, [i % 3]), "i": (INT64, [i])}) for i in range(n)]


def _publish(cfg, rows, rejected=(), shards_with_data=(0,)):
    acc = SchemaAccumulator(["label"])
    for r in rows:
        acc.add(r)
    schema = acc.schema()
    records = [encode_row(f, schema.kinds) for _, f in rows]
    infos = [write_shard(cfg, schema, s, records if s == shards_with_data[0] else [], f"t{s}")
             for s in shards_with_data]
    return finalize(cfg, schema, infos, list(rejected), {"kind": "test", "path": cfg.src})


def test_finalize_writes_empty_shards_and_manifest_last(tmp_path):
    cfg = ConvertConfig(src="src", dst=str(tmp_path / "out"), num_shards=3)
    m = _publish(cfg, _rows(7))
    names = sorted(os.listdir(tmp_path / "out"))
    assert names == ["data-00000-of-00003.tfrecord", "data-00000-of-00003.tfrecord.idx",
                     "data-00001-of-00003.tfrecord", "data-00001-of-00003.tfrecord.idx",
                     "data-00002-of-00003.tfrecord", "data-00002-of-00003.tfrecord.idx", "dataset.json"]
    assert [s["records"] for s in m["shards"]] == [7, 0, 0] and m["records"] == 7
    assert load_manifest(tmp_path / "out") == json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert m["statistics"]["label"]["histogram"] == {"0": 3, "1": 2, "2": 2}
    assert [int(r["i"]) for r in _parsed(tmp_path / "out")] == list(range(7))
    assert not os.path.exists(staging_dir(cfg))


def _parsed(directory):
    from headrace.convert import feature_spec
    from headrace.io.example import parse_single_example

    spec = feature_spec(directory)
    return [parse_single_example(r, spec) for r in open_dataset(directory, verify_checksums=True)]


def test_too_many_rejected_publishes_only_the_rejected_list(tmp_path):
    cfg = ConvertConfig(src="src", dst=str(tmp_path / "out"), num_shards=1, max_rejected=1)
    bad = [{"id": f"x:{i}", "location": f"x:{i}", "reason": "malformed"} for i in (3, 1)]
    with pytest.raises(ConvertError, match=r"2 source rows rejected, more than max_rejected=1.*_rejected\.jsonl"):
        _publish(cfg, _rows(4), bad)
    assert os.listdir(tmp_path / "out") == ["_rejected.jsonl"]  # no manifest, no shards, no staging
    lines = (tmp_path / "out" / "_rejected.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["x:1", "x:3"]
    with pytest.raises(ManifestError, match="no finished conversion"):
        load_manifest(tmp_path / "out")


def test_no_records_is_an_error(tmp_path):
    cfg = ConvertConfig(src="src", dst=str(tmp_path / "out"), num_shards=1)
    with pytest.raises(ConvertError, match="has no records"):
        _publish(cfg, [], shards_with_data=())


def test_overwrite_rules(tmp_path):
    out = tmp_path / "out"
    check_destination(str(out), overwrite=False)  # new directory: fine
    _publish(ConvertConfig(src="src", dst=str(out), num_shards=2), _rows(5))
    with pytest.raises(FileExistsError, match=r"exists and is not empty.*--overwrite"):
        check_destination(str(out), overwrite=False)
    check_destination(str(out), overwrite=True)
    m = _publish(ConvertConfig(src="src", dst=str(out), num_shards=1, overwrite=True), _rows(3))
    assert sorted(os.listdir(out)) == ["data-00000-of-00001.tfrecord", "data-00000-of-00001.tfrecord.idx",
                                       "dataset.json"] and m["records"] == 3
    (out / "dataset.json.tmp-1234abcd").write_text("{")  # left by a crash while the manifest was written
    check_destination(str(out), overwrite=True)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"notes\.txt"):
        check_destination(str(out), overwrite=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="is a file"):
        check_destination(str(tmp_path / "file"), overwrite=False)


def test_verify_detects_changed_and_missing_shards(tmp_path):
    out = tmp_path / "out"
    _publish(ConvertConfig(src="src", dst=str(out), num_shards=2), _rows(6))
    shard = out / "data-00000-of-00002.tfrecord"
    data = bytearray(shard.read_bytes())
    data[20] ^= 1
    shard.write_bytes(bytes(data))
    verify(out, checksums=False)  # same size: only the checksum tells
    with pytest.raises(ManifestError, match=r"data-00000-of-00002\.tfrecord has SHA-256"):
        verify(out)
    shard.write_bytes(bytes(data[:-1]))
    with pytest.raises(ManifestError, match=r"bytes but the manifest says"):
        verify(out, checksums=False)
    shard.unlink()
    with pytest.raises(ManifestError, match="is missing"):
        open_dataset(out, verify_checksums=True)


@pytest.mark.parametrize("kwargs, words", [
    ({"to": "csv"}, "tfrecord, parquet"), ({"num_shards": 2, "shard_size": "1MiB"}, "not both"),
    ({"num_shards": 0}, "1..99999"), ({"shard_size": "big"}, "is not a size"), ({"image_size": "12"}, "WIDTHxHEIGHT"),
    ({"max_rejected": -1}, ">= 0"), ({"compression": "LZ4"}, "GZIP, ZLIB"), ({"prefix": "a/b"}, "prefix"),
])
def test_config_errors(kwargs, words):
    with pytest.raises(ValueError, match=words):
        ConvertConfig(src="a", dst="b", **kwargs)


def test_destination_equal_to_source_is_refused(tmp_path):
    with pytest.raises(ValueError, match="is the source"):
        ConvertConfig(src=str(tmp_path), dst=str(tmp_path) + "/")


def test_finalize_retried_after_a_partial_publish_completes(tmp_path):
    """A runner may retry the final step: shards it already renamed are kept, the rest published."""
    cfg = ConvertConfig(src="src", dst=str(tmp_path / "out"), num_shards=2)
    acc = SchemaAccumulator()
    rows = _rows(4)
    for r in rows:
        acc.add(r)
    schema = acc.schema()
    infos = [write_shard(cfg, schema, s, [encode_row(f, schema.kinds) for _, f in rows[s::2]], "a") for s in (0, 1)]
    first = infos[0]
    os.replace(first["index_tmp"], tmp_path / "out" / (first["path"] + ".idx"))
    os.replace(first["tmp"], tmp_path / "out" / first["path"])  # the first attempt died after this rename
    m = finalize(cfg, schema, infos, [], {"kind": "test"})
    assert [s["records"] for s in m["shards"]] == [2, 2]
    verify(tmp_path / "out")
    assert len(list(open_dataset(tmp_path / "out"))) == 4
