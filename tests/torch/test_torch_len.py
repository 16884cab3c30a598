"""len(to_torch(ds)): exact wherever the count is knowable without running the pipeline (TFRecord files,
interleave of them, the README Quick start and `headrace train` pipelines), the DataLoader's count with
workers, and errors that name the op that makes it unknown (issue #21 item 10, first half)."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader

import headrace as hr
from headrace.io import TFRecordWriter, build_index
from headrace.torch import to_torch


def _write(path, n: int, compression: str | None = None) -> str:
    with TFRecordWriter(str(path), compression) as w:
        for i in range(n):
            w.write(b"x" * (i * 37 % 500))
    return str(path)


@pytest.fixture
def shards(tmp_path) -> list[str]:
    return [_write(tmp_path / f"train-{i}.tfrecord", n) for i, n in enumerate([5, 9, 1, 7])]


def test_len_counts_tfrecord_files_and_compressed_ones(tmp_path, shards: list[str]) -> None:
    gz = _write(tmp_path / "z.tfrecord.gz", 6, "GZIP")
    assert len(to_torch(hr.io.TFRecordDataset(shards))) == 22
    assert len(to_torch(hr.io.TFRecordDataset(shards, num_parallel_reads=2).batch(4))) == 6
    assert len(to_torch(hr.io.TFRecordDataset(gz, compression_type="GZIP"))) == 6
    assert hr.io.TFRecordDataset(shards).cardinality() == hr.UNKNOWN_CARDINALITY  # tf.data's answer is kept


def test_len_reads_a_matching_index_instead_of_the_headers(shards: list[str], monkeypatch) -> None:
    from headrace._files.framing import RecordReader

    for f in shards:
        build_index(f)

    def no_scan(self):
        raise AssertionError(f"scanned {self.path} although its index matches")

    monkeypatch.setattr(RecordReader, "skip_record", no_scan)
    assert len(to_torch(hr.io.TFRecordDataset(shards))) == 22


def test_len_of_the_quick_start_pipeline_is_what_an_epoch_yields(tmp_path, shards: list[str]) -> None:
    ds = (hr.Dataset.list_files(str(tmp_path / "*.tfrecord"), shuffle=True, seed=0)
          .interleave(hr.io.TFRecordDataset, cycle_length=hr.AUTOTUNE, num_parallel_calls=hr.AUTOTUNE)
          .map(lambda r: len(r), num_parallel_calls=hr.AUTOTUNE)
          .shuffle(100, seed=0)
          .batch(3, drop_remainder=True)
          .prefetch(hr.AUTOTUNE)
          .with_options(hr.Options(memory_budget="64MiB")))
    assert len(to_torch(ds)) == 7 == sum(1 for _ in to_torch(ds))


def test_len_of_flat_map_sums_the_datasets_it_makes() -> None:
    assert len(to_torch(hr.Dataset.range(5).flat_map(lambda x: hr.Dataset.range(x).batch(2)))) == 6


def test_len_of_the_train_command_pipeline(shards: list[str]) -> None:
    from headrace.train.data import image_classification_dataset

    assert len(to_torch(image_classification_dataset(shards, 16, training=True).batch(4))) == 6


@pytest.mark.parametrize(("num_workers", "shard_by_worker", "expected"),
                         [(None, True, 6), (2, True, 6), (3, True, 7), (2, False, 12)])
def test_len_with_workers_is_what_the_dataloader_yields(shards: list[str], num_workers: int | None,
                                                        shard_by_worker: bool, expected: int) -> None:
    # Each worker batches its own share of the files (22 records: 6 batches of 4 without workers); with 3
    # workers the shares [5, 7], [9], [1] give 3 + 3 + 1 batches.
    ds = hr.io.TFRecordDataset(shards).batch(4)
    tds = to_torch(ds, num_workers=num_workers, shard_by_worker=shard_by_worker)
    assert len(tds) == expected
    loader = DataLoader(tds, batch_size=None, num_workers=num_workers or 0, multiprocessing_context="fork"
                        if num_workers else None)
    assert len(loader) == expected == sum(1 for _ in loader)


def test_worker_count_mismatch_is_an_error(shards: list[str]) -> None:
    loader = DataLoader(to_torch(hr.io.TFRecordDataset(shards), num_workers=3), batch_size=None, num_workers=2,
                        multiprocessing_context="fork")
    it = iter(loader)
    with pytest.raises(ValueError, match=r"to_torch\(num_workers=3\) runs in a DataLoader with num_workers=2"):
        list(it)
    # The re-raised error's traceback keeps the iterator in a reference cycle; left to the garbage collector,
    # torch's shutdown of its workers then waits out two 5 s join timeouts in whichever test runs next.
    it._shutdown_workers()
    with pytest.raises(ValueError, match=r"to_torch\(num_workers=2\) runs in a DataLoader with num_workers=0"):
        list(DataLoader(to_torch(hr.io.TFRecordDataset(shards), num_workers=2), batch_size=None))
    assert len(list(DataLoader(to_torch(hr.io.TFRecordDataset(shards), num_workers=1), batch_size=None))) == 22


@pytest.mark.parametrize("bad", [-1, 1.5, True, 10**6])
def test_to_torch_rejects_bad_num_workers(bad: object) -> None:
    with pytest.raises(ValueError, match=r"to_torch\(num_workers=.*\): expected None or the DataLoader's"):
        to_torch(hr.Dataset.range(3), num_workers=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("make", "names"), [
    (lambda: hr.Dataset.range(10).map(lambda x: x).filter(lambda x: x > 2).batch(2), r"filter\(<lambda>\)"),
    (lambda: hr.io.TFRecordDataset([], on_corrupt="skip").prefetch(2), r"TFRecordDataset .*on_corrupt='skip'"),
    (lambda: hr.Dataset.from_generator(lambda: iter(range(3)), output_signature=hr.TensorSpec((), "int64")),
     r"from_generator"),
    (lambda: hr.Dataset.range(3).interleave(lambda x: hr.Dataset.range(5).filter(lambda y: y > x)),
     r"interleave\(<lambda>\) makes it unknown \(the count of a dataset its map_func makes"),
], ids=["filter", "tfrecord-skip", "generator", "interleave-of-filtered"])
def test_unknown_len_names_the_op_and_the_fix(make, names: str) -> None:
    with pytest.raises(TypeError, match=rf"unknown without running the pipeline: {names}.*Count one epoch"):
        len(to_torch(make()))


def test_infinite_len_says_so() -> None:
    with pytest.raises(TypeError, match=r"infinite \(repeat\(\) without a count\)"):
        len(to_torch(hr.Dataset.range(3).repeat()))


def test_len_of_a_truncated_file_raises_data_loss_naming_it() -> None:
    from pathlib import Path

    from headrace import DataLossError

    path = str(Path(__file__).resolve().parents[1] / "data" / "tfrecord" / "truncated.tfrecord")
    with pytest.raises(DataLossError, match=r"truncated record .* in .*truncated\.tfrecord at byte"):
        len(to_torch(hr.io.TFRecordDataset(path)))
