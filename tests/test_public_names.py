"""Every name the README and ``docs/`` write as ``headrace.X...`` or ``hr.X...`` resolves after a plain
``import headrace``: a public submodule (``headrace.service``, ``headrace.lightning``) is an attribute of the
package without importing it first (``headrace/__init__.py``'s ``_LAZY_SUBMODULES``), and each further part
is an attribute or a submodule of the one before (``headrace.train.gpu.configure_gpu_memory``). The names are
read from the pages, so a page that starts naming a new submodule cannot leave it out."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

# Dotted words of the pages that are not Python names (each with where and why).
NOT_NAMES = {
    "hr.X": "the placeholder of 'tf.data.X -> hr.X' (README, migration, getting started)",
    "hr.io.X": "the placeholder of 'hr.io.X is each of them' (reference/io.md)",
    "headrace.md": "the file docs/reference/headrace.md",
    "headrace.fit": "the prefix of fit's log lines ('headrace.fit: ...', how-to/pytorch.md)",
    "headrace.ExactlyOnce": "the checkpoint key the Lightning callback writes (how-to/lightning.md)",
}
_NAME = re.compile(r"(?<![\w./-])(?:headrace|hr)(?:\.[A-Za-z_]\w*)+")

# Run in a fresh interpreter: in this one, other tests have imported submodules already, which makes them
# attributes of the package whether or not `import headrace` alone does.
_CHECK = r"""
import importlib, json, sys
import headrace

# path.part: an attribute of obj, else of the module named path (headrace.train.fit is a function and a
# module: the reference pages name the module's members), else the submodule
def step(obj, path, part):
    if hasattr(obj, part):
        return getattr(obj, part)
    module = sys.modules.get(path)
    if module is not None and hasattr(module, part):
        return getattr(module, part)
    return importlib.import_module(f"{path}.{part}")

def resolve(parts):
    obj, path = headrace, "headrace"
    for i, part in enumerate(parts):
        try:
            if i == 0 and not part.startswith("_"):  # a public first part must be an attribute
                obj = getattr(obj, part)
            else:  # a private module (headrace._ops) is imported by name
                obj = step(obj, path, part)
        except ImportError as exc:
            if exc.name and not exc.name.startswith("headrace"):
                return None  # an optional dependency that is not installed here
            return f"{path}.{part}: neither an attribute nor a submodule of {path} ({exc})"
        except AttributeError:
            return f"{path}.{part}: not an attribute after 'import headrace'"
        path = f"{path}.{part}"
    return None

names = json.loads(sys.stdin.read())
print(json.dumps({name: err for name in names if (err := resolve(name.split(".")[1:]))}))
"""


def _documented_names() -> dict[str, str]:
    """``{dotted name: first page that writes it}`` over the README and every ``docs/**/*.md`` page."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    names: dict[str, str] = {}
    for page in pages:
        for match in _NAME.finditer(page.read_text()):
            name = match.group(0)
            if name not in NOT_NAMES:
                names.setdefault(name, str(page.relative_to(REPO)))
    return names


def _unresolved(names: list[str]) -> dict[str, str]:
    done = subprocess.run([sys.executable, "-c", _CHECK], input=json.dumps(names), capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _public_submodules() -> set[str]:
    src = REPO / "src" / "headrace"
    public = {p.stem for p in src.glob("*.py") if not p.stem.startswith("_")}
    return public | {p.parent.name for p in src.glob("*/__init__.py") if not p.parent.name.startswith("_")}


@pytest.fixture(scope="module")
def unresolved() -> dict[str, str]:
    """What does not resolve among the documented names and ``headrace.<every public submodule>``: one fresh
    interpreter for both (importing every submodule takes seconds)."""
    return _unresolved(sorted(set(_documented_names()) | {f"headrace.{m}" for m in _public_submodules()}))


def test_every_name_the_readme_and_docs_write_resolves_after_import_headrace(unresolved: dict[str, str]):
    names = _documented_names()
    # the walk finds what the pages name (a broken pattern would pass with nothing to check)
    assert {"headrace.service", "headrace.lightning", "hr.io.TFRecordDataset", "hr.Dataset.range"} <= set(names)
    assert all(name in " ".join(p.read_text() for p in [REPO / "README.md", *(REPO / "docs").rglob("*.md")])
               for name in NOT_NAMES), "a NOT_NAMES entry no page writes any more: remove it"
    wrong = {name: why for name, why in unresolved.items() if name in names}
    assert not wrong, "names the docs write that do not resolve after 'import headrace': " + "; ".join(
        f"{name} ({names[name]}): {why}" for name, why in wrong.items())


def test_every_public_submodule_is_an_attribute_of_the_package(unresolved: dict[str, str]):
    public = _public_submodules()
    assert {"service", "lightning", "io", "torch"} <= public
    assert not {name: why for name, why in unresolved.items() if name.removeprefix("headrace.") in public}


def test_the_check_sees_a_name_that_does_not_resolve():
    unresolved = _unresolved(["headrace.servics", "headrace.io.NoSuchReader", "headrace.train.no_module.f"])
    assert set(unresolved) == {"headrace.servics", "headrace.io.NoSuchReader", "headrace.train.no_module.f"}
    assert "not an attribute after 'import headrace'" in unresolved["headrace.servics"]
