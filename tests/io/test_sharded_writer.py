"""ShardedWriter: shard names, round-robin and size-based sharding, atomic renames, indexes."""

from __future__ import annotations

import os

import pytest
from tfrecord_helpers import make_records

from headrace.io import ShardedWriter, TFRecordDataset, build_index, read_index


def _visible(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if not n.startswith("."))


def test_num_shards_round_robin_names_and_indexes(tmp_path):
    records = make_records(10)
    with ShardedWriter(tmp_path, "train", num_shards=4) as w:
        for r in records:
            w.write(r)
        assert _visible(tmp_path) == []  # nothing looks complete before close
    assert w.paths == [str(tmp_path / f"train-{i:05d}-of-00004.tfrecord") for i in range(4)]
    for i, path in enumerate(w.paths):
        assert list(TFRecordDataset(path)) == records[i::4]
        written = read_index(path + ".idx")
        rebuilt = read_index(build_index(path, str(tmp_path / f"rebuilt{i}.idx")))
        assert written.tolist() == rebuilt.tolist() and len(written) == len(records[i::4])
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_max_shard_bytes_rolls_over_and_numbers_at_close(tmp_path):
    records = [bytes([i]) * 100 for i in range(7)]  # 116 framed bytes each
    w = ShardedWriter(tmp_path, "s", max_shard_bytes=250)
    for r in records:
        w.write(r)
    paths = w.close()
    assert [os.path.basename(p) for p in paths] == [f"s-{i:05d}-of-00004.tfrecord" for i in range(4)]
    assert [len(list(TFRecordDataset(p))) for p in paths] == [2, 2, 2, 1]
    assert [r for p in paths for r in TFRecordDataset(p)] == records
    assert w.close() == paths  # idempotent


def test_a_record_larger_than_the_limit_gets_its_own_shard(tmp_path):
    w = ShardedWriter(tmp_path, "big", max_shard_bytes=50)
    for r in (b"a", b"b" * 200, b"c"):
        w.write(r)
    assert [list(TFRecordDataset(p)) for p in w.close()] == [[b"a"], [b"b" * 200], [b"c"]]


def test_default_is_one_shard_and_empty_writer_writes_an_empty_shard(tmp_path):
    assert [os.path.basename(p) for p in ShardedWriter(tmp_path / "d", "e").close()] == ["e-00000-of-00001.tfrecord"]
    assert list(TFRecordDataset(str(tmp_path / "d" / "e-00000-of-00001.tfrecord"))) == []


def test_exception_aborts_and_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="boom"), ShardedWriter(tmp_path, "x", num_shards=2) as w:
        w.write(b"1")
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="closed ShardedWriter"):
        w.write(b"2")


def test_compressed_shards_need_index_false(tmp_path):
    with pytest.raises(ValueError, match="index=False"):
        ShardedWriter(tmp_path, "z", options="GZIP")
    w = ShardedWriter(tmp_path, "z", num_shards=2, options="GZIP", index=False)
    for r in make_records(5):
        w.write(r)
    paths = w.close()
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in paths)
    assert sorted(r for p in paths for r in TFRecordDataset(p, "GZIP")) == sorted(make_records(5))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"num_shards": 0}, "num_shards=0"),
    ({"max_shard_bytes": -1}, "max_shard_bytes=-1"),
    ({"num_shards": 2, "max_shard_bytes": 10}, "not both"),
])
def test_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        ShardedWriter(tmp_path, "p", **kwargs)


def test_bad_prefix(tmp_path):
    with pytest.raises(ValueError, match="prefix='a/b'"):
        ShardedWriter(tmp_path, "a/b")
