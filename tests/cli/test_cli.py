"""The ``headrace`` command: --help / -h everywhere, --version, smoke runs of inspect / bench / train / demo
on tiny data, ``inspect`` on ``headrace convert`` output (its manifest, ``--verify``), progress lines with
a total, resume messages, Ctrl-C and SIGTERM during training, and one-line errors: usage errors (exit status 2)
naming the flag, user errors (exit status 1) with Python parameter names turned into flags, internal
bugs keeping their traceback."""

from __future__ import annotations

import json
import re
import shutil
import signal
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
    from headrace.image.photos import iter_photo_jpegs
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
    assert _invoke(*command, "-h").output == result.output
    assert "<bool>" not in result.output  # flags show no type
    assert all(len(line) <= 80 for line in result.output.splitlines())
    if command == ["train"]:
        for option in ("--model", "--image-size SIZE", "--global-batch-size N", "--epochs", "--precision",
                       "--memory-budget SIZE", "--checkpoint-dir", "--checkpoint-every N", "--resume"):
            assert option in result.output


def test_version() -> None:
    import headrace

    result = _invoke("--version")
    assert result.exit_code == 0 and result.output.strip() == f"headrace {headrace.__version__}"


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
    # the tf.train.Example spec, as headrace convert's manifest says it: one value in every record is a scalar
    assert info["features"]["image/class/label"] == {"type": "FixedLenFeature", "dtype": "int64", "shape": [],
                                                     "in_records": "24/24"}
    assert "  image/class/label: FixedLenFeature int64 []\n" in result.output
    assert info["bytes"] == sum(p.stat().st_size for p in shards.glob("*.tfrecord"))
    assert "24 records" in result.output


def test_inspect_infers_fixed_and_variable_length_features(tmp_path: Path) -> None:
    from headrace.io.example import encode
    from headrace.io.tfrecord_writer import TFRecordWriter

    with TFRecordWriter(str(tmp_path / "rows.tfrecord")) as w:
        for i in range(6):
            w.write(encode({"xy": [float(i), 2.0], "tokens": list(range(i % 3 + 1)), "id": i,
                            **({"note": b"odd"} if i % 2 else {})}))
    result = _invoke("inspect", str(tmp_path / "rows.tfrecord"))
    assert result.exit_code == 0, result.output
    features = _last_json(result.output)["features"]
    assert features["xy"] == {"type": "FixedLenFeature", "dtype": "float32", "shape": [2], "in_records": "6/6"}
    assert features["id"]["shape"] == [] and features["id"]["type"] == "FixedLenFeature"
    assert features["tokens"] == {"type": "VarLenFeature", "dtype": "int64", "lengths": "1..3", "in_records": "6/6"}
    assert features["note"] == {"type": "VarLenFeature", "dtype": "string", "lengths": "1..1", "in_records": "3/6"}
    assert "  tokens: VarLenFeature int64 (1..3 values per record)\n" in result.output
    assert "  note: VarLenFeature string (1..1 values per record) (in 3/6 records)\n" in result.output


def test_inspect_takes_the_files_an_unquoted_glob_expands_to(shards: Path, tmp_path: Path) -> None:
    """``headrace inspect data/*.tfrecord`` without quotes: the shell passes every file; they are one dataset."""
    names = sorted(str(p) for p in shards.glob("*.tfrecord"))
    result = _invoke("inspect", *names)
    assert result.exit_code == 0, result.output
    info = _last_json(result.output)
    assert info["records"] == 24 and [s["path"] for s in info["shards"]] == names
    assert info["path"] == f"{names[0]} ... {names[-1]} (3 paths)"
    (tmp_path / "t.parquet").write_bytes(b"PAR1")
    mixed = runner.invoke(app, ["inspect", names[0], str(tmp_path / "t.parquet")])
    assert f"{names[0]} holds tfrecord and {tmp_path / 't.parquet'} holds parquet" in _one_line_error(mixed)
    # commands that take one path say to quote the pattern
    extra = runner.invoke(app, ["bench", *names])
    assert extra.exit_code == 2 and "unexpected extra argument" in extra.stderr, extra.stderr
    assert "a glob pattern must be quoted, e.g. 'data/*.tfrecord'" in extra.stderr


def test_inspect_parquet_hdf5_and_image_folder(tmp_path: Path) -> None:
    import h5py
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from headrace.image.photos import make_photo_jpegs

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
    result = _invoke("bench", str(shards), "--image-size", "32x32", "--batch-size", "8", "--seconds", "1",
                     "--memory-budget", "32MiB")
    assert result.exit_code == 0, result.output
    info = _last_json(result.output)
    assert info["pipeline"] == "decode+resize images" and info["image_size"] == 32
    assert info["seconds"] >= 1 and info["elements"] > 24  # --seconds honoured: the 24 records repeat
    assert info["elements_per_s"] > 0
    assert 0 < info["pipeline_peak_bytes"] <= 32 * 2**20
    batches = _last_json(_invoke("bench", str(shards), "--image-size", "32", "--batch-size", "8",
                                 "--max-batches", "5", "--memory-budget", "32MiB").output)
    assert batches["batches"] == 5 and batches["elements"] == 40
    first = result.output.splitlines()[0]  # images and batches are told apart, neither is "elements"
    assert " images in " in first and " batches of up to 8 " in first and " images/s, " in first, first
    assert " batches/s " in first and "elements" not in first and info["unit"] == "images"


def test_bench_explain_prints_the_plan_and_its_bottleneck(shards: Path) -> None:
    result = _invoke("bench", str(shards), "--image-size", "32", "--batch-size", "8", "--seconds", "1",
                     "--memory-budget", "32MiB", "--explain")
    assert result.exit_code == 0, result.output
    plan = _last_json(result.output)["plan"]
    stages = []
    node = plan["tree"]
    while node:
        stages.append(node["stage"])
        node = node["inputs"][0] if node["inputs"] else None
    assert stages[0].startswith("prefetch") and any(s.startswith("map(") for s in stages)
    assert plan["bottleneck"]["stage"] in [*stages, "consumer"] and plan["bottleneck"]["why"]
    assert f"bottleneck: {plan['bottleneck']['stage']}" in result.output  # the printed tree
    assert "executor:" in result.output
    assert re.search(r"^output: \d+ batches/s; ", result.output, re.M), result.output  # it hands out batches


def test_image_size_wxh_trains_and_benches_on_that_shape(shards: Path, tmp_path: Path) -> None:
    """--image-size WxH (width x height), as its help says, in every command that has the flag."""
    from headrace.train.data import image_classification_dataset

    image, _ = next(iter(image_classification_dataset(sorted(str(p) for p in shards.glob("*.tfrecord")),
                                                       (24, 40), training=False)))
    assert image.shape == (24, 40, 3)  # (height, width)
    bench = _invoke("bench", str(shards), "--image-size", "40x24", "--batch-size", "8", "--max-batches", "2",
                    "--memory-budget", "32MiB")
    assert bench.exit_code == 0, bench.output
    assert _last_json(bench.output)["image_size"] == "40x24"
    train = _invoke("train", str(shards), "--model", "small-cnn", "--image-size", "40x24", "--global-batch-size",
                    "8", "--epochs", "1", "--memory-budget", "128MiB")
    assert train.exit_code == 0, train.output
    assert _last_json(train.output)["steps"] == 3
    small = runner.invoke(app, ["train", str(shards), "--image-size", "40x24", "--global-batch-size", "64",
                                "--memory-budget", "1MiB"])  # the budget check counts 40 x 24 pixels
    assert "2 batches of 64 images of 40x24" in _one_line_error(small)


def test_train_then_resume(shards: Path, tmp_path: Path) -> None:
    args = ["train", str(shards), "--model", "small-cnn", "--image-size", "32", "--global-batch-size", "8",
            "--epochs", "2", "--memory-budget", "128MiB", "--checkpoint-dir", str(tmp_path / "ck")]
    first = _invoke(*args, "--resume")  # nothing to resume yet: it says so and starts from step 0
    assert first.exit_code == 0, first.output
    assert f"resume: no checkpoint in {tmp_path / 'ck'} yet; starting from step 0" in first.output
    info = _last_json(first.output)
    assert info["steps"] == 6 and info["num_classes"] == 12 and info["records"] == 24
    assert [h["epoch"] for h in info["history"]] == [1, 2]
    # without a terminal: plain progress lines with the total (known from the record count) and an ETA
    lines = first.output.splitlines()
    assert any(line.startswith("headrace.fit: step 1/6 (17%), epoch 1/2, loss ") for line in lines)
    assert not any(line.startswith("headrace.fit: step 2/6") for line in lines)  # 1, every 10th and the last
    assert any(line.startswith("headrace.fit: step 6/6 (100%), epoch 2/2") and "eta 0:00:00" in line
               for line in lines)
    assert "headrace.fit: epoch 1: train loss" in first.output and "headrace.fit: epoch 2: train loss" in first.output
    metrics = [json.loads(x) for x in (tmp_path / "ck" / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics if m["event"] == "epoch"] == [1, 2]  # the same numbers as on screen
    assert list((tmp_path / "ck").glob("ckpt-*.pt"))
    again = _invoke(*args, "--resume")
    assert "resumed from step 6 (at the start of epoch 3) of" in again.output
    info = _last_json(again.output)
    assert info["resumed_from"].endswith("ckpt-000000006.pt") and info["steps"] == 6  # nothing left to do
    longer = runner.invoke(app, [*args[:-4], "--epochs", "3", *args[-2:], "--resume"])
    assert "--resume: " in _one_line_error(longer) and "--epochs" in longer.stderr


def _restored_signals() -> None:
    """In a child before exec: SIGINT and SIGTERM back to their defaults (a shell's background job starts
    with SIGINT ignored, and Python then leaves it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _signal_when(args: list[str], marker: str, signum: int) -> tuple[subprocess.Popen, str, str]:
    """Start ``args``; send ``signum`` once a stdout line holds ``marker``; return the process and its output."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_restored_signals)
    try:
        seen = []
        for line in proc.stdout:  # type: ignore[union-attr]
            seen.append(line)
            if marker in line:
                proc.send_signal(signum)
                break
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    return proc, "".join(seen) + out, err


@pytest.mark.slow
def test_ctrl_c_or_sigterm_writes_a_checkpoint_and_resume_continues(shards: Path, tmp_path: Path) -> None:
    """SIGINT (Ctrl-C) to `headrace train` after its first step, then SIGTERM (a preemption) to the run that
    resumes from it: each time a checkpoint of the step reached, a message naming it, exit status 128 + the
    signal; each --resume says where it continues from. Passes from a background job too (SIGINT inherited
    ignored): the child gets default handlers. (One chain of three runs covers both signals.)"""
    ck = tmp_path / "ck"
    args = [sys.executable, "-m", "headrace.cli", "train", str(shards), "--model", "small-cnn", "--image-size", "16",
            "--global-batch-size", "2", "--micro-batch-size", "2", "--epochs", "100", "--checkpoint-dir", str(ck),
            "--checkpoint-every", "100000"]  # the only checkpoints are the ones the signals make
    latest: dict | None = None
    for signum, how in ((signal.SIGINT, "interrupted"), (signal.SIGTERM, "interrupted (SIGTERM)")):
        if latest is None:
            proc, out, err = _signal_when(args, "headrace.fit: step 1/1200", signum)
        else:  # resumed, then stopped after a step of its own
            proc, out, err = _signal_when([*args, "--resume"], f"headrace.fit: step {latest['step'] + 1}/1200",
                                          signum)
            assert f"resumed from step {latest['step']} (in epoch 1) of {ck / latest['path']}" in out
        assert proc.returncode == 128 + signum, err
        before, latest = latest, json.loads((ck / "latest.json").read_text())
        assert 1 <= latest["step"] < 1200 and (ck / latest["path"]).exists()
        assert before is None or latest["step"] > before["step"]
        assert f"{how}: checkpoint of step {latest['step']} (epoch 1) written to {ck / latest['path']}" in out
        assert err.strip().splitlines()[-1] == (f"headrace: {how} after step {latest['step']}; checkpoint "
                                                f"{ck / latest['path']}: run the same command with --resume to "
                                                "continue from it")
    proc, out, err = _signal_when([*args, "--resume"], "resumed from step", signal.SIGINT)
    assert f"resumed from step {latest['step']} (in epoch 1) of {ck / latest['path']}" in out
    assert proc.returncode == 128 + signal.SIGINT, err


def test_demo_tiny_configuration(tmp_path: Path) -> None:
    pytest.importorskip("apache_beam", reason="the demo converts its photos with headrace convert (Beam)")
    from headrace.image.photos import photo_classes
    from headrace.io.example import FixedLenFeature, parse_single_example
    from headrace.io.tfrecord import TFRecordDataset

    classes = photo_classes(1)  # the default task without --compress: which photograph, 12 classes
    result = _invoke("demo", "--images", "48", "--epochs", "1", "--image-size", "32", "--model", "small-cnn",
                     "--global-batch-size", "16", "--memory-budget", "192MiB", "--output", str(tmp_path))
    assert result.exit_code == 0, result.output
    info = _last_json(result.output)
    assert set(info) >= {"accuracy", "images_per_s", "peak_rss_bytes", "memory_budget_bytes"}
    assert info["memory_budget_bytes"] == 192 * 2**20 and len(info["accuracy_per_epoch"]) == 1
    assert info["classes"] == 12 and "(12 classes, chance 8.3%)" in result.output
    # the training set as the model reads it (44 uint8 images of 32x32x3), not the full-resolution photos
    assert info["decoded_training_set_bytes"] == 44 * 32 * 32 * 3
    assert "the decoded training set at 32x32 would take 132.0 KiB (uint8)" in result.output
    assert (tmp_path / "demo.png").stat().st_size > 1000
    # the shards are headrace convert's: 16 + 2 of them, each split with its manifest
    assert len(list((tmp_path / "data" / "train").glob("train-*-of-00016.tfrecord"))) == 16
    assert len(list((tmp_path / "data" / "eval").glob("eval-*-of-00002.tfrecord"))) == 2
    assert "converted them with headrace.convert" in result.output
    assert "headrace.fit: step 1/2 (50%), epoch 1/1, loss " in result.output  # the total: 44 images / 16
    spec = {k: FixedLenFeature([], t) for k, t in
            (("image/class/label", "int64"), ("image/class/text", "string"), ("image/filename", "string"))}
    seen: dict[str, list[int]] = {}
    for split in ("train", "eval"):
        manifest = json.loads((tmp_path / "data" / split / "dataset.json").read_text())
        assert manifest["source"]["class_names"] == list(classes) and len(classes) == 12
        for path in sorted((tmp_path / "data" / split).glob("*.tfrecord")):
            for record in TFRecordDataset(str(path)):
                ex = parse_single_example(record, spec)
                index, label = int(Path(ex["image/filename"].decode()).stem), int(ex["image/class/label"])
                # the generator made photo i of class i % 12: the label ids are photo_classes(1) indices
                assert label == index % 12 and ex["image/class/text"].decode() == classes[label]
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
    from headrace.image.photos import make_photo_jpegs

    root = tmp_path_factory.mktemp("converted")
    made = make_photo_jpegs(root / "photos", 25, size=(32, 24))
    convert.convert(root / "photos", root / "shards", num_shards=3,
                    beam_options=["direct_running_mode=in_memory", "direct_num_workers=1"])
    return root / "shards", Counter(label for _, label in made)


def test_inspect_reads_the_convert_manifest(converted: tuple[Path, Counter[int]]) -> None:
    from headrace.image.photos import PHOTO_CLASSES
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


def _error_paths(shards: Path, tmp_path: Path) -> dict[str, Path]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from headrace.image.photos import make_photo_jpegs

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "part-0.tfrecord").write_bytes(b"")
    bad_manifest = tmp_path / "bad"
    bad_manifest.mkdir()
    (bad_manifest / "dataset.json").write_text("{not json")
    table = tmp_path / "table"
    table.mkdir()
    pq.write_table(pa.table({"label": np.arange(3)}), table / "t.parquet")
    make_photo_jpegs(tmp_path / "photos", 2, size=(16, 16))
    return {"shards": shards, "empty": empty, "bad_manifest": bad_manifest, "table": table,
            "photos": tmp_path / "photos"}


# (arguments, what the one line must say): user errors, exit status 1
USER_ERRORS = [
    (["demo", "--regions", "3"], "--regions 3: the regions per photograph must be one of 1, 2, 4, 6, 9"),
    (["inspect", "/no/such/dir"], "/no/such/dir: no such file or directory"),
    (["bench", "/no/such/dir"], "/no/such/dir: no such file or directory"),
    (["train", "/no/such/dir"], "/no/such/dir: no such file or directory"),
    (["inspect", "{empty}"], "the dataset is empty"),
    (["train", "{empty}"], "the dataset is empty"),
    (["bench", "{empty}"], "the dataset is empty"),
    (["demo", "--images", "5"], "use --images 128 or more"),
    (["inspect", "{shards}", "--verify"], "dataset.json"),
    (["inspect", "{bad_manifest}"], "is not valid JSON"),
    (["train", "{shards}", "--num-classes", "3", "--model", "small-cnn"],
     "--num-classes 3 is too few: the labels in {shards} go up to 11; use --num-classes 12 or more"),
    (["train", "{shards}", "--memory-budget", "1KB"], "--memory-budget 1000 B is too small"),
    (["bench", "{shards}", "--memory-budget", "1KB"], "--memory-budget 1000 B is too small"),
    (["demo", "--memory-budget", "1MiB"], "--memory-budget 1.0 MiB is too small: the data pipeline's quarter"),
    (["train", "{table}"], "holds Parquet files; headrace train reads uncompressed TFRecord shards"),
    (["bench", "{photos}"], "holds an image folder; headrace bench reads uncompressed TFRecord shards of image "
                            "Examples (image/encoded, image/class/label): make uncompressed TFRecord shards of "
                            "them with `headrace convert {photos} photos-shards`"),
]

# usage errors, exit status 2: the flag is named
USAGE_ERRORS = [
    (["train", "{shards}", "--model", "vgg16"], "'--model': 'vgg16' is not one of 'resnet18', 'small-cnn'"),
    (["demo", "--model", "vgg16"], "'--model'"),
    (["demo", "--text", "--images", "100"], "--images: an option of the image demo, not of --text (the text demo "
                                            "takes --windows)"),
    (["demo", "--windows", "500"], "--windows: an option of the text demo; add --text"),
    (["demo", "--text", "--windows", "10"], "'--windows'"),
    # the other model's options are refused, never silently ignored
    (["train", "{shards}", "--text", "--model", "small-cnn"], "--model: an option of the image models, not of "
                                                              "--text"),
    (["train", "{shards}", "--text", "--image-size", "64", "--on-corrupt", "skip"],
     "--image-size, --on-corrupt: an option of the image models"),
    (["train", "{shards}", "--sequence-length", "64"], "--sequence-length: an option of --text training; add --text"),
    (["train", "{shards}", "--precision", "fp8"], "'--precision'"),
    (["train", "{shards}", "--global-batch-size", "0"], "'--global-batch-size'"),
    (["train", "{shards}", "--global-batch-size", "-1"], "'--global-batch-size'"),
    (["train", "{shards}", "--epochs", "0"], "'--epochs'"),
    (["train", "{shards}", "--memory-budget", "-1"], "'--memory-budget': '-1' is not a size"),
    (["train", "{shards}", "--memory-budget", "100TB"], "100TB is more than this machine's memory"),
    (["demo", "--memory-budget", "100TB"], "100TB is more than this machine's memory"),
    (["bench", "{shards}", "--seconds", "-1"], "'--seconds': '-1': use a number > 0"),
    (["train", "{shards}", "--image-size", "96x"],
     "'--image-size': '96x': use N (N x N pixels) or WxH (width x height)"),
    (["bench", "{shards}", "--image-size", "wide"], "'--image-size': 'wide': use N (N x N pixels) or WxH"),
    (["demo", "--image-size", "0x64"], "'--image-size': '0x64': use N"),
    # as written (WxH), not as the (height, width) it becomes: it said "(10, 100) must be ... (height, width)"
    (["demo", "--image-size", "100x10"], "'--image-size': '100x10': at least 16 pixels a side; use N (N x N "
                                         "pixels) or WxH (width x height)"),
    (["compress", "{shards}", "{shards}", "--image-size", "4x96"], "'--image-size': '4x96': at least 8 pixels a side"),
    (["train", "{shards}", "--resume"], "--resume: needs --checkpoint-dir"),
    (["train", "{shards}", "--micro-batch-size", "0"], "'--micro-batch-size'"),
    (["train", "{shards}", "--nope"], "No such option: --nope"),
    (["inspect"], "Missing argument 'PATH'"),
]


@pytest.mark.parametrize(("args", "says", "status"), [(*e, 1) for e in USER_ERRORS] + [(*e, 2) for e in USAGE_ERRORS])
def test_errors_are_one_line_without_traceback(args: list[str], says: str, status: int, shards: Path,
                                               tmp_path: Path) -> None:
    paths = _error_paths(shards, tmp_path)
    args = [a.format(**paths) for a in args]
    result = runner.invoke(app, args)
    assert result.exit_code == status, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("headrace: error: "), result.stderr
    assert says.format(**paths) in lines[0]
    assert "Traceback" not in result.output and "_size=" not in lines[0]  # flags, not Python parameters


def test_an_internal_bug_keeps_its_traceback(shards: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only headrace's errors, OSError and ValueError are user errors; a KeyError from our code is a bug."""
    import headrace.cli.inspect_cmd as inspect_command

    def broken(*args, **kwargs):
        return {}["records"]

    monkeypatch.setattr(inspect_command, "inspect_path", broken)
    result = runner.invoke(app, ["inspect", str(shards)])
    assert result.exit_code == 1 and isinstance(result.exception, KeyError)
    done = subprocess.run([sys.executable, "-c", "import sys, headrace.cli.inspect_cmd as m; "
                           "m.inspect_path = lambda *a, **k: 1 / 0; from headrace.cli import main; main(sys.argv[1:])",
                           "inspect", str(shards)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" in done.stderr and "ZeroDivisionError" in done.stderr


def test_python_parameter_names_become_flags() -> None:
    from headrace.cli._app import translate

    flags = {"global_batch_size": "--global-batch-size", "memory_budget": "--memory-budget",
             "overwrite": "--overwrite", "source_format": "--from", "epochs": "--epochs", "model": "--model"}
    assert translate("global_batch_size=0 must be an int >= 1", flags) == "--global-batch-size 0 must be an int >= 1"
    assert translate("raise Options(memory_budget=...) or make", flags) == "raise --memory-budget or make"
    assert translate("raise memory_budget, use a smaller model", flags) == "raise --memory-budget, use a smaller model"
    assert translate("pass --overwrite (overwrite=True) to replace", flags) == "pass --overwrite to replace"
    assert translate("pass source_format= (--from) one of", flags) == "pass --from one of"
    assert translate("epochs=0 must be >= 1; more epochs help", flags) == "--epochs 0 must be >= 1; more epochs help"
    assert translate("unknown model 'x'", flags) == "unknown model 'x'"  # a bare word stays a word
    assert translate("read past it with on_corrupt='skip' or", {"on_corrupt": "--on-corrupt"}) == \
        "read past it with --on-corrupt skip or"  # a flag's value as typed, not a Python string


def test_bad_paths_are_refused_before_torch_is_imported(tmp_path: Path) -> None:
    code = ("import sys\nfrom headrace.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    print(e.code, 'torch' in sys.modules)")
    for command in ("train", "bench"):
        done = subprocess.run([sys.executable, "-c", code, command, str(tmp_path / "missing")], capture_output=True,
                              text=True, timeout=60)
        assert done.stdout.split() == ["1", "False"], (done.stdout, done.stderr)
        assert done.stderr.strip() == f"headrace: error: {tmp_path / 'missing'}: no such file or directory"


def test_warnings_are_one_line_naming_the_flag(shards: Path) -> None:
    result = runner.invoke(app, ["bench", str(shards), "--image-size", "32", "--batch-size", "8",
                                 "--memory-budget", "256KB", "--max-batches", "6"])
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("headrace: warning: ")]
    assert warned and len(warned) == len(result.stderr.strip().splitlines())  # nothing but one-line warnings
    # the flag and its value as the user wrote them, not a number headrace derived from it
    assert any("shuffle(1024)" in line and "within --memory-budget 256KB (250.0 KiB)" in line for line in warned), \
        warned
    assert len(warned) == len(set(warned))  # each once, however many epochs repeat it


def test_model_choices_are_the_trainer_s() -> None:
    """--model's choices live in the CLI (no torch to check them) and must be headrace.train's models."""
    from headrace.cli._flags import MODEL_NAMES
    from headrace.train.models import MODEL_NAMES as trainable

    assert trainable == MODEL_NAMES


def test_resume_with_another_model_is_one_line(shards: Path, tmp_path: Path) -> None:
    """--resume with a --model other than the checkpoint's: one line naming both models and the fix, no
    traceback (issue #21 item 6)."""
    args = ["train", str(shards), "--image-size", "16", "--global-batch-size", "8", "--epochs", "1",
            "--checkpoint-dir", str(tmp_path / "ck")]
    assert _invoke(*args, "--model", "small-cnn").exit_code == 0
    result = runner.invoke(app, [*args, "--model", "resnet18", "--resume"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1
    line = result.stderr.strip()
    assert line.startswith("headrace: error: --resume: ") and "ckpt-000000003.pt" in line
    assert "small-cnn model with 12 classes" in line and "--model resnet18 with 12 classes" in line
    assert "resume with --model small-cnn" in line and "another --checkpoint-dir" in line
    fewer = runner.invoke(app, [*args, "--model", "small-cnn", "--num-classes", "20", "--resume"])
    assert "small-cnn model with 12 classes" in _one_line_error(fewer)
    assert "--model small-cnn with 20 classes" in fewer.stderr and "--num-classes 12" in fewer.stderr


@pytest.fixture(scope="module")
def corrupt_shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, int]:
    """24 JPEG Examples in 2 shards, one of them cut to 40 bytes: (directory, its shard, its byte offset)."""
    from headrace.image.photos import iter_photo_jpegs
    from headrace.io.example import encode
    from headrace.io.sharded_writer import ShardedWriter
    from headrace.io.tfrecord import TFRecordDataset

    out = tmp_path_factory.mktemp("corrupt")
    with ShardedWriter(out, "train", num_shards=2) as w:
        for i, (jpeg, label) in enumerate(iter_photo_jpegs(24, (32, 24))):
            w.write(encode({"image/encoded": jpeg[:40] if i == 13 else jpeg, "image/class/label": label}))
    for shard in sorted(out.glob("*.tfrecord")):
        offset = 0
        for record in TFRecordDataset(str(shard)):
            if len(record) < 200:
                return out, str(shard), offset
            offset += len(record) + 16  # TFRecord framing: length, its CRC, data, data CRC
    raise AssertionError("no cut record")


def test_train_skips_corrupt_records_when_asked(corrupt_shards: tuple[Path, str, int], tmp_path: Path) -> None:
    """--on-corrupt skip: the undecodable record is skipped, named (shard, byte offset), counted in the
    summary and in metrics.jsonl (issue #21 item 7)."""
    data, shard, offset = corrupt_shards
    ck = tmp_path / "ck"
    result = runner.invoke(app, ["train", str(data), "--model", "small-cnn", "--image-size", "16",
                                 "--global-batch-size", "4", "--micro-batch-size", "4", "--checkpoint-dir", str(ck),
                                 "--on-corrupt", "skip"])
    assert result.exit_code == 0, result.output
    assert f"headrace: warning: skipped: {shard}: record " in result.stderr
    assert f"at byte offset {offset}: cannot decode its image" in result.stderr
    info = _last_json(result.stdout)
    assert info["skipped_records"] == 1 and info["steps"] == 5  # 23 good records // 4
    assert f"skipped 1 corrupt record(s); the first: {shard} at byte offset {offset}" in result.stdout
    metrics = [json.loads(x) for x in (ck / "metrics.jsonl").read_text().splitlines()]
    skipped = [m for m in metrics if m["event"] == "skipped_records"]
    assert skipped == [{"event": "skipped_records", "count": 1,
                        "records": [{"path": shard, "offset": offset, "reason": "image_decode"}]}]


def test_train_stops_on_a_corrupt_record_after_a_checkpoint(corrupt_shards: tuple[Path, str, int],
                                                             tmp_path: Path) -> None:
    """Without --on-corrupt skip: one line naming the shard, the byte offset and the CLI's fix, after a
    checkpoint of the step reached, which --resume --on-corrupt skip continues from."""
    data, shard, offset = corrupt_shards
    ck = tmp_path / "ck"
    args = ["train", str(data), "--model", "small-cnn", "--image-size", "16", "--global-batch-size", "2",
            "--micro-batch-size", "2", "--checkpoint-dir", str(ck), "--checkpoint-every", "1000"]
    result = runner.invoke(app, args)
    line = _one_line_error(result)
    assert line.startswith(f"headrace: error: {shard}: record ") and f"at byte offset {offset}:" in line
    assert "--on-corrupt skip" in line and "ignore_errors" not in line
    latest = json.loads((ck / "latest.json").read_text())
    assert latest["step"] >= 1 and f"checkpoint of step {latest['step']} (epoch 1) written to " \
        f"{ck / latest['path']}" in line
    again = runner.invoke(app, [*args, "--resume", "--on-corrupt", "skip"])
    assert again.exit_code == 0, again.output
    assert f"resumed from step {latest['step']} (in epoch 1)" in again.stdout
    assert _last_json(again.stdout)["skipped_records"] == 1


def test_bench_names_or_skips_a_corrupt_record(corrupt_shards: tuple[Path, str, int]) -> None:
    data, shard, offset = corrupt_shards
    args = ["bench", str(data), "--image-size", "16", "--batch-size", "4", "--max-batches", "12"]
    stopped = runner.invoke(app, args)
    assert f"{shard}: record " in _one_line_error(stopped) and f"at byte offset {offset}" in stopped.stderr
    assert "--on-corrupt skip" in stopped.stderr and "ignore_errors" not in stopped.stderr
    skipped = runner.invoke(app, [*args, "--on-corrupt", "skip"])
    assert skipped.exit_code == 0, skipped.output
    assert _last_json(skipped.stdout)["skipped_records"] == 1  # once, however often the data repeats


def _one_line_error(result) -> str:
    """The one stderr line of a failed command (no traceback, nothing else); returns it."""
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("headrace: error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.fixture(scope="module")
def few_hundred(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """264 records (the demo's eval shard's size) of 32x24 JPEGs in 2 shards: 4 steps of the default global
    batch of 64."""
    from headrace.image.photos import iter_photo_jpegs
    from headrace.io.example import encode
    from headrace.io.sharded_writer import ShardedWriter

    out = tmp_path_factory.mktemp("few-hundred")
    with ShardedWriter(out, "eval", num_shards=2) as w:
        for jpeg, label in iter_photo_jpegs(264, (32, 24)):
            w.write(encode({"image/encoded": jpeg, "image/class/label": label}))
    return out


def test_train_on_a_shard_of_a_few_hundred_records_trains(few_hundred: Path) -> None:
    """264 records at the default global batch (64) are 4 steps: the one-cycle schedule's rise ended at step 0
    and its first step raised ZeroDivisionError (a 63-line traceback)."""
    result = _invoke("train", str(few_hundred), "--model", "small-cnn", "--epochs", "1", "--image-size", "16")
    assert result.exit_code == 0, result.output
    info = _last_json(result.stdout)
    assert info["records"] == 264 and info["steps"] == 4 and info["history"][0]["steps"] == 4


@pytest.fixture(scope="module")
def damaged_framing(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str, int]]:
    """24 JPEG Examples in 2 shards, twice: the first shard cut inside its last record ("truncated"), or one
    byte of its record 1's data flipped ("data_crc"): ``{reason: (directory, that shard, the record's byte
    offset)}``."""
    from headrace.image.photos import iter_photo_jpegs
    from headrace.io.example import encode
    from headrace.io.sharded_writer import ShardedWriter
    from headrace.io.tfrecord import TFRecordDataset

    out = {}
    for reason in ("truncated", "data_crc"):
        base = tmp_path_factory.mktemp(reason)
        with ShardedWriter(base, "train", num_shards=2) as w:
            for jpeg, label in iter_photo_jpegs(24, (32, 24)):
                w.write(encode({"image/encoded": jpeg, "image/class/label": label}))
        shard = sorted(base.glob("*.tfrecord"))[0]
        sizes = [len(r) + 16 for r in TFRecordDataset(str(shard))]  # framing: length, its CRC, data, data CRC
        data = bytearray(shard.read_bytes())
        if reason == "truncated":
            offset = sum(sizes[:-1])
            del data[offset + 20:]
        else:
            offset = sizes[0]
            data[offset + 12 + 5] ^= 0xFF  # a byte of record 1's data
        shard.write_bytes(bytes(data))
        out[reason] = (base, str(shard), offset)
    return out


@pytest.mark.parametrize("reason", ["truncated", "data_crc"])
def test_train_skips_truncated_and_crc_corrupt_records_when_asked(damaged_framing, reason: str) -> None:
    """--on-corrupt skip over a damaged TFRecord finishes and reports the skip, as bench does (the label pass
    before training read with on_corrupt='raise' and stopped, advising --on-corrupt 'skip'); without it, one
    line names the shard, the offset and the flag, and a data-CRC failure does not say that reading goes on."""
    data, shard, offset = damaged_framing[reason]
    args = ["train", str(data), "--model", "small-cnn", "--image-size", "16", "--global-batch-size", "8",
            "--micro-batch-size", "8"]
    skipped = _invoke(*args, "--on-corrupt", "skip")
    assert skipped.exit_code == 0, skipped.output
    info = _last_json(skipped.stdout)
    assert info["skipped_records"] == 1 and info["records"] == 23 and info["steps"] == 2, info
    assert f"skipped 1 corrupt record(s); the first: {shard} at byte offset {offset} ({reason})" in skipped.stdout
    line = _one_line_error(runner.invoke(app, args))
    assert f"{shard} at byte {offset}" in line and "--on-corrupt skip" in line and "'skip'" not in line
    assert "continues" not in line
    assert ("the records after it can still be read" if reason == "data_crc" else
            "the rest of this file cannot be read") in line


_RUN_CASES = r"""
import json, os, sys, tempfile
from headrace.cli import main
out = []
for args in json.loads(sys.stdin.read()):
    with tempfile.TemporaryFile("w+") as err:  # the process's real stderr (fd 2): C-level and thread output too
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        out.append([code, err.read()])
print(json.dumps(out))
"""


def test_every_error_case_is_one_line_on_the_process_stderr(shards: Path, tmp_path: Path, damaged_framing) -> None:
    """The error cases of this file (the tables above, damaged TFRecord framing, a damaged HDF5 object
    header) run through ``main`` in a process of their own: what reaches the process's stderr (fd 2, not
    click's captured stream: a thread's or a library's output too) is one ``headrace: error:`` line, never a
    traceback."""
    import h5py
    import numpy as np

    paths = _error_paths(shards, tmp_path)
    cases = [[a.format(**paths) for a in args] for args, _ in USER_ERRORS + USAGE_ERRORS]
    cases += [["train", str(damaged_framing[r][0]), "--image-size", "16"] for r in ("truncated", "data_crc")]
    cases += [["bench", str(damaged_framing["data_crc"][0]), "--image-size", "16", "--max-batches", "2"]]
    h5 = tmp_path / "damaged.h5"  # a flipped byte in an object header: h5py's bare RuntimeError before
    with h5py.File(h5, "w") as f:
        f.create_dataset("x", data=np.arange(12).reshape(6, 2))
    with h5py.File(h5, "r") as f:
        addr = h5py.h5o.get_info(f["x"].id).addr
    h5.write_bytes(h5.read_bytes()[:addr] + b"\xff" + h5.read_bytes()[addr + 1:])
    cases += [["inspect", str(h5)]]
    done = subprocess.run([sys.executable, "-c", _RUN_CASES], input=json.dumps(cases), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == len(cases)
    wrong = [(args, code, err) for args, (code, err) in zip(cases, results)
             if code not in (1, 2) or len(err.strip().splitlines()) != 1 or not err.startswith("headrace: error: ")]
    assert not wrong, wrong
