"""The ``headrace`` command: --help everywhere, smoke runs of inspect / bench / train / demo on tiny data,
``inspect`` on ``headrace convert`` output (its manifest, ``--verify``), and one-line errors (no traceback,
exit status 1) for bad paths, empty datasets, unknown models, missing Beam and bad manifests."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from headrace.cli import app

runner = CliRunner()


def _invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def _last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 real-photo JPEGs (64x48, 12 classes) as 3 TFRecord shards of image Examples."""
    from headrace._skimage_photos import iter_photo_jpegs
    from headrace.io.example import encode
    from headrace.io.sharded_writer import ShardedWriter

    out = tmp_path_factory.mktemp("shards")
    with ShardedWriter(out, "train", num_shards=3) as w:
        for jpeg, label in iter_photo_jpegs(24, (64, 48)):
            w.write(encode({"image/encoded": jpeg, "image/class/label": label}))
    return out


@pytest.mark.parametrize("command", [[], ["inspect"], ["bench"], ["train"], ["demo"], ["convert"]])
def test_every_command_has_help(command: list[str]) -> None:
    result = _invoke(*command, "--help")
    assert result.exit_code == 0
    assert "Usage: headrace" in result.output
    if command == ["train"]:
        for option in ("--model", "--image-size", "--global-batch-size", "--epochs", "--precision",
                       "--memory-budget", "--checkpoint-dir", "--resume"):
            assert option in result.output


def test_console_entry_point_runs() -> None:
    done = subprocess.run([sys.executable, "-m", "headrace.cli", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "inspect" in done.stdout and "demo" in done.stdout


def test_inspect_tfrecord_shards(shards: Path) -> None:
    result = _invoke("inspect", str(shards))
    assert result.exit_code == 0, result.output
    info = _last_json(result.output)
    assert info["format"] == "tfrecord" and info["records"] == 24 and len(info["shards"]) == 3
    assert info["features"]["image/encoded"]["dtype"] == "string"
    assert info["features"]["image/class/label"] == {"dtype": "int64", "shape": [1], "in_records": "24/24"}
    assert info["bytes"] == sum(p.stat().st_size for p in shards.glob("*.tfrecord"))
    assert "24 records" in result.output


def test_inspect_parquet_hdf5_and_image_folder(tmp_path: Path) -> None:
    import h5py
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from headrace._skimage_photos import make_photo_jpegs

    pq.write_table(pa.table({"x": np.arange(10), "name": [b"a"] * 10}), tmp_path / "t.parquet",
                   row_group_size=4)
    with h5py.File(tmp_path / "t.h5", "w") as f:
        f["images"] = np.zeros((6, 4, 4, 3), np.uint8)
        f["labels"] = np.arange(6)
    make_photo_jpegs(tmp_path / "folder", 24, size=(32, 32))
    pq_info = _last_json(_invoke("inspect", str(tmp_path / "t.parquet")).output)
    assert (pq_info["format"], pq_info["records"], pq_info["shards"][0]["row_groups"]) == ("parquet", 10, 3)
    assert pq_info["features"]["x"] == {"dtype": "int64"}
    h5_info = _last_json(_invoke("inspect", str(tmp_path / "t.h5")).output)
    assert h5_info["records"] == 6 and h5_info["features"]["images"] == {"dtype": "uint8", "shape": [4, 4, 3]}
    folder = _last_json(_invoke("inspect", str(tmp_path / "folder")).output)
    assert folder["format"] == "image_folder" and folder["records"] == 24 and len(folder["classes"]) == 12


def test_bench_reports_throughput_and_memory(shards: Path) -> None:
    result = _invoke("bench", str(shards), "--image-size", "32", "--batch-size", "8", "--seconds", "5",
                     "--memory-budget", "32MiB")
    assert result.exit_code == 0, result.output
    info = _last_json(result.output)
    assert info["pipeline"] == "decode+resize images" and info["elements"] == 24
    assert info["elements_per_s"] > 0
    assert 0 < info["pipeline_peak_bytes"] <= 32 * 2**20


def test_train_then_resume(shards: Path, tmp_path: Path) -> None:
    args = ["train", str(shards), "--model", "small-cnn", "--image-size", "32", "--global-batch-size", "8",
            "--epochs", "1", "--memory-budget", "128MiB", "--checkpoint-dir", str(tmp_path / "ck")]
    result = _invoke(*args)
    assert result.exit_code == 0, result.output
    info = _last_json(result.output)
    assert info["steps"] == 3 and info["num_classes"] == 12 and info["records"] == 24
    assert (tmp_path / "ck" / "metrics.jsonl").exists() and list((tmp_path / "ck").glob("ckpt-*.pt"))
    again = _last_json(_invoke(*args, "--resume").output)
    assert again["resumed_from"].endswith("ckpt-000000003.pt") and again["steps"] == 3  # nothing left to do


def test_demo_tiny_configuration(tmp_path: Path) -> None:
    pytest.importorskip("apache_beam", reason="the demo converts its photos with headrace convert (Beam)")
    from headrace._skimage_photos import PHOTO_CLASSES
    from headrace.io.example import FixedLenFeature, parse_single_example
    from headrace.io.tfrecord import TFRecordDataset

    result = _invoke("demo", "--images", "48", "--epochs", "1", "--image-size", "32", "--model", "small-cnn",
                     "--global-batch-size", "16", "--memory-budget", "192MiB", "--output", str(tmp_path))
    assert result.exit_code == 0, result.output
    info = _last_json(result.output)
    assert set(info) >= {"accuracy", "images_per_s", "peak_rss_bytes", "memory_budget_bytes"}
    assert info["memory_budget_bytes"] == 192 * 2**20 and len(info["accuracy_per_epoch"]) == 1
    assert (tmp_path / "demo.png").stat().st_size > 1000
    # the shards are headrace convert's: 16 + 2 of them, each split with its manifest
    assert len(list((tmp_path / "data" / "train").glob("train-*-of-00016.tfrecord"))) == 16
    assert len(list((tmp_path / "data" / "eval").glob("eval-*-of-00002.tfrecord"))) == 2
    assert "converted them with headrace.convert" in result.output
    spec = {k: FixedLenFeature([], t) for k, t in
            (("image/class/label", "int64"), ("image/class/text", "string"), ("image/filename", "string"))}
    seen: dict[str, list[int]] = {}
    for split in ("train", "eval"):
        manifest = json.loads((tmp_path / "data" / split / "dataset.json").read_text())
        assert manifest["source"]["class_names"] == list(PHOTO_CLASSES)
        for path in sorted((tmp_path / "data" / split).glob("*.tfrecord")):
            for record in TFRecordDataset(str(path)):
                ex = parse_single_example(record, spec)
                index, label = int(Path(ex["image/filename"].decode()).stem), int(ex["image/class/label"])
                # the generator made photo i of class i % 12: the label ids are PHOTO_CLASSES indices
                assert label == index % 12 and ex["image/class/text"].decode() == PHOTO_CLASSES[label]
                seen.setdefault(split, []).append(index)
    assert len(seen["eval"]) == 4 and sorted(seen["train"] + seen["eval"]) == list(range(48))


def test_demo_without_beam_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "apache_beam", None)
    result = runner.invoke(app, ["demo", "--images", "200", "--output", str(tmp_path)])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'headrace[beam]'" in lines[0], result.stderr
    assert not (tmp_path / "data").exists()


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Counter[int]]:
    """25 real-photo JPEGs in class folders converted by headrace convert into 3 shards; and their labels."""
    pytest.importorskip("apache_beam", reason="headrace convert needs pip install 'headrace[beam]'")
    from headrace import convert
    from headrace._skimage_photos import make_photo_jpegs

    root = tmp_path_factory.mktemp("converted")
    made = make_photo_jpegs(root / "photos", 25, size=(32, 24))
    convert.convert(root / "photos", root / "shards", num_shards=3,
                    beam_options=["direct_running_mode=in_memory", "direct_num_workers=1"])
    return root / "shards", Counter(label for _, label in made)


def test_inspect_reads_the_convert_manifest(converted: tuple[Path, Counter[int]]) -> None:
    from headrace._skimage_photos import PHOTO_CLASSES
    from headrace.io.tfrecord import TFRecordDataset

    dst, labels = converted
    result = _invoke("inspect", str(dst))
    assert result.exit_code == 0, result.output
    info = _last_json(result.output)
    shard_files = sorted(dst.glob("*.tfrecord"))
    assert info["format"] == "tfrecord" and info["manifest"] == str(dst / "dataset.json")
    assert info["records"] == 25 and info["rejected"] == 0 and info["checked"] == "sizes"
    assert [Path(s["path"]).name for s in info["shards"]] == [f.name for f in shard_files]
    assert [s["bytes"] for s in info["shards"]] == [f.stat().st_size for f in shard_files]
    assert [s["records"] for s in info["shards"]] == [sum(1 for _ in TFRecordDataset(str(f))) for f in shard_files]
    assert info["features"]["image/class/label"] == {"type": "FixedLenFeature", "dtype": "int64", "shape": []}
    assert info["features"]["image/encoded"]["dtype"] == "string"
    assert info["statistics"]["image/width"]["min"] == info["statistics"]["image/width"]["max"] == 32
    assert info["labels"]["feature"] == "image/class/label"
    assert info["labels"]["histogram"] == {str(k): labels[k] for k in sorted(labels)}
    assert info["labels"]["class_names"] == list(PHOTO_CLASSES)
    assert f"image/class/label = 0 (astronaut): {labels[0]} records" in result.output
    assert "image/height: FixedLenFeature int64 [] (min 24, max 24, mean 24)" in result.output
    # the manifest's own path works too, and --verify reads every shard's SHA-256
    again = _invoke("inspect", str(dst / "dataset.json"), "--verify")
    assert again.exit_code == 0, again.output
    verified = _last_json(again.output)
    assert verified["checked"] == "sha256" and verified["shards"] == info["shards"]
    assert "sizes and SHA-256 match the manifest" in again.output


def test_inspect_verify_finds_a_corrupt_or_truncated_shard(converted: tuple[Path, Counter[int]],
                                                           tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(converted[0], copy)
    shard = sorted(copy.glob("*.tfrecord"))[1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes: only the checksum can tell
    shard.write_bytes(bytes(data))
    assert _invoke("inspect", str(copy)).exit_code == 0
    for args, fault in ((["--verify"], "SHA-256"), ([], "bytes but the manifest says")):
        result = runner.invoke(app, ["inspect", str(copy), *args])
        assert result.exit_code == 1, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and str(shard) in lines[0] and fault in lines[0], result.stderr
        shard.write_bytes(bytes(data[:-10]))  # then truncated: the size check alone finds it


def test_inspect_reads_the_manifest_without_beam(converted: tuple[Path, Counter[int]]) -> None:
    code = ("import sys; sys.modules['apache_beam'] = None; from headrace.cli import main; "
            "main(['inspect', sys.argv[1], '--verify'])")
    done = subprocess.run([sys.executable, "-c", code, str(converted[0])], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert _last_json(done.stdout)["records"] == 25 and "Beam" not in done.stderr


@pytest.mark.parametrize("args", [
    ["inspect", "/no/such/dir"],
    ["bench", "/no/such/dir"],
    ["train", "/no/such/dir"],
    ["train", "{shards}", "--model", "vgg16"],
    ["demo", "--model", "vgg16", "--images", "48"],
    ["inspect", "{empty}"],
    ["train", "{empty}"],
    ["bench", "{empty}"],
    ["train", "{shards}", "--precision", "fp8", "--epochs", "1"],
    ["demo", "--images", "5"],
    ["inspect", "{shards}", "--verify"],
    ["inspect", "{bad_manifest}"],
])
def test_user_errors_are_one_line_without_traceback(args: list[str], shards: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "part-0.tfrecord").write_bytes(b"")
    bad_manifest = tmp_path / "bad"
    bad_manifest.mkdir()
    (bad_manifest / "dataset.json").write_text("{not json")
    args = [a.format(shards=shards, empty=empty, bad_manifest=bad_manifest) for a in args]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("headrace: error: "), result.stderr
    assert "Traceback" not in result.output
