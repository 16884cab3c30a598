"""``headrace compress``: a run on tiny shards writes report.json (the documented keys, four variants), the
PNG and the models; every bad input gives one ``headrace: error:`` line naming the value / layer / flag,
exit status 1, and nothing written under the output's final names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from headrace.cli import app

runner = CliRunner()
IMAGE = 24
KEYS = {"name", "size_bytes", "parameters", "macs", "accuracy", "latency_ms_batch1", "latency_ms_batch32",
        "threads"}


def _shards(out: Path, prefix: str, n: int, seed: int) -> Path:
    from headrace.image.photos import iter_photo_jpegs
    from headrace.io.example import encode
    from headrace.io.sharded_writer import ShardedWriter

    with ShardedWriter(out, prefix, num_shards=2) as w:
        for jpeg, label in iter_photo_jpegs(n, (48, 36), seed=seed):
            w.write(encode({"image/encoded": jpeg, "image/class/label": label % 3}))
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compress_cli")
    from headrace.io.example import encode
    from headrace.io.tfrecord_writer import TFRecordWriter

    (root / "empty").mkdir()
    with TFRecordWriter(str(root / "empty" / "eval.tfrecord")):
        pass
    (root / "tabular").mkdir()
    with TFRecordWriter(str(root / "tabular" / "rows.tfrecord")) as w:
        for i in range(8):
            w.write(encode({"x": [float(i)], "image/class/label": i % 3}))
    torch.manual_seed(0)
    from headrace.train import build_model

    torch.save(build_model("small-cnn", 3).state_dict(), root / "small.pt")
    return {"root": root, "train": _shards(root / "train", "train", 32, 0),
            "eval": _shards(root / "eval", "eval", 16, 1), "ckpt": root / "small.pt"}


def _invoke(*args: str):
    return runner.invoke(app, ["compress", *args], catch_exceptions=False)


def _no_output(out: Path) -> None:
    assert not (out / "report.json").exists()
    assert not [p for p in out.glob("*")] if out.exists() else True  # nothing published, no staging left


@pytest.mark.slow
def test_compress_writes_the_report_table_plot_and_models(data: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _invoke(str(data["ckpt"]), str(data["eval"]), "--model", "small-cnn", "--image-size", str(IMAGE),
                     "--train-data", str(data["train"]), "--prune-macs", "0.5", "--finetune-epochs", "1",
                     "--distill-student", "small-cnn", "--distill-epochs", "1", "--global-batch-size", "8",
                     "--batch-size", "8", "--num-calibration-batches", "2", "--repeats", "3", "--threads", "1",
                     "--output", str(out))
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert [v["name"] for v in report["variants"]] == ["fp32-torch", "fp32-onnxruntime", "int8", "pruned", "distilled"]
    for v in report["variants"]:
        assert set(v) >= KEYS and v["threads"] == 1 and 0.0 <= v["accuracy"] <= 1.0 and v["size_bytes"] > 0
        assert isinstance(v["size_bytes"], int) and isinstance(v["macs"], int) and v["latency_ms_batch32"] > 0
    fp32, fp32_ort, int8, pruned, _ = report["variants"]
    assert int8["size_bytes"] < fp32["size_bytes"] and pruned["macs"] <= 0.5 * fp32["macs"]
    assert report["speedup_baseline"] in ("fp32-torch", "fp32-onnxruntime") and report["machine"]["int8_isa"]
    fastest = min(fp32["latency_ms_batch32"], fp32_ort["latency_ms_batch32"])
    assert int8["speedup_batch32"] == pytest.approx(fastest / int8["latency_ms_batch32"], rel=1e-2)
    for v in report["variants"]:
        low, high = v["accuracy_ci95"]
        assert low <= v["accuracy"] <= high and v["examples"] == 16
    assert int8["parameters"] == fp32["parameters"] and report["eval_examples"] == 16
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.iterdir()) == ["distilled.pt2", "int8.onnx", "pruned.pt2", "report.json",
                                                     "report.png"]
    lines = result.output.strip().splitlines()
    assert any(line.startswith("variant") and "speed-up @32" in line for line in lines)  # the table
    assert any(line.startswith("CPU: ") and "int8 kernels: " in line for line in lines)
    assert json.loads(lines[-1])["variants"][0]["name"] == "fp32-torch"


def _error(result, *needles: str) -> None:  # type: ignore[no-untyped-def]
    assert result.exit_code == 1, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("headrace: error: ") and "Traceback" not in result.output
    for needle in needles:
        assert needle in line, line


@pytest.mark.parametrize("amount", ["1.5", "-0.2", "1", "half"])
def test_prune_amount_outside_0_1_is_a_usage_error(data: dict[str, Path], tmp_path: Path, amount: str) -> None:
    """A bad flag value is a usage error (exit status 2, as docs/how-to/cli.md says), before any work."""
    result = runner.invoke(app, ["compress", str(data["ckpt"]), str(data["eval"]), "--model", "small-cnn",
                                 "--prune", amount, "--output", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert line.startswith("headrace: error: ") and "'--prune'" in line and repr(amount) in line, line
    assert "(0, 1)" in line and "Traceback" not in result.output
    _no_output(tmp_path / "o")


@pytest.mark.parametrize(("flag", "value"), [("--quantize", "int4"), ("--backend", "tflite"),
                                             ("--prune-method", "random"), ("--finetune-epochs", "-1"),
                                             ("--batch-size", "0"), ("--repeats", "0"), ("--prune-macs", "1.5"),
                                             ("--prune-steps", "0"), ("--prune-importance", "taylor"),
                                             ("--patience", "0")])
def test_other_bad_flag_values_are_usage_errors(data: dict[str, Path], tmp_path: Path, flag: str,
                                                value: str) -> None:
    result = runner.invoke(app, ["compress", str(data["ckpt"]), str(data["eval"]), flag, value])
    assert result.exit_code == 2, result.output
    assert f"'{flag}'" in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_missing_checkpoint_is_named_before_the_other_flags(data: dict[str, Path], tmp_path: Path) -> None:
    """The defaults prune and distill, which need --train-data: a missing CHECKPOINT is still what is said."""
    _error(_invoke(str(tmp_path / "missing.pt"), str(data["eval"]), "--output", str(tmp_path / "o")),
           f"{tmp_path / 'missing.pt'}: no such checkpoint file or directory")
    _no_output(tmp_path / "o")


def test_empty_eval_set(data: dict[str, Path], tmp_path: Path) -> None:
    _error(_invoke(str(data["ckpt"]), str(data["root"] / "empty"), "--model", "small-cnn", "--prune", "0",
                   "--distill-student", "none", "--output", str(tmp_path / "o")), "EVAL_DATA", "empty")
    _no_output(tmp_path / "o")


def test_calibration_data_that_does_not_match_the_model(data: dict[str, Path], tmp_path: Path) -> None:
    _error(_invoke(str(data["ckpt"]), str(data["eval"]), "--model", "small-cnn", "--image-size", str(IMAGE),
                   "--calibration-data", str(data["root"] / "tabular"), "--prune", "0", "--distill-student", "none",
                   "--repeats", "2", "--output", str(tmp_path / "o")), "image/encoded")
    _no_output(tmp_path / "o")


def _custom(data: dict[str, Path], tmp_path: Path, factory: str, *extra: str):  # type: ignore[no-untyped-def]
    import cli_models

    ckpt = tmp_path / f"{factory}.pt"
    torch.manual_seed(0)
    torch.save(getattr(cli_models, factory)(3).state_dict(), ckpt)
    return _invoke(str(ckpt), str(data["eval"]), "--model", f"cli_models:{factory}", "--num-classes", "3",
                   "--image-size", str(IMAGE), "--prune", "0", "--distill-student", "none", "--repeats", "2",
                   "--output", str(tmp_path / "o"), *extra)


@pytest.fixture
def models_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


@pytest.mark.usefixtures("models_on_path")
def test_a_model_that_fails_to_export(data: dict[str, Path], tmp_path: Path) -> None:
    _error(_custom(data, tmp_path, "numpy_net"), "export", "layer 2 (_NumpyLayer)")
    _no_output(tmp_path / "o")


@pytest.mark.usefixtures("models_on_path")
def test_layers_the_backend_cannot_quantize(data: dict[str, Path], tmp_path: Path) -> None:
    _error(_custom(data, tmp_path, "reused_relu_net", "--backend", "torchao"), "layer act (ReLU)", "onnxruntime")
    _no_output(tmp_path / "o")
    _error(_custom(data, tmp_path, "conv_only_net", "--quantize", "dynamic"), "Conv2d x1", "method='static'")
    _no_output(tmp_path / "o")


def test_a_checkpoint_of_another_model(data: dict[str, Path], tmp_path: Path) -> None:
    _error(_invoke(str(data["ckpt"]), str(data["eval"]), "--model", "resnet18", "--prune", "0", "--distill-student",
                   "none", "--output", str(tmp_path / "o")), "does not fit --model resnet18")
    _error(_invoke(str(tmp_path / "missing.pt"), str(data["eval"]), "--prune", "0", "--distill-student", "none",
                   "--output", str(tmp_path / "o")), "missing.pt")


def test_training_variants_need_train_data(data: dict[str, Path], tmp_path: Path) -> None:
    _error(_invoke(str(data["ckpt"]), str(data["eval"]), "--model", "small-cnn", "--output", str(tmp_path / "o")),
           "--train-data")


def test_one_shot_and_macs_target_pruning_are_exclusive(data: dict[str, Path], tmp_path: Path) -> None:
    _error(_invoke(str(data["ckpt"]), str(data["eval"]), "--model", "small-cnn", "--prune", "0.3", "--prune-macs",
                   "0.5", "--distill-student", "none", "--finetune-epochs", "0", "--output", str(tmp_path / "o")),
           "--prune 0.3", "--prune-macs 0.5", "choose one")
    _no_output(tmp_path / "o")


@pytest.mark.parametrize(("flag", "value", "needle"), [("--student-params", "0", "--student-params 0.0 must be > 0"),
                                                       ("--hold-out", "0.95", "'--hold-out'")])
def test_bad_student_size_or_hold_out(data: dict[str, Path], tmp_path: Path, flag: str, value: str,
                                      needle: str) -> None:
    result = runner.invoke(app, ["compress", str(data["ckpt"]), str(data["eval"]), "--model", "small-cnn",
                                 "--train-data", str(data["train"]), flag, value, "--output", str(tmp_path / "o")])
    assert result.exit_code in (1, 2), result.output
    assert needle in (result.stderr or result.output), result.output
    _no_output(tmp_path / "o")


@pytest.mark.parametrize(("args", "images", "epochs", "batch", "quick", "printed"), [
    ([], 2000, 3, 32, True, "--images 2000 (300 held out for evaluation), --epochs 3, --global-batch-size 32, "
                            "pruning in 1 round(s)"),
    (["--epochs", "5", "--global-batch-size", "48"], 2000, 5, 48, True,
     "--images 2000 (300 held out for evaluation), pruning in 1 round(s)"),
    (["--images", "3000", "--epochs", "3"], 3000, 3, 64, False, None),
    (["--images", "3000"], 3000, 3, 64, False, None),
])
def test_demo_compress_defaults_and_explicit_flags_win(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                       args: list[str], images: int, epochs: int, batch: int,
                                                       quick: bool, printed: str | None) -> None:
    """``headrace demo --compress`` without --images runs the quick profile (2,000 images, 300 held out, a
    smaller compression budget) and says so; every flag given wins over it, and --images keeps the full
    budget (the acceptance command's)."""
    import headrace.demo as demo

    seen = {}
    monkeypatch.setattr(demo, "run_demo", lambda cfg: seen.setdefault("cfg", cfg) and {})
    result = runner.invoke(app, ["demo", "--compress", *args, "--output", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    cfg = seen["cfg"]
    assert (cfg.images, cfg.epochs, cfg.global_batch_size, cfg.compress, cfg.quick_compress) == (
        images, epochs, batch, True, quick)
    assert int(cfg.images * cfg.eval_fraction) >= 300
    if printed is None:
        assert "defaults for --compress" not in result.output
    else:
        assert printed in result.output
    plain = runner.invoke(app, ["demo", "--output", str(tmp_path)], catch_exceptions=False)
    assert plain.exit_code == 0 and (seen["cfg"].images, seen["cfg"].epochs) == (images, epochs)  # first kept
    assert "defaults for --compress" not in plain.output


def test_quick_compress_budget_reaches_the_compression_options(data: dict[str, Path], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    import headrace.compress.run as run
    from headrace.compress.demo import compress_demo
    from headrace.demo import QUICK_COMPRESS_OPTIONS

    seen = {}

    def fake(model: object, *, options: object, **kwargs: object) -> None:
        seen["options"] = options
        raise RuntimeError("stop")

    monkeypatch.setattr(run, "compress_model", fake)
    for split in ("train", "eval"):
        shutil.copytree(data[split], tmp_path / "data" / split)
    with pytest.raises(RuntimeError, match="stop"):
        compress_demo(torch.nn.Linear(2, 2), tmp_path, image_size=16, memory_budget=None, global_batch_size=8,
                      num_classes=2, overrides=QUICK_COMPRESS_OPTIONS)
    o = seen["options"]
    assert (o.prune_steps, o.finetune_epochs, o.distill_epochs) == (1, 1, 24)
    assert o.global_batch_size == 8
