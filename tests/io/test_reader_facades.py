"""The readers stay ``Dataset`` subclasses with their public attributes; their transformations are plain
Datasets; a Dataset of file names is unwrapped, anything else is refused clearly."""

from __future__ import annotations

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import headrace as hr
from headrace.io import HDF5Dataset, ParquetDataset, TFRecordDataset, TFRecordWriter


def test_tfrecord_dataset_attributes_and_names_dataset(tmp_path):
    paths = []
    for i in range(2):
        paths.append(str(tmp_path / f"r{i}.tfrecord"))
        with TFRecordWriter(paths[-1]) as w:
            w.write(f"record {i}".encode())
    ds = TFRecordDataset(paths, compression_type="", num_parallel_reads=2, on_corrupt="skip", check_crc=False)
    assert isinstance(ds, hr.Dataset) and repr(ds) == ("<TFRecordDataset TFRecordDataset element_spec="
                                                  "TensorSpec(shape=(), dtype=string, name=None)>")
    assert (ds.compression_type, ds.num_parallel_reads, ds.on_corrupt, ds.check_crc) == ("", 2, "skip", False)
    assert ds.buffer_size > 0 and ds.skipped_records == []
    assert sorted(ds) == [b"record 0", b"record 1"]
    mapped = ds.map(len)
    assert type(mapped) is hr.Dataset and list(mapped.take(1)) == [8]
    from_names = TFRecordDataset(hr.Dataset.from_tensor_slices(paths))
    assert list(from_names) == [b"record 0", b"record 1"]
    with pytest.raises(AttributeError, match="no attribute 'no_such'"):
        _ = ds.no_such
    with pytest.raises(TypeError, match=r"TFRecordDataset\(filenames=42\)"):
        TFRecordDataset(42)


def test_parquet_and_hdf5_attributes(tmp_path):
    pq_path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"id": np.arange(10), "x": np.arange(10.0)}), pq_path, row_group_size=4)
    ds = ParquetDataset(pq_path, batch_size=4, seed=3)
    assert isinstance(ds, hr.Dataset) and ds.files == [pq_path] and ds.batch_size == 4 and ds.seed == 3
    assert [m.path for m in ds.metadata()] == [pq_path] and ds.columns == ["id", "x"]
    assert ds.units() == [(0, 0), (0, 1), (0, 2)] and len(ds) == 3

    h5_path = str(tmp_path / "t.h5")
    with h5py.File(h5_path, "w") as f:
        f["a"] = np.arange(12)
    ds5 = HDF5Dataset(h5_path, "a", num_shards=2, index=1)
    assert (ds5.path, ds5.keys, ds5.length, ds5.start, ds5.stop) == (h5_path, ["a"], 12, 6, 12)
    assert [int(v) for v in ds5] == list(range(6, 12))
