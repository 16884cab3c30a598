"""The seeds' tf.data pipelines, written exactly as tf.data code with only the import changed.

    from tensorflow.data import Dataset, AUTOTUNE, TFRecordDataset   # before
    from headrace.data import Dataset, AUTOTUNE, TFRecordDataset     # after
"""

from __future__ import annotations

import numpy as np

from headrace.data import AUTOTUNE, Dataset, TFRecordDataset
from headrace.io import ShardedWriter
from headrace.io.example import FixedLenFeature, encode, parse_single_example


def test_from_tensor_slices_map_shuffle_batch_prefetch():
    labels = np.arange(1000)
    images = (labels[:, None, None, None] % 251 + np.zeros((1, 8, 8, 3))).astype(np.uint8)

    def preprocess(image, label):
        return image.astype(np.float32) / 255.0, label

    ds = (Dataset.from_tensor_slices((images, labels))
          .map(preprocess, num_parallel_calls=AUTOTUNE)
          .shuffle(buffer_size=1000)
          .batch(32)
          .prefetch(AUTOTUNE))
    batches = list(ds)
    assert [len(b[1]) for b in batches] == [32] * 31 + [8]
    assert batches[0][0].shape == (32, 8, 8, 3) and batches[0][0].dtype == np.float32
    got_labels = np.concatenate([b[1] for b in batches])
    got_images = np.concatenate([b[0] for b in batches])
    assert sorted(got_labels.tolist()) == labels.tolist()
    assert not np.array_equal(got_labels, labels), "shuffled"
    assert np.allclose(got_images[:, 0, 0, 0], (got_labels % 251) / 255.0), "images stay with their labels"


def test_list_files_interleave_map_shuffle_batch_prefetch(tmp_path):
    with ShardedWriter(str(tmp_path), "train", num_shards=8) as writer:
        for i in range(800):
            writer.write(encode({"id": i, "x": np.full(4, i, np.float32)}))
    spec = {"id": FixedLenFeature([], "int64"), "x": FixedLenFeature([4], "float32")}

    def parse(record):
        ex = parse_single_example(record, spec)
        return ex["x"], ex["id"]

    files = Dataset.list_files(str(tmp_path / "train-*.tfrecord"), shuffle=True, seed=0)
    ds = (files.interleave(TFRecordDataset, cycle_length=4, num_parallel_calls=AUTOTUNE)
               .map(parse, num_parallel_calls=AUTOTUNE)
               .shuffle(1000, seed=0)
               .batch(64, drop_remainder=True)
               .prefetch(AUTOTUNE))
    ids, xs = [], []
    for x, i in ds:
        assert x.shape == (64, 4) and x.dtype == np.float32 and i.dtype == np.int64
        ids.append(i)
        xs.append(x)
    ids = np.concatenate(ids)
    assert len(ids) == 768 and len(set(ids.tolist())) == 768 and set(ids.tolist()) <= set(range(800))
    assert np.array_equal(np.concatenate(xs)[:, 0], ids.astype(np.float32))
