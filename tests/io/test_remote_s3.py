"""Remote reads against a real S3-compatible server (moto's server mode) on loopback: no patching.

The fixture starts ``moto.server.ThreadedMotoServer`` on 127.0.0.1 with a free port and points s3fs at
it the way a user points it at MinIO or another S3-compatible store: ``fsspec.config.conf["s3"]``.
"""

from __future__ import annotations

import io
import socket
from collections.abc import Iterator
from pathlib import Path

import cv2
import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import headrace as hr
from headrace import image as himg
from headrace.io import (
    FixedLenFeature,
    HDF5Dataset,
    ParquetDataset,
    TFRecordDataset,
    TFRecordWriter,
    image_folder,
    parse_single_example,
)
from headrace.io.example import encode

BUCKET = "headrace-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture()
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """An empty bucket on the loopback server; yields the s3fs filesystem."""
    import fsspec
    import s3fs

    for var, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                       ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(var, value)
    monkeypatch.setitem(fsspec.config.conf, "s3", {"client_kwargs": {"endpoint_url": s3_endpoint}})
    s3fs.S3FileSystem.clear_instance_cache()
    fs = fsspec.filesystem("s3")
    fs.mkdir(BUCKET)
    try:
        yield fs
    finally:
        fs.rm(BUCKET, recursive=True)
        s3fs.S3FileSystem.clear_instance_cache()


def _jpeg(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    img = cv2.resize(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8), (32, 24))
    return cv2.imencode(".jpg", img)[1].tobytes()


def test_tfrecord_shards_roundtrip_through_list_files_and_interleave(s3: object) -> None:
    shards, per_shard = 3, 7
    written = {}
    for s in range(shards):
        url = f"s3://{BUCKET}/train/train-{s:05d}-of-{shards:05d}.tfrecord"
        with TFRecordWriter(url) as w:
            for i in range(per_shard):
                label = s * per_shard + i
                written[label] = _jpeg(label)
                w.write(encode({"image/encoded": written[label], "label": label}))
    spec = {"image/encoded": FixedLenFeature([], "string"), "label": FixedLenFeature([], "int64")}

    def parse(record: bytes) -> tuple[np.ndarray, np.ndarray, bytes]:
        ex = parse_single_example(record, spec)
        data = ex["image/encoded"]
        return himg.decode_and_resize(data, (16, 16)), ex["label"], data

    files = hr.Dataset.list_files(f"s3://{BUCKET}/train/train-*.tfrecord", shuffle=True, seed=1)
    ds = (files.interleave(TFRecordDataset, cycle_length=2, num_parallel_calls=2)
          .map(parse, num_parallel_calls=2)
          .batch(5))
    seen = {}
    for images, labels, datas in ds:
        assert images.shape[1:] == (16, 16, 3) and images.dtype == np.uint8
        for img, label, data in zip(images, labels, datas):
            seen[int(label)] = data
            np.testing.assert_array_equal(img, himg.decode_and_resize(written[int(label)], (16, 16)))
    assert seen == written  # every record, once, intact


def test_parquet_hdf5_and_image_folder_from_s3(s3, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for k in range(2):
        buf = io.BytesIO()
        pq.write_table(pa.table({"id": np.arange(k * 10, k * 10 + 10)}), buf, row_group_size=4)
        s3.pipe(f"{BUCKET}/pq/part-{k}.parquet", buf.getvalue())
    ds = ParquetDataset(f"s3://{BUCKET}/pq/*.parquet", batch_size=3, num_shards=2, index=1)
    assert sorted(int(v) for b in ds for v in b["id"]) == [4, 5, 6, 7, 10, 11, 12, 13, 18, 19]

    local = tmp_path / "d.h5"
    with h5py.File(local, "w") as f:
        f.create_dataset("x", data=np.arange(30).reshape(15, 2), chunks=(4, 2))
    s3.put(str(local), f"{BUCKET}/h5/d.h5")
    rows = list(HDF5Dataset(f"s3://{BUCKET}/h5/d.h5", "x"))
    np.testing.assert_array_equal(np.stack(rows), np.arange(30).reshape(15, 2))

    for cls in ("a", "b"):
        for i in range(2):
            s3.pipe(f"{BUCKET}/img/{cls}/{i}.jpg", _jpeg(ord(cls) + i))
    folder = image_folder(f"s3://{BUCKET}/img", image_size=(8, 8), shuffle=False)
    assert folder.class_names == ["a", "b"]
    got = [(img, int(label)) for img, label in folder]
    assert [lbl for _, lbl in got] == [0, 0, 1, 1]
    np.testing.assert_array_equal(got[3][0], himg.decode_and_resize(_jpeg(ord("b") + 1), (8, 8)))


def test_missing_remote_files_are_named(s3: object) -> None:
    with pytest.raises(FileNotFoundError, match=rf"s3://{BUCKET}/nope\.parquet"):
        len(ParquetDataset(f"s3://{BUCKET}/nope.parquet"))
    with pytest.raises(FileNotFoundError, match=rf"s3://{BUCKET}/nope\.h5"):
        HDF5Dataset(f"s3://{BUCKET}/nope.h5", "x")
    with pytest.raises(FileNotFoundError, match="no files matched"):
        hr.Dataset.list_files(f"s3://{BUCKET}/none-*.tfrecord")
