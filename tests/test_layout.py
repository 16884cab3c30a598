"""The tests mirror the layout of ``src/headrace``: a module's tests are found where the module is.

- every directory of ``tests/`` is a package or a module of ``src/headrace`` at the same place, its name with
  or without the leading underscore (``tests/budget`` <-> ``headrace/_budget``, ``tests/ops`` <->
  ``headrace/_ops``, ``tests/torch`` <-> ``headrace/torch.py``), but the shared harness directories below;
- every test file at the top of ``tests/`` tests a top-level module (``test_memory.py`` <->
  ``headrace/_memory.py``) or is one of the checks over the whole tree below; a package's tests live in its
  directory (``tests/cli``, ``tests/image``).
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO

TESTS = REPO / "tests"
SRC = REPO / "src" / "headrace"

HARNESS_DIRS = {
    "promises": "the black-box promise suite over the whole public API (bench/promises.py runs it too)",
    "data": "files TensorFlow wrote, read by tests of several modules",
}
WHOLE_TREE = {
    "test_layers.py": "the import layers of every module",
    "test_sizes.py": "no module over 600 lines, no class over 300, an assembled object's fields written in one module",
    "test_layout.py": "this file",
    "test_no_untimed_waits.py": "no untimed wait in any module",
    "test_readme.py": "the README's and docs/' examples and commands, mkdocs build --strict",
    "test_fixtures.py": "the repository is self-contained",
    "test_tf_env.py": "the TensorFlow environment of the differential tests",
    "test_seed_examples.py": "the seeds' tf.data pipelines through headrace.data, whole",
    "test_public_names.py": "every headrace.X / hr.X the README and docs/ name resolves after import headrace",
    "test_prose.py": "no tracker issue cited in the source; every docs page the source names exists",
    "test_docstrings.py": "the public API's docstrings carry Args / Returns sections",
    "test_architecture_doc.py": "docs/architecture.md's drawing of an element's journey names real files and classes",
}


def _counterpart(parent: Path, name: str) -> Path | None:
    """The package or module of ``parent`` that ``name`` (a test directory's or module's name) stands for."""
    for candidate in (name, f"_{name}"):
        for path in (parent / candidate, parent / f"{candidate}.py"):
            if (path.is_dir() and (path / "__init__.py").is_file()) or path.is_file():
                return path
    return None


def _test_dirs() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*") if p.is_dir() and not any(
        part.startswith((".", "__")) for part in p.relative_to(TESTS).parts)
        and p.relative_to(TESTS).parts[0] not in HARNESS_DIRS)


def test_every_test_directory_is_a_package_or_module_of_the_source():
    wrong = []
    for d in _test_dirs():
        parent = SRC
        for part in d.relative_to(TESTS).parts:
            found = _counterpart(parent, part) if parent.is_dir() else None
            if found is None:
                wrong.append(str(d.relative_to(REPO)))
                break
            parent = found
    assert _test_dirs(), "no test directory found: the walk is broken"
    assert not wrong, (f"test directories with no package or module of src/headrace at the same place: {wrong}; "
                       "move their tests to the directory of the module they test (or name the shared harness "
                       "in HARNESS_DIRS)")


def test_every_top_level_test_file_tests_a_top_level_module():
    wrong = []
    for f in sorted(TESTS.glob("test_*.py")):
        if f.name in WHOLE_TREE:
            continue
        found = _counterpart(SRC, f.stem.removeprefix("test_"))
        if found is None or not found.is_file():
            wrong.append(f.name)
    assert not wrong, (f"top-level test files that test no top-level module of src/headrace: {wrong}; a "
                       "package's tests live in its directory (tests/<package>/), a module's in "
                       "tests/test_<module>.py; checks over the whole tree are named in WHOLE_TREE")


def test_the_rule_sees_a_misplaced_directory_and_file():
    assert _counterpart(SRC, "budget") == SRC / "_budget"
    assert _counterpart(SRC, "torch") == SRC / "torch.py"
    assert _counterpart(SRC / "_ops", "shuffle") == SRC / "_ops" / "shuffle.py"
    assert _counterpart(SRC, "engine_review") is None
    assert _counterpart(SRC, "cli") == SRC / "cli"  # a package: its tests go to tests/cli/, not tests/test_cli.py
