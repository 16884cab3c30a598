"""The README: its two setup commands (CI runs the test one verbatim), every Python example run as written
on a small copy of the data `headrace demo` and its `headrace convert` examples make, and every flag its
command lines show exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def _setup_commands() -> list[str]:
    block = re.search(r"## Setup: two commands\s+```bash\n(.*?)```", README, re.S)
    assert block, "README.md must start with a '## Setup: two commands' bash block"
    return [line.split("#")[0].strip() for line in block.group(1).strip().splitlines()]


def test_readme_has_two_setup_commands_and_ci_runs_the_test_one():
    main_job, tests = _setup_commands()
    assert "headrace demo" in main_job and "pip install" in main_job
    assert "pytest" in tests and "pip install" in tests and "torch==2.13.0" in tests
    ci = (REPO / ".ci" / "run").read_text()
    assert tests in ci, f".ci/run must run the README test command verbatim: {tests!r}"
    # the pin has no local version label: it matches the package index's torch and PyTorch's CPU build
    pins = [line for line in (REPO / "constraints.txt").read_text().splitlines() if line.startswith("torch==")]
    assert pins == ["torch==2.13.0"]


def _blocks() -> list[tuple[str, int, str]]:
    """``(language, first line, code)`` of every fenced block."""
    out, lang, start, body = [], None, 0, []
    for number, line in enumerate(README.splitlines(), 1):
        if line.startswith("```"):
            if lang is None:
                lang, start, body = line[3:].strip(), number + 1, []
            else:
                out.append((lang, start, "\n".join(body) + "\n"))
                lang = None
        elif lang is not None:
            body.append(line)
    return out


def _python_examples() -> list[tuple[int, str]]:
    return [(line, code) for lang, line, code in _blocks() if lang == "python"]


_DRIVER = """
import sys, time, traceback
blocks = __import__("json").loads(sys.stdin.read())
for line, code in blocks:
    try:
        t0 = time.perf_counter()
        exec(compile(code, f"README.md, example at line {line}", "exec"), {"__name__": "__readme__"})
    except BaseException:
        traceback.print_exc()
        sys.exit(f"README.md example at line {line} failed")
    print("ran", line, round(time.perf_counter() - t0, 1), flush=True)
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the examples read: the demo's photos and shards (72 images), a Parquet table converted from the
    photos (as the README's command line shows), and a ResNet-18
    ``model.pt`` where ``headrace demo --compress`` writes the trained one."""
    pytest.importorskip("apache_beam", reason="the demo's data is made by headrace convert (Beam)")

    from headrace import convert
    from headrace.demo import DemoConfig, write_dataset

    ws = tmp_path_factory.mktemp("readme")
    write_dataset(DemoConfig(images=72, output=str(ws / "demo_output")), ws / "demo_output")
    convert.convert(ws / "demo_output" / "photos" / "train", ws / "table", to="parquet", num_shards=2)
    import torch

    from headrace.train import build_model

    torch.manual_seed(0)  # `headrace demo --compress` writes the trained model's state_dict here
    torch.save(build_model("resnet18", num_classes=12).state_dict(), ws / "demo_output" / "model.pt")
    return ws


@pytest.mark.slow
def test_every_python_example_runs_as_written(workspace: Path):
    import json

    blocks = _python_examples()
    assert len(blocks) >= 10
    done = subprocess.run([sys.executable, "-c", _DRIVER], input=json.dumps(blocks), cwd=workspace,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-6000:]
    assert done.stdout.split().count("ran") == len(blocks)
    assert (workspace / "shards" / "dataset.json").exists() and (workspace / "eval-shards" / "dataset.json").exists()
    assert list((workspace / "ckpt").glob("ckpt-*.pt"))  # the training example checkpointed


def test_every_flag_in_the_readme_command_lines_exists():
    from headrace.cli import app

    runner = CliRunner()
    helps: dict[str, str] = {}
    lines = [line for lang, _, code in _blocks() if lang in ("", "bash") for line in code.replace("\\\n", " ")
             .splitlines() if line.startswith("headrace ")]
    assert len(lines) >= 10
    for line in lines:
        command = line.split()[1]
        if command not in helps:
            result = runner.invoke(app, [command, "--help"])
            assert result.exit_code == 0, line
            helps[command] = result.output
        for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", line.split("#")[0]):
            assert re.search(rf"(?<![\w-]){flag}(?![\w-])", helps[command]), f"{flag} in: {line}"


def test_readme_example_source_runs():
    """The iterator-protocol example of the README runs as printed (its asserts check the results)."""
    text = (REPO / "README.md").read_text()
    section = re.search(r"### Writing a source: the iterator protocol\n(.*?)\n## ", text, re.S)
    assert section, "README.md must have a '### Writing a source: the iterator protocol' section"
    code = re.search(r"```python\n(.*?)```", section.group(1), re.S)
    assert code, "the section must hold a python example"
    source = code.group(1)
    assert "(hr.DatasetIterator)" in source and "Dataset.from_source(" in source
    assert "import headrace._ops" not in source and "from headrace._ops" not in source
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(source, "README.md (Writing a source)", "exec"), namespace)
    assert namespace["state"], "the example takes a checkpoint"


def test_no_merge_conflict_markers_in_tracked_files():
    """A merge once left ``<<<<<<< HEAD`` blocks in the README (nothing else reads it as code)."""
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    marked = []
    for name in files:
        path = REPO / name
        text_file = path.suffix in {".md", ".py", ".toml", ".txt", ".cfg", ".yaml", ".yml", ".json", ""}
        if not text_file or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if re.search(r"^(<<<<<<< |>>>>>>> )\S", text, re.M):
            marked.append(name)
    assert not marked, f"merge conflict markers left in {marked}"
