"""``headrace train PATH --text``: labelled text from ``headrace convert --from text``, trained, resumed; bad lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from headrace.cli import app

runner = CliRunner()
WORDS = [["alpha", "beta", "gamma", "delta"], ["one", "two", "three", "four"]]


def _convert(tmp_path: Path, lines: list[str]) -> Path:
    pytest.importorskip("apache_beam", reason="the text is converted with headrace convert (Beam)")
    from headrace.convert import convert

    src = tmp_path / "src"
    src.mkdir()
    (src / "lines.txt").write_text("".join(f"{line}\n" for line in lines))
    convert(src, tmp_path / "shards", source_format="text", num_shards=2, compression="GZIP",
            beam_options=("direct_running_mode=in_memory", "direct_num_workers=1"))
    return tmp_path / "shards"


def _labelled(n: int) -> list[str]:
    return [f"{i % 2}\t" + " ".join(WORDS[i % 2][(i + j) % 4] for j in range(6 + i % 5)) for i in range(n)]


@pytest.mark.slow  # Beam conversion / ONNX export and a few epochs: tens of seconds on 2 loaded cores
def test_train_text_learns_checkpoints_and_resumes(tmp_path: Path) -> None:
    shards = _convert(tmp_path, _labelled(160))
    ck = tmp_path / "ck"
    args = ["train", str(shards), "--text", "--eval", str(shards), "--sequence-length", "32", "--vocab-size", "300",
            "--global-batch-size", "8", "--memory-budget", "192MiB", "--checkpoint-dir", str(ck)]
    first = runner.invoke(app, [*args, "--epochs", "1"], catch_exceptions=False)
    assert first.exit_code == 0, first.output
    info = json.loads(first.output.strip().splitlines()[-1])
    assert info["num_classes"] == 2 and info["records"] == 160 and info["steps"] == info["rows_per_epoch"] // 8
    assert (ck / "tokenizer.json").is_file() and list(ck.glob("ckpt-*.pt"))
    resumed = runner.invoke(app, [*args, "--epochs", "2", "--resume"], catch_exceptions=False)
    assert resumed.exit_code == 0, resumed.output
    again = json.loads(resumed.output.strip().splitlines()[-1])
    assert again["resumed_from"] and again["steps"] == 2 * info["steps"]
    assert again["history"][-1]["eval_accuracy"] > 0.9  # which word list a line is drawn from: chance 50%


def test_a_line_without_a_label_is_a_one_line_error(tmp_path: Path) -> None:
    shards = _convert(tmp_path, ["0\tgood line here", "no label on this line"])
    result = runner.invoke(app, ["train", str(shards), "--text", "--global-batch-size", "1"])
    assert result.exit_code == 1
    assert "the line b'no label on this line' is not '<label>\\t<text>'" in result.output
    assert "Traceback" not in result.output
