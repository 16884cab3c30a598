"""Small modules and classes (docs/architecture.md): no module of ``src/headrace`` over 600 lines, no class
over 300 lines but the ``Dataset`` facade (one method per tf.data transformation, each a few lines that build a
node). A class is measured from its ``class`` line to its last statement (decorators, docstring and blank lines
inside included)."""

from __future__ import annotations

import ast

from tests.conftest import REPO

SRC = REPO / "src" / "headrace"
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 300
FACADES = {"headrace._dataset.Dataset"}


def _modules() -> list:
    return sorted(SRC.rglob("*.py"))


def _name(path) -> str:
    return ".".join(path.relative_to(SRC.parent).with_suffix("").parts)


def test_the_tree_is_there():
    assert len(_modules()) > 50


def test_no_module_is_over_600_lines():
    big = {_name(p): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not big, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {big}"


def test_no_class_is_over_300_lines_but_the_facade():
    big = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                name = f"{_name(path)}.{node.name}"
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES and name not in FACADES:
                    big[name] = lines
    assert not big, f"classes over {MAX_CLASS_LINES} lines (split them by concern): {big}"


def test_the_measure_sees_a_long_class():
    src = "class A:\n" + "    x = 1\n" * (MAX_CLASS_LINES + 1)
    (cls,) = [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ClassDef)]
    assert cls.end_lineno - cls.lineno + 1 > MAX_CLASS_LINES
