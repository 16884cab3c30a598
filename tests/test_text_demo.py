"""headrace.text_demo (``headrace demo --text``): a tiny run end to end, its JSON line and checks; bad options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headrace.io import TextLineDataset
from headrace.text_demo import PACKAGES, TextDemoConfig, package_windows, run_text_demo


@pytest.mark.slow  # Beam conversion / ONNX export and a few epochs: tens of seconds on 2 loaded cores
def test_a_tiny_text_demo_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("apache_beam", reason="the demo converts its text with headrace convert (Beam)")
    pytest.importorskip("tokenizers")
    cfg = TextDemoConfig(windows_per_class=200, epochs=2,
                         d_model=32, num_layers=1, global_batch_size=8, num_shards=2, output=str(tmp_path),
                         progress=False, memory_budget="192MiB")
    record = run_text_demo(cfg)
    out = capsys.readouterr().out
    assert json.loads(out.strip().splitlines()[-1]) == record  # the last line is the JSON record
    assert record["classes"] == len(PACKAGES) == 8 and record["windows"] == 1600
    assert record["chance"] == pytest.approx(1 / 8)  # 20 held-out windows of each package
    assert len(record["accuracy_per_epoch"]) == 2 == len(record["tokens_per_s_per_epoch"])
    assert record["accuracy"] > record["chance"]  # it learns something in two tiny epochs
    assert record["packing_efficiency"] >= 0.95 and record["efficiency_ok"]
    limit = record["base_rss_bytes"] + record["memory_budget_bytes"] * 1.1 + 64 * 2**20
    assert record["rss_limit_bytes"] == int(limit) and record["peak_rss_bytes"] <= limit and record["within_budget"]
    assert record["tokens_per_s"] > 0 and record["micro_batch_size"] * record["accumulation_steps"] == 8
    assert "epoch 2: held-out accuracy" in out and "(chance 12.5%)" in out and "packing efficiency" in out
    assert Path(record["plot"]).stat().st_size > 1000 and (tmp_path / "tokenizer.json").is_file()
    # the shards are headrace convert's (GZIP text lines, with manifests); the tokenizer saw the training split only
    shards = sorted((tmp_path / "data" / "train").glob("train-*-of-00002.txt.gz"))
    assert len(shards) == 2 and sorted(p.name for p in (tmp_path / "data" / "train").iterdir()) == [
        "dataset.json", *(p.name for p in shards)]
    manifest = json.loads((tmp_path / "data" / "eval" / "dataset.json").read_text())
    assert manifest["records"] == 160  # one block of 20 in every 200 windows of each package
    assert manifest["output"]["format"] == "text" and manifest["output"]["compression"] == "GZIP"
    lines = list(TextLineDataset(sorted((tmp_path / "data" / "eval").glob("eval-*.txt.gz")), compression_type="GZIP"))
    assert len(lines) == 160 and all(line.split(b"\t", 1)[0].isdigit() for line in lines)


def test_windows_come_from_the_package_and_a_missing_package_is_named() -> None:
    windows = package_windows("json", 2, 5)
    assert len(windows) == 5 and all(w.count(" \u2424 ") == 1 and "\t" not in w for w in windows)
    with pytest.raises(FileNotFoundError, match="'no_such_package' is not installed here"):
        package_windows("no_such_package", 2, 5)


@pytest.mark.parametrize(("field", "value", "match"), [
    ("windows_per_class", 10, "windows_per_class=10 is too few: at least 100"),
    ("sequence_length", 0, "sequence_length=0 must be an int >= 1"),
    ("memory_budget", "lots", "memory_budget='lots' is not a size"),
])
def test_bad_settings_are_named(field: str, value: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TextDemoConfig(**{field: value}).validate()  # type: ignore[arg-type]


@pytest.mark.slow  # Beam conversion / ONNX export and a few epochs: tens of seconds on 2 loaded cores
def test_compress_text_model_reports_fp32_rows_and_a_smaller_int8(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("onnxruntime")
    import numpy as np
    import torch

    import headrace as hr
    from headrace.text_demo import compress_text_model
    from headrace.train.text import PackedTextClassifier, segment_examples

    def sequence(i: np.int64) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(int(i))
        n = int(rng.integers(8, 30))
        return rng.integers(1, 1000, n).astype(np.int32), np.full(n, int(i) % 4, np.int32)

    torch.manual_seed(0)
    model = PackedTextClassifier(1000, 4, sequence_length=64, max_segments=8, d_model=64, num_layers=1)
    student = PackedTextClassifier(1000, 4, sequence_length=64, max_segments=8, d_model=32, num_heads=1, num_layers=1)
    rows = hr.Dataset.range(120).map(sequence).pack(64).map(segment_examples(8))
    n_rows = sum(1 for _ in rows)
    summary = compress_text_model(model, tmp_path, rows, 128 * 2**20, repeats=5, student=student, train_ds=rows,
                                  train_size=n_rows, distill_epochs=1, global_batch_size=4)
    variants = summary["variants"]
    assert list(variants) == ["fp32-torch", "fp32-onnxruntime", "int8", "distilled", "distilled-int8"]
    fp32, int8 = variants["fp32-onnxruntime"], variants["int8"]
    # the embedding table is most of this model: quantizing only the Linear layers would leave it ~1.3x smaller
    assert fp32["size_bytes"] / int8["size_bytes"] >= 2.0
    assert variants["distilled"]["parameters"] < fp32["parameters"] / 1.8  # half the width
    assert variants["distilled-int8"]["size_bytes"] < int8["size_bytes"]
    targets = summary["targets"]
    assert set(targets) == {"int8", "distilled-int8"}
    t = targets["int8"]
    assert t["baseline"] in ("fp32-torch", "fp32-onnxruntime") and t["smaller"] >= 2.0 and t["less_cpu"] > 0
    assert t["met"] == (t["smaller"] >= 2.0 and t["faster"] >= 1.5 and t["accuracy_delta_points"] >= -1.0)
    said = capsys.readouterr().out
    assert f"int8 against {t['baseline']} (the fastest fp32 row): {t['smaller']:.2f}x smaller (target >= 2x" in said
    assert "CPU: " in said and "int8 kernels: " in said  # the machine, read at run time
    for v in variants.values():  # accuracy over the 120 labelled segments, with its interval
        low, high = v["accuracy_ci95"]
        assert low <= v["accuracy"] <= high and v["latency_ms_batch32"] > 0
    report = json.loads((tmp_path / "compress" / "report.json").read_text())
    assert {r["name"] for r in report["variants"]} == set(variants)
    assert all(r["examples"] == 120 for r in report["variants"])
