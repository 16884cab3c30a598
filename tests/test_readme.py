"""The README and the documentation site (``docs/``, ``mkdocs.yml``): the README's two setup commands (CI runs
the test one verbatim), every Python example of the README and of every ``docs/**/*.md`` page run as written
on a small copy of the data `headrace demo` and the `headrace convert` examples make, every flag their command
lines show exists, and ``mkdocs build --strict`` passes (API reference included)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import REPO

README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"
# Pages that set up a framework's process-wide state before importing it (Keras's backend, XLA's host device
# count) run their examples in a process of their own; every other page's run in one process, in order.
_OWN_PROCESS = ("docs/how-to/keras.md", "docs/how-to/jax.md")


def _pages() -> list[str]:
    """The README, then every page of the site, as paths relative to the repository."""
    return ["README.md", *sorted(str(p.relative_to(REPO)) for p in DOCS.rglob("*.md"))]


def _setup_commands(text: str = README) -> list[str]:
    block = re.search(r"## Setup: two commands\s+```bash\n(.*?)```", text, re.S)
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
    # the site's Getting started shows the same two commands
    assert _setup_commands((DOCS / "getting-started.md").read_text()) == [main_job, tests]


def _blocks(page: str = "README.md") -> list[tuple[str, int, str]]:
    """``(language, first line, code)`` of every fenced block of ``page``."""
    out, lang, start, body = [], None, 0, []
    for number, line in enumerate((REPO / page).read_text().splitlines(), 1):
        if line.startswith("```"):
            if lang is None:
                lang, start, body = line[3:].strip(), number + 1, []
            else:
                out.append((lang, start, "\n".join(body) + "\n"))
                lang = None
        elif lang is not None:
            body.append(line)
    return out


def _python_examples() -> dict[str, list[tuple[str, int, str]]]:
    """``{group: [(page, line, code)]}``: every Python block of the README and the site, each distinct one once
    (the README's quick start is also Getting started's), grouped by the process that runs it."""
    groups: dict[str, list[tuple[str, int, str]]] = {}
    seen: set[str] = set()
    for page in _pages():
        for lang, line, code in _blocks(page):
            if lang == "python" and code not in seen:
                seen.add(code)
                groups.setdefault(page if page in _OWN_PROCESS else "main", []).append((page, line, code))
    return groups


_DRIVER = """
import sys, time, traceback
blocks = __import__("json").loads(sys.stdin.read())
for page, line, code in blocks:
    try:
        t0 = time.perf_counter()
        exec(compile(code, f"{page}, example at line {line}", "exec"), {"__name__": "__readme__"})
    except BaseException:
        traceback.print_exc()
        sys.exit(f"{page} example at line {line} failed")
    print("ran", page, line, round(time.perf_counter() - t0, 1), flush=True)
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the examples read: the demo's photos and shards (72 images), a Parquet table converted from the
    photos (as the Parquet page's command line shows), and a ResNet-18
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
@pytest.mark.parametrize("group", sorted(_python_examples()))
def test_every_python_example_runs_as_written(workspace: Path, group: str):
    blocks = _python_examples()[group]
    env = {**os.environ, "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "torch")}  # TensorFlow is never here
    done = subprocess.run([sys.executable, "-c", _DRIVER], input=json.dumps(blocks), cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-6000:]
    assert done.stdout.split().count("ran") == len(blocks)
    if group == "main":
        assert len(blocks) >= 14  # the README's 13 examples (moved to docs/) and the migration guide's
        assert any(page == "README.md" for page, _, _ in blocks), "the README keeps a runnable quick start"
        assert (workspace / "shards" / "dataset.json").exists()
        assert (workspace / "eval-shards" / "dataset.json").exists()
        assert list((workspace / "ckpt").glob("ckpt-*.pt"))  # the training example checkpointed


def test_every_flag_in_the_command_lines_of_the_readme_and_the_docs_exists():
    from headrace.cli import app

    runner = CliRunner()
    helps: dict[str, str] = {}
    lines = [line.removeprefix("$ ") for page in _pages() for lang, _, code in _blocks(page)
             if lang in ("", "bash", "console", "shell", "sh", "text")
             for line in code.replace("\\\n", " ").splitlines() if line.removeprefix("$ ").startswith("headrace ")]
    assert len(lines) >= 18  # the 18 command lines the README showed before the site
    for line in lines:
        command = line.split()[1]
        if command not in helps:
            result = runner.invoke(app, [command, "--help"])
            assert result.exit_code == 0, line
            helps[command] = result.output
        for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", line.split("#")[0]):
            assert re.search(rf"(?<![\w-]){flag}(?![\w-])", helps[command]), f"{flag} in: {line}"


def test_readme_example_source_runs():
    """The iterator-protocol example of the architecture page runs as printed (its asserts check the results)."""
    text = (DOCS / "architecture.md").read_text()
    section = re.search(r"## Writing a source: the iterator protocol\n(.*?)(?:\n## |\Z)", text, re.S)
    assert section, "docs/architecture.md must have a '## Writing a source: the iterator protocol' section"
    code = re.search(r"```python\n(.*?)```", section.group(1), re.S)
    assert code, "the section must hold a python example"
    source = code.group(1)
    assert "(hr.DatasetIterator)" in source and "Dataset.from_source(" in source
    assert not any(f"{verb} headrace.{pkg}" in source for verb in ("import", "from") for pkg in ("_ops", "_engine"))
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(source, "docs/architecture.md (Writing a source)", "exec"), namespace)
    assert namespace["state"], "the example takes a checkpoint"


def test_the_readme_links_to_pages_that_exist():
    links = re.findall(r"\]\(((?:docs/)[^)#\s]+)(?:#[^)]*)?\)", README)
    assert len(links) >= 10, "the README links the site's pages"
    missing = [link for link in links if not (REPO / link).is_file()]
    assert not missing, f"README.md links to missing pages: {missing}"


def test_mkdocs_build_strict_passes(tmp_path: Path):
    """The site builds with ``--strict`` (a broken link or anchor, a page left out of the nav, a docstring
    mkdocstrings cannot parse fail it) and the API reference is generated from the docstrings."""
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(REPO / "mkdocs.yml"), "--site-dir", str(site)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert "WARNING" not in done.stderr, done.stderr[-6000:]
    dataset = (site / "reference" / "dataset" / "index.html").read_text()
    assert 'id="headrace.Dataset.map"' in dataset and "num_parallel_calls" in dataset
    assert 'id="headrace.io.tfrecord.TFRecordDataset"' in (site / "reference" / "io" / "index.html").read_text()
    for page in _pages()[1:]:
        built = site / Path(page).relative_to("docs").with_suffix("") / "index.html"
        if page.endswith("index.md"):
            built = site / Path(page).relative_to("docs").with_name("index.html")
        assert built.is_file() or page.startswith("docs/reference/"), f"{page} was not built"


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


def test_the_quick_start_runs_without_a_warning(tmp_path: Path):
    """The first example a user runs must not warn: ``shuffle(10_000)`` of decoded 224 x 224 float32 images
    (600 KB each) was cut to ~1,581 elements within its share of the 2 GiB budget (a ``MemoryBudgetWarning``
    on the demo's 4,500 training images); it shuffles the encoded records instead. Run on 1,700 small JPEG
    records (the decoded buffer of the old order overflows there too), warnings as errors."""
    from headrace.image.photos import iter_photo_jpegs
    from headrace.io.example import encode
    from headrace.io.sharded_writer import ShardedWriter

    code = next(code for lang, _, code in _blocks() if lang == "python")  # the README's first: the Quick start
    assert ".shuffle(10_000" in code and 'memory_budget="2GiB"' in code
    with ShardedWriter(tmp_path / "demo_output" / "data" / "train", "train", num_shards=4) as w:
        for jpeg, label in iter_photo_jpegs(1700, (40, 30)):
            w.write(encode({"image/encoded": jpeg, "image/class/label": label}))
    done = subprocess.run([sys.executable, "-W", "error", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == "" and int(done.stdout.split()[-1]) <= 2 * 2**30


def test_the_pages_quote_no_suite_or_demo_figures_of_an_earlier_run():
    """The suite's test count and time, and the demo's time and throughput, change with every session: a page
    that quoted them (1,684 tests in 710 s; the demo in 211 s at 72 images/s) went stale while the suite grew.
    The pages say where the figures come from (pytest's closing line, ``bench/demo.py``) instead."""
    stale = []
    for page in _pages():
        text = " ".join((REPO / page).read_text().split())
        stale += [f"{page}: {m.group(0)}" for m in re.finditer(r"\b[\d,]+ tests in [\d,.]+ s\b", text)]
        if page in ("docs/getting-started.md", "docs/how-to/cli.md"):
            stale += [f"{page}: {m.group(0)}" for m in re.finditer(r"\b[\d,.]+ images/s\b|\b\d+ s wall\b", text)]
    assert not stale, stale
