"""``headrace convert`` through typer: the summary and JSON line, and one-line errors with exit status 1."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("apache_beam", reason="headrace convert needs pip install 'headrace[beam]'")

from typer.testing import CliRunner

from headrace.cli import app as headrace_app

from .convert_helpers import IN_PROCESS, csv_file


@pytest.fixture(scope="module")
def app():
    return headrace_app


def _beam_flags():
    return [x for opt in IN_PROCESS for x in ("--beam-option", opt)]


def test_convert_command_prints_summary_and_json(app, tmp_path):
    src = csv_file(tmp_path / "t.csv")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["convert", str(src), str(out), "--to", "parquet", "--num-shards", "2",
                                   "--max-rejected", "1", *_beam_flags()])
    assert res.exit_code == 0, res.output
    *_, line = res.stdout.strip().splitlines()
    result = json.loads(line)
    assert result["records"] == 5 and result["shards"] == 2 and result["rejected"] == 1
    assert result["format"] == "parquet" and "score" in result["features"]
    assert "5 records in 2 parquet shard(s)" in res.stdout
    assert (out / "dataset.json").exists()


def test_convert_command_errors_are_one_line(app, tmp_path):
    src = csv_file(tmp_path / "t.csv")
    res = CliRunner().invoke(app, ["convert", str(src), str(tmp_path / "out"), *_beam_flags()])
    assert res.exit_code == 1
    assert res.stderr.startswith("headrace: error: convert: 1 source rows rejected, more than max_rejected=0")
    assert len(res.stderr.strip().splitlines()) == 1
    res = CliRunner().invoke(app, ["convert", str(src), str(tmp_path / "out"), *_beam_flags()])
    assert res.exit_code == 1 and "--overwrite" in res.stderr
    res = CliRunner().invoke(app, ["convert", str(src), str(tmp_path / "o2"), "--beam-option", "oops"])
    assert res.exit_code == 1 and "is not key=value" in res.stderr
    res = CliRunner().invoke(app, ["convert", str(src), str(tmp_path / "o2"), "--beam-option", "direct_num_worker=2"])
    assert res.exit_code == 1 and "did you mean direct_num_workers" in res.stderr
