"""Conversions on Beam's DirectRunner: records in = records out, no duplicates, schema, rejected rows,
determinism, overwrite refusal; the output reads back through headrace.io and matches its manifest."""

from __future__ import annotations

import collections
import json
import os
import shutil
import sys

import pytest

pytest.importorskip("apache_beam", reason="headrace.convert pipelines need pip install 'headrace[beam]'")

from headrace.convert import ConvertError, convert, feature_spec, load_manifest, shard_paths, verify
from headrace.io import TFRecordDataset, TFRecordRandomAccess, parse_example

from .convert_helpers import CSV_IDS, IN_PROCESS, csv_file, image_folder, jsonl_file


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """An image folder (one broken JPEG) converted to 3 TFRecord shards, allowing 1 rejected row."""
    root = tmp_path_factory.mktemp("images")
    good = image_folder(root / "src", n=24)
    m = convert(root / "src", root / "out", num_shards=3, max_rejected=1, beam_options=IN_PROCESS)
    return root, good, m


def _examples(directory):
    spec = feature_spec(directory)
    records = list(TFRecordDataset(shard_paths(directory)))
    return parse_example(records, spec)


def test_records_in_equal_records_out_without_duplicates(images):
    root, good, m = images
    ex = _examples(root / "out")
    names = [n.decode() for n in ex["image/filename"]]
    assert len(names) == len(set(names)) == len(good) == m["records"]
    assert set(names) == set(good)
    assert {n: int(label) for n, label in zip(names, ex["image/class/label"])} == good
    for name, data in zip(names, ex["image/encoded"]):
        assert data == (root / "src" / name).read_bytes()  # images kept encoded, byte for byte


def test_schema_and_statistics(images):
    _, good, m = images
    assert m["features"]["image/class/label"] == {"type": "FixedLenFeature", "dtype": "int64", "shape": []}
    assert m["features"]["image/encoded"]["dtype"] == "string"
    hist = m["statistics"]["image/class/label"]["histogram"]
    assert hist == {str(k): v for k, v in collections.Counter(good.values()).items()}
    assert m["statistics"]["image/width"]["max"] == 64 and m["statistics"]["image/width"]["min"] == 30
    assert m["source"]["kind"] == "image_folder" and len(m["source"]["class_names"]) == 12


def test_manifest_matches_the_files(images):
    root, _, m = images
    out = root / "out"
    assert [s["path"] for s in m["shards"]] == [f"data-{i:05d}-of-00003.tfrecord" for i in range(3)]
    verify(out)  # sizes and SHA-256 of every shard
    for s, path in zip(m["shards"], shard_paths(out)):
        assert os.path.getsize(path) == s["bytes"]
        assert sum(1 for _ in TFRecordDataset(path)) == s["records"]
        assert len(TFRecordRandomAccess(path)) == s["records"]  # the .idx index agrees with the shard
    assert sum(s["records"] for s in m["shards"]) == m["records"]
    assert load_manifest(out)["records"] == m["records"]
    assert not [n for n in os.listdir(out) if n.startswith(".")]  # staging removed


def test_rejected_rows_are_listed_and_counted(images):
    root, _, m = images
    assert m["rejected"] == 1 and m["rejected_file"] == "_rejected.jsonl"
    (entry,) = [json.loads(x) for x in (root / "out" / "_rejected.jsonl").read_text().splitlines()]
    assert entry["id"] == "camera/broken.jpg" and entry["location"].endswith("camera/broken.jpg")
    assert "ImageDecodeError" in entry["reason"]


def test_too_many_rejected_fails_without_manifest(images):
    root, _, _ = images
    with pytest.raises(ConvertError, match="1 source rows rejected, more than max_rejected=0"):
        convert(root / "src", root / "failed", num_shards=2, beam_options=IN_PROCESS)
    assert os.listdir(root / "failed") == ["_rejected.jsonl"]


def test_same_input_same_bytes_and_overwrite(images, tmp_path):
    root, _, m = images
    again = tmp_path / "again"
    shutil.copytree(root / "out", again)
    with pytest.raises(FileExistsError, match="--overwrite"):
        convert(root / "src", again, num_shards=3, max_rejected=1, beam_options=IN_PROCESS)
    m2 = convert(root / "src", again, num_shards=3, max_rejected=1, overwrite=True, beam_options=IN_PROCESS)
    assert [s["sha256"] for s in m2["shards"]] == [s["sha256"] for s in m["shards"]]  # deterministic
    m3 = convert(root / "src", again, num_shards=2, max_rejected=1, overwrite=True, seed=5, beam_options=IN_PROCESS,
                 image_size="16x12")
    assert sorted(n for n in os.listdir(again) if "-of-" in n) == [
        f"data-0000{i}-of-00002.tfrecord{x}" for i in range(2) for x in ("", ".idx")]  # old shards gone
    assert m3["statistics"]["image/height"]["max"] == 12 and m3["records"] == m["records"]


def test_csv_to_parquet(tmp_path):
    import pyarrow.parquet as pq

    src = csv_file(tmp_path / "t.csv")
    m = convert(src, tmp_path / "out", to="parquet", num_shards=2, max_rejected=1, beam_options=IN_PROCESS)
    assert m["features"]["id"]["dtype"] == "int64" and m["features"]["score"]["dtype"] == "string"
    assert m["features"]["tags"] == {"type": "VarLenFeature", "dtype": "string"}
    table = [r for p in shard_paths(tmp_path / "out") for r in pq.read_table(p).to_pylist()]
    assert sorted(r["id"] for r in table) == [1, 2, 3, 5, 6] and m["records"] == len(CSV_IDS)
    row = next(r for r in table if r["id"] == 5)
    assert row["name"] == b"two\nlines" and row["score"] == b"abc" and row["tags"] == [b"y"]
    assert next(r for r in table if r["id"] == 2)["tags"] == []  # missing VarLen feature: no values, no null
    from headrace.convert import open_dataset

    rows = list(open_dataset(tmp_path / "out", verify_checksums=True))  # headrace.io.ParquetDataset
    assert sorted(int(r["id"]) for r in rows) == [1, 2, 3, 5, 6]
    assert m["statistics"]["id"]["mean"] == pytest.approx(17 / 5)
    assert json.loads((tmp_path / "out" / "_rejected.jsonl").read_text())["id"] == "t.csv:5"


def test_jsonl_by_shard_size_and_tfrecord_recompression(tmp_path):
    src = jsonl_file(tmp_path / "d.jsonl")
    m = convert(src, tmp_path / "out", shard_size="60B", max_rejected=3, beam_options=IN_PROCESS)
    assert m["records"] == 3 and m["rejected"] == 3 and len(m["shards"]) > 1
    assert m["features"]["x"] == {"type": "FixedLenFeature", "dtype": "float32", "shape": [2]}
    assert m["statistics"]["label"]["histogram"] == {"0": 2, "1": 1}
    ex = _examples(tmp_path / "out")
    assert sorted(ex["id"].tolist()) == [1, 2, 6]
    gz = convert(tmp_path / "out", tmp_path / "gz", num_shards=1, compression="GZIP", beam_options=IN_PROCESS)
    assert gz["shards"][0]["path"] == "data-00000-of-00001.tfrecord.gz" and gz["shards"][0]["index"] is None
    again = parse_example(list(TFRecordDataset(shard_paths(tmp_path / "gz"), "GZIP")), feature_spec(tmp_path / "gz"))
    assert sorted(map(tuple, again["x"].tolist())) == sorted(map(tuple, ex["x"].tolist()))
    assert gz["features"] == m["features"]


def test_strings_and_numbers_fail_with_the_feature_named(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"v": 1}\n{"v": "one"}\n')
    with pytest.raises(ConvertError, match=r"feature 'v' holds strings \(first in d\.jsonl:2\)"):
        convert(tmp_path / "d.jsonl", tmp_path / "out", beam_options=IN_PROCESS)
    assert os.listdir(tmp_path / "out") == []  # no manifest, and the staged run files are gone


@pytest.mark.slow
def test_multiprocess_direct_runner_gives_the_same_shards(tmp_path):
    """The default runner for large sources (2 worker processes here) writes byte-identical shards to the
    in-process run (the default for small sources)."""
    src = csv_file(tmp_path / "t.csv")
    one = convert(src, tmp_path / "one", num_shards=2, max_rejected=1)
    two = convert(src, tmp_path / "two", num_shards=2, max_rejected=1,
                  beam_options=["direct_num_workers=2", "direct_running_mode=multi_processing"])
    assert [s["sha256"] for s in one["shards"]] == [s["sha256"] for s in two["shards"]]


def test_small_sources_convert_in_process_by_default():
    from headrace.convert.pipeline import SMALL_SOURCE_BYTES, pipeline_options

    def direct(**kwargs):
        opts = pipeline_options(**kwargs).get_all_options()
        return opts["direct_running_mode"], opts["direct_num_workers"]

    assert direct(source_bytes=SMALL_SOURCE_BYTES - 1) == ("in_memory", 1)
    assert direct(source_bytes=SMALL_SOURCE_BYTES) == ("multi_processing", os.cpu_count())
    assert direct(source_bytes=1, beam_options=["direct_num_workers=2"]) == ("multi_processing", 2)  # as asked


def test_missing_beam_names_the_extra(monkeypatch, tmp_path):
    from headrace.convert import build_pipeline

    monkeypatch.setitem(sys.modules, "apache_beam", None)
    with pytest.raises(ImportError, match=r"pip install 'headrace\[beam\]'"):
        build_pipeline(tmp_path, tmp_path / "out")


def test_many_small_runs_give_the_same_shards(tmp_path, monkeypatch):
    """Readers that spill every row to its own run file still produce byte-identical shards."""
    import headrace.convert._pipeline as pipeline_module

    src = csv_file(tmp_path / "t.csv")
    whole = convert(src, tmp_path / "whole", num_shards=2, max_rejected=1, beam_options=IN_PROCESS)
    monkeypatch.setattr(pipeline_module, "SPILL_BYTES", 1)
    spilled = convert(src, tmp_path / "spilled", num_shards=2, max_rejected=1, beam_options=IN_PROCESS)
    assert [s["sha256"] for s in spilled["shards"]] == [s["sha256"] for s in whole["shards"]]
    assert sorted(os.listdir(tmp_path / "spilled")) == sorted(os.listdir(tmp_path / "whole"))  # runs cleaned up


def test_fsspec_urls_in_and_out():
    """Source and destination as fsspec URLs (memory://): listing, staging, renames and the manifest."""
    import fsspec

    from headrace.convert import open_dataset

    fs = fsspec.filesystem("memory")
    with fs.open("/hr-convert-src/t.csv", "wb") as f:
        f.write(b"a,b,label\n1,x,0\n2,y,1\n3,z,1\n")
    try:
        m = convert("memory://hr-convert-src/t.csv", "memory://hr-convert-out", num_shards=2, beam_options=IN_PROCESS)
        assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls("/hr-convert-out", detail=False)) == [
            "data-00000-of-00002.tfrecord", "data-00000-of-00002.tfrecord.idx", "data-00001-of-00002.tfrecord",
            "data-00001-of-00002.tfrecord.idx", "dataset.json"]
        assert m["records"] == 3 and sum(1 for _ in open_dataset("memory://hr-convert-out", verify_checksums=True)) == 3
    finally:
        for d in ("/hr-convert-src", "/hr-convert-out"):
            if fs.exists(d):
                fs.rm(d, recursive=True)
