"""Small modules and classes (docs/architecture.md): no module of ``src/headrace`` over 600 lines, no class
over 300 lines but the ``Dataset`` facade (one method per tf.data transformation, each a few lines that build a
node; its module is measured without docstrings, which its public docstrings fill). A class is measured from its
``class`` line to its last statement (decorators, docstring and blank lines inside included). And what a split must
keep: no attribute of an object assembled from several classes (mixins, or parts built around one object) is
written from more than one module."""

from __future__ import annotations

import ast

from tests.conftest import REPO

SRC = REPO / "src" / "headrace"
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 300
FACADES = {"headrace._dataset.Dataset"}
FACADE_MODULES = {"headrace._dataset"}


def _modules() -> list:
    return sorted(SRC.rglob("*.py"))


def _name(path) -> str:
    return ".".join(path.relative_to(SRC.parent).with_suffix("").parts)


def test_the_tree_is_there():
    assert len(_modules()) > 50


def _docstring_lines(tree: ast.AST) -> set[int]:
    """The line numbers of every docstring of ``tree`` (module, classes, functions)."""
    return {line for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.body
            and isinstance(d := n.body[0], ast.Expr) and isinstance(d.value, ast.Constant)
            and isinstance(d.value.value, str) for line in range(d.lineno, d.end_lineno + 1)}


def _measured_lines(path) -> int:
    """A module's lines; the facade's module is measured without its docstrings (its methods' public docstrings,
    in the form summary, example, Args, Returns, Raises, are most of its length)."""
    text = path.read_text()
    n = len(text.splitlines())
    return n - len(_docstring_lines(ast.parse(text))) if _name(path) in FACADE_MODULES else n


def test_no_module_is_over_600_lines():
    big = {_name(p): n for p in _modules() if (n := _measured_lines(p)) > MAX_MODULE_LINES}
    assert not big, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {big}"


def test_the_facade_measure_leaves_out_docstrings_only():
    src = 'def f():\n    """One.\n\n    Two.\n    """\n    return 1\n'
    assert _docstring_lines(ast.parse(src)) == {2, 3, 4, 5}


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


# ---- one home per field: an object assembled from several classes writes each attribute in one module -------
# Splitting a class to meet the cap must split the object, not scatter its fields: either by mixins (a class
# with several bases of src/headrace) or by parts (the classes built around one object, as the parallel pool's
# window, workers, inline path, snapshots and steps around ``ParallelApplier``). Plain records (classes with
# ``__slots__``: a worker's counters, a result) are written by whoever holds them, by design.
def _classes(tree: ast.AST, module: str) -> dict[str, tuple[str, ast.ClassDef]]:
    return {n.name: (module, n) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}


def _self_writes(cls: ast.ClassDef) -> set[str]:
    return {t.attr for n in ast.walk(cls) if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign)
            for target in (n.targets if isinstance(n, ast.Assign) else [n.target]) for t in ast.walk(target)
            if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store)
            and isinstance(t.value, ast.Name) and t.value.id == "self"}


def _foreign_writes(tree: ast.AST) -> list[tuple[str, int]]:
    """``(attribute, line)`` of every write to an attribute of an object other than ``self``."""
    return [(t.attr, n.lineno) for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign)
            for target in (n.targets if isinstance(n, ast.Assign) else [n.target]) for t in ast.walk(target)
            if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store)
            and not (isinstance(t.value, ast.Name) and t.value.id == "self")]


def _is_record(cls: ast.ClassDef) -> bool:
    return any(isinstance(s, ast.Assign) and any(getattr(t, "id", "") == "__slots__" for t in s.targets)
               for s in cls.body)


def mixed_attributes_written_twice(sources: dict[str, str]) -> dict[str, dict[str, list[str]]]:
    """For every class with two or more bases defined in ``sources`` (module -> text): the attributes its
    classes write (``self.x = ...``) from more than one module, with those modules."""
    classes: dict[str, tuple[str, ast.ClassDef]] = {}
    for module, text in sources.items():
        classes.update(_classes(ast.parse(text), module))

    def chain(name: str, seen: list[str]) -> list[str]:
        if name in classes and name not in seen:
            seen.append(name)
            for base in classes[name][1].bases:
                if isinstance(base, ast.Name):
                    chain(base.id, seen)
        return seen

    out: dict[str, dict[str, list[str]]] = {}
    for name, (_, cls) in classes.items():
        if sum(isinstance(b, ast.Name) and b.id in classes for b in cls.bases) < 2:
            continue
        writers: dict[str, set[str]] = {}
        for part in chain(name, []):
            for attr in _self_writes(classes[part][1]):
                writers.setdefault(attr, set()).add(classes[part][0])
        twice = {a: sorted(m) for a, m in writers.items() if len(m) > 1}
        if twice:
            out[name] = twice
    return out


def assembled_parts(sources: dict[str, str], assembled: str) -> dict[str, tuple[str, ast.ClassDef]]:
    """``assembled`` and its parts (classes whose ``__init__`` takes an ``assembled``), records left out."""
    out = {}
    for module, text in sources.items():
        for name, (_, cls) in _classes(ast.parse(text), module).items():
            init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
            is_part = init is not None and any(a.annotation is not None and ast.unparse(a.annotation) == assembled
                                               for a in init.args.args)
            if (name == assembled or is_part) and not _is_record(cls):
                out[name] = (module, cls)
    return out


def parts_written_from_elsewhere(sources: dict[str, str], assembled: str) -> list[str]:
    """Writes, from another module, to an attribute that ``assembled`` or one of its parts owns:
    ``module:line: attribute (owned by Class in module)``."""
    trees = {m: ast.parse(t) for m, t in sources.items()}
    owned: dict[str, tuple[str, str]] = {}
    for name, (module, cls) in assembled_parts(sources, assembled).items():
        for attr in _self_writes(cls):
            owned.setdefault(attr, (name, module))
    return [f"{module}:{line}: {attr} (owned by {owned[attr][0]} in {owned[attr][1]})"
            for module, tree in trees.items() for attr, line in _foreign_writes(tree)
            if attr in owned and owned[attr][1] != module]


def _sources(root) -> dict[str, str]:
    return {_name(p): p.read_text() for p in sorted(root.rglob("*.py"))}


def test_no_attribute_of_a_class_assembled_from_mixins_is_written_from_two_modules():
    twice = mixed_attributes_written_twice(_sources(SRC))
    assert not twice, (f"attributes written from several modules of one object assembled from mixins: {twice}; "
                       "build the object from parts that each own their fields (as the parallel pool)")


def test_the_parallel_pool_s_parts_write_only_their_own_fields():
    pool = _sources(SRC / "_engine" / "pool")
    assert parts_written_from_elsewhere(pool, "ParallelApplier") == [], (
        "a module of the pool writes a field another part owns; call a method of the owner instead")
    parts = set(assembled_parts(pool, "ParallelApplier"))
    assert {"ParallelApplier", "ResultsWindow", "WorkerThreads", "InlinePath", "InputSnapshots"} <= parts, parts


def test_the_ownership_rules_see_a_field_written_from_two_modules():
    mixins = {"m.a": "class A:\n    def f(self):\n        self.seq = 1\n",
              "m.b": "class B:\n    def g(self):\n        self.seq += 1\n",
              "m.c": "from m.a import A\nfrom m.b import B\nclass C(A, B):\n    pass\n"}
    assert mixed_attributes_written_twice(mixins) == {"C": {"seq": ["m.a", "m.b"]}}
    parts = {"m.p": "class P:\n    def __init__(self):\n        self.w = W(self)\n",
             "m.w": "class W:\n    def __init__(self, pool: P):\n        self.seq = 0\n",
             "m.x": "class X:\n    def __init__(self, pool: P):\n        self.pool = pool\n"
                    "    def f(self):\n        self.pool.w.seq = 2\n"}
    assert parts_written_from_elsewhere(parts, "P") == ["m.x:5: seq (owned by W in m.w)"]
    assert set(assembled_parts(parts, "P")) == {"P", "W", "X"}
