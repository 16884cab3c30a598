"""docs/architecture.md's drawing of one element's journey (``TFRecordDataset -> map(AUTOTUNE) -> shuffle ->
batch -> prefetch``) is true to the tree: every ``src/headrace/...py`` path it names is a file, and the name
after a path (``Class``, ``function`` or ``Class.method``) is defined in that file."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO

DOC = REPO / "docs" / "architecture.md"
STEP = re.compile(r"(src/headrace/[\w/]+\.py)(?:[ \t]+([A-Za-z_][\w.]*))?")
"""A step of the drawing: a path, then (optionally) the class or function that takes the step."""


def journey(text: str) -> str:
    """The drawing: the first ```` ```text ```` block after ``**One element's journey**``."""
    m = re.search(r"\*\*One element's journey\*\*.*?```text\n(.*?)```", text, re.S)
    if m is None:
        raise AssertionError(f"{DOC.relative_to(REPO)}: no ```text drawing after **One element's journey**")
    return m.group(1)


def defines(path: Path, dotted: str) -> bool:
    """Whether ``path`` defines ``dotted`` (``Class``, ``function`` or ``Class.method``) at top level."""
    scope: list[ast.stmt] = ast.parse(path.read_text(), str(path)).body
    for part in dotted.split("."):
        found = next((n for n in scope if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                      and n.name == part), None)
        if found is None:
            return False
        scope = found.body
    return True


def wrong_steps(drawing: str, root: Path) -> list[str]:
    """The drawing's steps whose file is missing under ``root`` or does not define the name given."""
    wrong = []
    for rel, name in STEP.findall(drawing):
        path = root / rel
        if not path.is_file():
            wrong.append(f"{rel}: no such file")
        elif name and not defines(path, name):
            wrong.append(f"{rel}: defines no {name}")
    return wrong


def test_every_file_and_name_of_the_drawing_exists():
    drawing = journey(DOC.read_text())
    assert len(STEP.findall(drawing)) >= 20, "the drawing names fewer steps than expected: is the pattern broken?"
    wrong = wrong_steps(drawing, REPO)
    assert not wrong, (f"{DOC.relative_to(REPO)}: the element's journey names files or classes that do not exist: "
                       f"{wrong}; redraw it from the code")


def test_the_drawing_follows_the_pipeline_in_order():
    drawing = journey(DOC.read_text())
    at = [drawing.find(step) for step in ("TFRecordDataset", "map(f, num_parallel_calls=AUTOTUNE)", "shuffle(",
                                          "batch(", "prefetch(", "next(it)")]
    assert -1 not in at and at == sorted(at), f"the drawing's steps are missing or out of order: {at}"
    for module in ("io/tfrecord.py", "_ops/map.py", "_ops/shuffle.py", "_ops/batch.py", "_ops/prefetch.py"):
        assert f"src/headrace/{module}" in drawing, f"the drawing does not name src/headrace/{module}"


@pytest.mark.parametrize(("line", "expected"), [
    ("  |  src/headrace/_ops/map.py  MapNode.make_iterator: ok", []),
    ("  |  src/headrace/_ops/nosuch.py  Thing: gone", ["src/headrace/_ops/nosuch.py: no such file"]),
    ("  |  src/headrace/_ops/map.py  NoSuchNode: gone", ["src/headrace/_ops/map.py: defines no NoSuchNode"]),
    ("  |  src/headrace/_ops/map.py  MapNode.no_method: gone",
     ["src/headrace/_ops/map.py: defines no MapNode.no_method"]),
])
def test_the_check_sees_a_missing_file_or_name(line: str, expected: list[str]):
    text = f"**One element's journey**\n\n```text\n{line}\n```\n"
    assert wrong_steps(journey(text), REPO) == expected
