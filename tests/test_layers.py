"""Imports point down only: ``_dataset`` -> ``_ops/*`` (the transformations) -> ``_engine/recipe`` ->
``_engine/stage`` (the engine's base of every stage; ``_engine/source_protocol``, the public iterator protocol,
below it) -> ``_engine/context``, ``_engine/stage_support`` (docs/architecture.md).

Walks the AST of every module under ``src/headrace/_ops``, ``src/headrace/_engine`` and ``src/headrace/_files``
(imports anywhere in the module, function-local ones included) and fails if one imports the ``Dataset`` facade
or a layer above ``_ops``, or if the engine or the file layer imports a transformation; checks that the facade
imports the op modules at top level, not inside its methods (the old cycle's workaround), and nothing above it
(``headrace.io`` included: the readers subclass ``Dataset``); and that the folders stay small enough to read:
none over 40 modules, the transformations' folder free of the pool, its executors, worker processes and the
tuner.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

SRC = REPO / "src"
OPS = SRC / "headrace" / "_ops"
ENGINE = SRC / "headrace" / "_engine"
FILES = SRC / "headrace" / "_files"
ABOVE_OPS = ("headrace._dataset", "headrace._iterator", "headrace.io", "headrace.train", "headrace.torch",
             "headrace.cli", "headrace._cli", "headrace.convert", "headrace.distribute", "headrace.data",
             "headrace.demo", "headrace.image", "headrace.keras", "headrace.jax")


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(tree: ast.AST, module: str, is_package: bool = False) -> list[tuple[str, int]]:
    """Every module an AST imports, as absolute dotted names, with line numbers (``from a import b``
    gives ``a.b`` too, since ``b`` may be a submodule)."""
    package = module if is_package else module.rpartition(".")[0]
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base = ".".join(base_parts[:len(base_parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if node.module:  # ``from .. import x`` imports x, not the package's other modules
                out.append((target, node.lineno))
            out.extend((f"{target}.{alias.name}", node.lineno) for alias in node.names)
    return out


def _forbidden(name: str) -> bool:
    return name == "headrace" or any(name == up or name.startswith(up + ".") for up in ABOVE_OPS)


def test_the_import_resolver_sees_relative_absolute_and_local_imports():
    src = ("from .. import _dataset, _errors\nfrom ..io.files import glob\nimport headrace.train\n"
           "def f():\n    from .._iterator import Iterator\n")
    found = {name for name, _ in imported_modules(ast.parse(src), "headrace._ops.x")}
    assert {"headrace._dataset", "headrace.io.files", "headrace.train", "headrace._iterator"} <= found
    assert "headrace" not in found and not _forbidden("headrace._errors")
    assert all(_forbidden(n) for n in ("headrace._dataset", "headrace.io.files", "headrace.train"))
    assert not _forbidden("headrace._options") and not _forbidden("headrace._engine.stage_support")


@pytest.mark.parametrize("path", sorted([*OPS.glob("*.py"), *ENGINE.rglob("*.py"), *FILES.glob("*.py")]),
                         ids=lambda p: str(p.relative_to(SRC / "headrace")))
def test_ops_and_engine_modules_import_nothing_above_them(path):
    module = _module_name(path)
    tree = ast.parse(path.read_text(), str(path))
    bad = [f"line {line}: {name}" for name, line in imported_modules(tree, module, path.name == "__init__.py")
           if _forbidden(name)]
    assert not bad, f"{path.relative_to(REPO)} imports a layer above headrace._ops: {bad}"


def test_the_facade_imports_the_ops_at_top_level():
    path = SRC / "headrace" / "_dataset.py"
    tree = ast.parse(path.read_text(), str(path))
    local = [f"line {n.lineno}" for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
             for n in ast.walk(fn) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert not local, f"_dataset.py has function-local imports (a sign of an import cycle): {local}"
    top = {name for name, _ in imported_modules(tree, "headrace._dataset")}
    assert "headrace._ops.map" in top and "headrace._engine.recipe" in top


# ---- the whole tree: no cycles, nothing below the facade imports a layer above it -------------------------
PACKAGE = SRC / "headrace"
ABOVE_FACADE = ("headrace.io", "headrace.train", "headrace.convert", "headrace.compress", "headrace.cli",
                "headrace.torch", "headrace.data", "headrace.distribute", "headrace.demo", "headrace.image")
FACADE = ("headrace._dataset", "headrace._iterator")


def _without_type_checking(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            body = getattr(node, field, None)
            if isinstance(body, list):
                setattr(node, field, [n for n in body if not (isinstance(n, ast.If)
                                                              and "TYPE_CHECKING" in ast.unparse(n.test))])
    return tree


def import_graph() -> dict[str, set[str]]:
    """Module -> the headrace modules it imports (function-level imports included, ``TYPE_CHECKING``
    blocks not; importing ``a.b.c`` also imports the package ``a.b`` unless the importer is inside it)."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        tree = _without_type_checking(ast.parse(path.read_text(), str(path)))
        deps: set[str] = set()
        for target, _ in imported_modules(tree, name, path.name == "__init__.py"):
            while target and target not in paths:
                target = target.rpartition(".")[0]
            if not target or target == name:
                continue
            deps.add(target)
            while target.count(".") > 1:
                target = target.rpartition(".")[0]
                if not (name + ".").startswith(target + "."):
                    deps.add(target)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _within(name: str, layers: tuple[str, ...]) -> bool:
    return any(name == up or name.startswith(up + ".") for up in layers)


def test_the_graph_sees_function_level_imports_and_skips_type_checking():
    graph = import_graph()
    assert "headrace._engine.recipe" in graph["headrace._ops.map"]
    # only under TYPE_CHECKING there:
    assert "headrace._engine.stage_support" not in graph["headrace._engine.tuning.starting_values"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    cycles = _cycles(import_graph())
    assert not cycles, f"import cycles (function-level imports count): {cycles}"


def test_nothing_below_the_facade_imports_a_layer_above_it():
    bad = {}
    for name, deps in import_graph().items():
        top = name.split(".")[1] if name.count(".") else ""
        below = name.startswith("headrace._ops") or (top.startswith("_") and name not in FACADE)
        if below:
            up = sorted(d for d in deps if _within(d, ABOVE_FACADE + FACADE))
            if up:
                bad[name] = up
    assert not bad, f"modules below the Dataset facade import layers above it: {bad}"


def test_image_does_not_import_io():
    bad = {n: sorted(d for d in deps if _within(d, ("headrace.io",)))
           for n, deps in import_graph().items() if _within(n, ("headrace.image",))}
    assert not any(bad.values()), bad


def _facade_reaching_up(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    return {f: up for f in FACADE if (up := sorted(d for d in graph.get(f, ()) if _within(d, ABOVE_FACADE)))}


def test_the_facade_imports_nothing_above_it():
    """``list_files``' file system, ``save`` and ``load`` come from ``_files/`` and ``_ops/``, below the
    facade; the io readers subclass ``Dataset``, so the facade importing ``headrace.io`` would be a cycle of
    layers."""
    bad = _facade_reaching_up(import_graph())
    assert not bad, (f"the Dataset facade imports layers above it: {bad}; move what it needs below it "
                     "(headrace._files, headrace._ops) and re-export it from there")


def test_the_facade_rule_sees_the_facade_importing_io():
    graph = {"headrace._dataset": {"headrace.io", "headrace._ops.map"}, "headrace._iterator": {"headrace._files.fs"}}
    assert _facade_reaching_up(graph) == {"headrace._dataset": ["headrace.io"]}
    src = "from .io import files as _files\n"
    graph = {"headrace._dataset": {n for n, _ in imported_modules(ast.parse(src), "headrace._dataset")}}
    assert _facade_reaching_up(graph) == {"headrace._dataset": ["headrace.io", "headrace.io.files"]}


# ---- rooms a newcomer can read: the engine apart from the transformations, no folder too big to scan -------
MAX_MODULES_PER_FOLDER = 40
ENGINE_ONLY = ("pool", "proc", "process", "executor", "tuner", "tuning", "worker", "parallel", "knob")
"""Words of a module name that say it belongs to the engine (the worker pool, its executors and worker
processes, AUTOTUNE's tuner), never beside the transformations."""


def _engine_importing_ops(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """The engine's and the file layer's (``_files/``, which the ops use) imports of transformations."""
    return {name: sorted(d for d in deps if _within(d, ("headrace._ops",)))
            for name, deps in graph.items() if _within(name, ("headrace._engine", "headrace._files"))}


def test_the_engine_imports_no_transformation():
    graph = import_graph()
    assert any(_within(n, ("headrace._engine.pool",)) for n in graph), "the engine's pool is not where expected"
    bad = {n: d for n, d in _engine_importing_ops(graph).items() if d}
    assert not bad, (f"engine or file-layer modules import transformation modules (headrace._ops): {bad}; they "
                     "serve the transformations, so move what they share into headrace._engine")


def test_the_engine_rule_sees_an_engine_module_importing_an_op():
    graph = {"headrace._engine.stage": {"headrace._ops.map", "headrace._memory"}, "headrace._ops.map": set()}
    assert _engine_importing_ops(graph) == {"headrace._engine.stage": ["headrace._ops.map"]}


def _folders_over(root: Path, cap: int) -> dict[str, int]:
    counts = {str(d.relative_to(root.parent)): n for d in [root, *root.rglob("*")] if d.is_dir()
              and (n := len(list(d.glob("*.py")))) > cap}
    return counts


def test_no_folder_holds_more_than_40_modules():
    big = _folders_over(SRC / "headrace", MAX_MODULES_PER_FOLDER)
    assert not big, (f"folders of src/headrace with more than {MAX_MODULES_PER_FOLDER} modules: {big}; split them "
                     "into packages by what the modules are (as _engine/, _engine/pool/, _engine/tuning/)")


def test_the_folder_rule_counts_modules(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    for i in range(3):
        (tmp_path / "pkg" / "sub" / f"m{i}.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("")
    assert _folders_over(tmp_path / "pkg", 2) == {"pkg/sub": 3}
    assert _folders_over(tmp_path / "pkg", 3) == {}


def _engine_named(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.py") if any(w in p.stem for w in ENGINE_ONLY))


def test_the_transformations_folder_holds_no_pool_executor_worker_or_tuner_module():
    (map_py,) = list((SRC / "headrace").rglob("map.py"))
    assert not _engine_named(map_py.parent), (
        f"{map_py.parent.relative_to(SRC)} (the transformations) holds engine modules: "
        f"{_engine_named(map_py.parent)}; they belong in headrace/_engine/pool or headrace/_engine/tuning")
    assert _engine_named(ENGINE / "pool") and _engine_named(ENGINE / "tuning"), "the rule's words see nothing"
