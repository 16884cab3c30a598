"""``headrace train PATH --text``: labelled text from ``headrace convert --from text --to text`` (or ``--to
tfrecord``), trained, resumed; bad lines; a conversion that is not labelled text."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from headrace.cli import app

runner = CliRunner()
WORDS = [["alpha", "beta", "gamma", "delta"], ["one", "two", "three", "four"]]


def _convert(tmp_path: Path, lines: list[str], to: str = "text") -> Path:
    pytest.importorskip("apache_beam", reason="the text is converted with headrace convert (Beam)")
    from headrace.convert import convert

    src = tmp_path / "src"
    src.mkdir()
    (src / "lines.txt").write_text("".join(f"{line}\n" for line in lines))
    convert(src, tmp_path / "shards", source_format="text", to=to, num_shards=2,
            compression=None if to == "parquet" else "GZIP",
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


@pytest.mark.slow  # a Beam conversion and a torchrun job of two processes: ~30 s on 2 loaded cores
def test_train_text_under_torchrun_writes_one_tokenizer(tmp_path: Path) -> None:
    """Two ranks (gloo): both train the same tokenizer, rank 0 writes it, and the job trains in step."""
    shards = _convert(tmp_path, _labelled(160))
    ck = tmp_path / "ck"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT")} | {"OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(port), "-m", "headrace.cli", "train", str(shards), "--text", "--sequence-length",
           "32", "--vocab-size", "300", "--global-batch-size", "8", "--micro-batch-size", "2", "--epochs", "1",
           "--checkpoint-dir", str(ck)]
    job = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    try:
        out, _ = job.communicate(timeout=240)
    finally:
        if job.poll() is None:  # timed out: stop torchrun and its workers
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=30)
    assert job.returncode == 0, out[-4000:]
    assert "micro-batch 2 x 2 accumulation step(s) x 2 rank(s)" in out, out[-4000:]
    from tokenizers import Tokenizer

    assert Tokenizer.from_file(str(ck / "tokenizer.json")).token_to_id("[EOS]") == 3
    assert sorted(p.name for p in ck.glob("tokenizer*")) == ["tokenizer.json"]  # no temporary file left


@pytest.mark.parametrize("to", ["text", "tfrecord"])  # TextLineDataset, or the records' text feature
def test_a_line_without_a_label_is_a_one_line_error(tmp_path: Path, to: str) -> None:
    shards = _convert(tmp_path, ["0\tgood line here", "no label on this line"], to)
    result = runner.invoke(app, ["train", str(shards), "--text", "--global-batch-size", "1"])
    assert result.exit_code == 1
    assert "the line b'no label on this line' is not '<label>\\t<text>'" in result.output
    assert "Traceback" not in result.output


def test_a_conversion_that_is_not_labelled_text_is_named(tmp_path: Path) -> None:
    shards = _convert(tmp_path, ["0\tgood line here", "1\tanother line"], "parquet")
    result = runner.invoke(app, ["train", str(shards), "--text", "--global-batch-size", "1"])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert "a parquet conversion with features ['text']; labelled text is a --to text conversion" in result.output
