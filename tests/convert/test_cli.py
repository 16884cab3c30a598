"""``headrace convert`` through typer: the summary and JSON line, ``--image-size N``, and one-line errors with
exit status 1 (flags named, Beam's log kept out of the terminal) or 2 (a bad flag value)."""

from __future__ import annotations

import json
from pathlib import Path

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


def test_convert_to_text_writes_lines_and_refuses_a_line_break_in_one_line(app, tmp_path):
    from headrace.convert import shard_paths
    from headrace.io import TextLineDataset

    src = tmp_path / "t.txt"
    src.write_text("héllo ✓\n\nlast\n", encoding="utf-8")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["convert", str(src), str(out), "--to", "text", "--compression", "gzip",
                                   "--num-shards", "2", *_beam_flags()])
    assert res.exit_code == 0, res.output
    result = json.loads(res.stdout.strip().splitlines()[-1])
    assert result["format"] == "text" and result["records"] == 3 and result["features"] == ["text"]
    assert "3 records in 2 text shard(s)" in res.stdout
    paths = shard_paths(out)
    assert [Path(p).name for p in paths] == ["data-00000-of-00002.txt.gz", "data-00001-of-00002.txt.gz"]
    assert sorted(TextLineDataset(paths, compression_type="GZIP")) == sorted(["héllo ✓".encode(), b"", b"last"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"text": "two\\nlines"}\n')
    res = CliRunner().invoke(app, ["convert", str(bad), str(tmp_path / "o2"), "--to", "text", *_beam_flags()])
    assert res.exit_code == 1 and len(res.stderr.strip().splitlines()) == 1
    assert res.stderr.startswith("headrace: error: convert: record bad.jsonl:2 (shard data-00000-of-00001.txt): "
                                 "the 'text' value b'two\\nlines' holds a line break")
    assert not (tmp_path / "o2" / "dataset.json").exists()
    res = CliRunner().invoke(app, ["convert", str(bad), str(tmp_path / "o3"), "--to", "txt"])
    assert res.exit_code == 2 and "'tfrecord', 'parquet', 'text'" in res.stderr


def test_convert_command_errors_are_one_line(app, tmp_path):
    src = csv_file(tmp_path / "t.csv")
    res = CliRunner().invoke(app, ["convert", str(src), str(tmp_path / "out"), *_beam_flags()])
    assert res.exit_code == 1
    assert res.stderr.startswith("headrace: error: convert: 1 source rows rejected, more than --max-rejected 0")
    assert len(res.stderr.strip().splitlines()) == 1 and "[while running" not in res.stderr
    res = CliRunner().invoke(app, ["convert", str(src), str(tmp_path / "out"), *_beam_flags()])
    assert res.exit_code == 1 and "--overwrite" in res.stderr
    res = CliRunner().invoke(app, ["convert", str(src), str(tmp_path / "o2"), "--beam-option", "oops"])
    assert res.exit_code == 1 and "is not key=value" in res.stderr
    res = CliRunner().invoke(app, ["convert", str(src), str(tmp_path / "o2"), "--beam-option", "direct_num_worker=2"])
    assert res.exit_code == 1 and "did you mean direct_num_workers" in res.stderr


def test_a_corrupt_jpeg_is_one_line_naming_the_file_and_the_whole_reason(app, tmp_path):
    from .convert_helpers import image_folder

    image_folder(tmp_path / "photos", n=12)  # with camera/broken.jpg, a truncated JPEG
    res = CliRunner().invoke(app, ["convert", str(tmp_path / "photos"), str(tmp_path / "out"), *_beam_flags()])
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr  # Beam's traceback and log lines are not on the terminal
    line = lines[0]
    assert line.startswith("headrace: error: convert: 1 source rows rejected, more than --max-rejected 0")
    assert f"{tmp_path / 'photos' / 'camera' / 'broken.jpg'}: ImageDecodeError: cannot decode the image" in line
    reason = json.loads((tmp_path / "out" / "_rejected.jsonl").read_text().splitlines()[0])["reason"]
    assert reason.split("; ")[0] + ");" in line  # the reason's first clause whole, not cut inside a word
    log = line.rsplit("(Apache Beam's log: ", 1)[1].rstrip(")")
    assert "Traceback" in Path(log).read_text()  # the details are kept, in a file the line names


def test_convert_image_size_takes_one_number_or_wxh(app, tmp_path):
    from .convert_helpers import image_folder

    image_folder(tmp_path / "photos", n=12, broken=False)
    res = CliRunner().invoke(app, ["convert", str(tmp_path / "photos"), str(tmp_path / "out"), "--image-size", "20",
                                   *_beam_flags()])
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert manifest["statistics"]["image/width"]["max"] == manifest["statistics"]["image/height"]["min"] == 20
    res = CliRunner().invoke(app, ["convert", str(tmp_path / "photos"), str(tmp_path / "o2"), "--image-size", "0x5"])
    assert res.exit_code == 2 and "'--image-size'" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_an_argument_error_names_no_empty_beam_log(app, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    res = CliRunner().invoke(app, ["convert", str(tmp_path / "missing"), str(tmp_path / "out"), *_beam_flags()])
    assert res.exit_code == 1
    assert "does not exist" in res.stderr and "Apache Beam's log" not in res.stderr, res.stderr
    assert list((tmp_path / "tmp").iterdir()) == []  # the empty log is not left behind either


def test_the_python_api_keeps_beam_worker_output_off_the_terminal(tmp_path, capfd):
    """Beam's worker processes print start-up warnings (``apitools not found``...) on the descriptor they
    inherit; ``convert()`` sends them to its log file as the CLI does (``verbose=True`` would show them)."""
    from headrace import convert

    from .convert_helpers import image_folder

    good = image_folder(tmp_path / "photos", n=6, broken=False)
    m = convert.convert(tmp_path / "photos", tmp_path / "out", num_shards=2,
                        beam_options=["direct_running_mode=multi_processing", "direct_num_workers=2"])
    assert m["records"] == len(good)
    out, err = capfd.readouterr()
    assert err == "" and out == "", (out, err)
