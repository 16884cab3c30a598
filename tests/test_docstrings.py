"""Public docstrings in one form (summary, example, Args, Returns, Raises): every public method of ``Dataset``
and every public callable of ``headrace.io`` (with ``io.example`` and ``io.files``), ``headrace.image``,
``headrace.torch``, ``headrace.keras``, ``headrace.jax`` and ``headrace.lightning`` has a docstring with an
example, an ``Args:`` section naming each argument (besides ``self``) and a ``Returns:`` section where it
returns something; their classes' public methods have the sections. Read from the source (AST): fast, and
nothing is imported."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

SRC = REPO / "src" / "headrace"
EXAMPLE_MARKS = (">>> ", "Example::", "```")  # doctest lines, a reST literal block, a fenced snippet
# Methods a framework defines and documents (Keras's DataAdapter interface); callback hooks ``on_*`` likewise.
FRAMEWORK_METHODS = {"keras.KerasDataset": {"num_batches", "batch_size", "has_partial_batch", "partial_batch_size",
                                            "get_numpy_iterator", "get_jax_iterator", "get_torch_dataloader",
                                            "get_tf_dataset"}}
# Public classes that users get from a function and never construct: their docstring names that function instead
# of documenting the constructor's internal arguments.
MADE_BY = {"torch.TorchEpochIterator": "TorchIterableDataset", "keras.KerasDataset": "adapt",
           "jax.JaxIterator": "to_jax"}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _dunder_all(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def _io_names() -> dict[str, Path]:
    """``headrace.io``'s lazy names (its ``_NAMES`` table) mapped to their modules."""
    for node in _tree(SRC / "io" / "__init__.py").body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_NAMES" for t in node.targets):
            return {k: SRC / "io" / f"{v}.py" for k, v in ast.literal_eval(node.value).items()}
    raise AssertionError("headrace.io has no _NAMES table: the test's reading of it is out of date")


def _public_callables() -> dict[str, ast.FunctionDef | ast.ClassDef]:
    """``qualified name -> definition`` of every callable the test covers."""
    found: dict[str, ast.FunctionDef | ast.ClassDef] = {}
    (dataset,) = [n for n in _tree(SRC / "_dataset.py").body if isinstance(n, ast.ClassDef) and n.name == "Dataset"]
    for node in dataset.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            found[f"Dataset.{node.name}"] = node
    sources = {f"io.{name}": (path, name) for name, path in _io_names().items()}
    for module, path in (("image", SRC / "image" / "__init__.py"), ("torch", SRC / "torch.py"),
                         ("keras", SRC / "keras.py"), ("jax", SRC / "jax.py"), ("lightning", SRC / "lightning.py")):
        sources.update({f"{module}.{name}": (path, name) for name in _dunder_all(_tree(path))})
    example, files = SRC / "io" / "example.py", SRC / "io" / "files.py"
    sources.update({f"io.example.{name}": (example, name) for name in _dunder_all(_tree(example))})
    sources.update({f"io.files.{name}": (files, name) for name in _dunder_all(_tree(files))})  # (re-exported)
    for qualified, (path, name) in sources.items():
        node = _definition(path, name)
        if node is not None:  # constants (IMAGE_EXTENSIONS, READ_AHEAD_LIMIT) are not callables
            found[qualified] = node
    return found


def _definition(path: Path, name: str) -> ast.FunctionDef | ast.ClassDef | None:
    """The top-level ``def`` / ``class`` of ``name`` in ``path``, following relative imports of it
    (``from .x import name``, ``from .._files.fs import name``: a re-export)."""
    tree = _tree(path)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            return node
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level >= 1 and node.module and any(
                a.name == name and a.asname is None for a in node.names):
            base = path.parents[node.level - 1]
            return _definition(base / f"{node.module.replace('.', '/')}.py", name)
    return None


def _public_methods() -> dict[str, ast.FunctionDef]:
    """``qualified name -> definition`` of the public methods of the covered classes (``Dataset``'s are covered
    callables themselves), less the hooks a framework defines and documents (Keras's ``DataAdapter`` methods and
    callback ``on_*`` hooks, Lightning's)."""
    return {f"{name}.{m.name}": m for name, node in _public_callables().items()
            if isinstance(node, ast.ClassDef) and not name.startswith("Dataset.")
            for m in node.body if isinstance(m, ast.FunctionDef) and not m.name.startswith("_")
            and not m.name.startswith("on_") and m.name not in FRAMEWORK_METHODS.get(name, ())}


def _is_property(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)


def _takes_arguments(fn: ast.FunctionDef) -> bool:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs] + [x.arg for x in (a.vararg, a.kwarg) if x]
    return bool([n for n in names if n not in ("self", "cls")])


def _returns_something(fn: ast.FunctionDef) -> bool:
    r = fn.returns
    return r is not None and not (isinstance(r, ast.Constant) and r.value is None)


def _parameters(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names += [f"*{a.vararg.arg}"] if a.vararg else []
    names += [f"**{a.kwarg.arg}"] if a.kwarg else []
    return [n for n in names if n not in ("self", "cls")]


def _args_named(doc: str) -> set[str]:
    """The names an ``Args:`` section documents: its entries ``name: ...`` or ``a, b, c: ...`` (as Keras's)."""
    section = re.search(r"^Args:\n((?:[ \t]+.*\n?|\n)*)", doc, re.M)
    entries = re.findall(r"^    (\*{0,2}\w+(?:, \*{0,2}\w+)*):", section.group(1), re.M) if section else []
    return {name for entry in entries for name in entry.split(", ")}


def _missing(node: ast.FunctionDef | ast.ClassDef, made_by: str | None = None) -> list[str]:
    doc = ast.get_docstring(node) or ""
    if not doc:
        return ["docstring"]
    example = [] if any(mark in doc for mark in EXAMPLE_MARKS) else ["an example"]
    if made_by is not None:
        return example + ([] if made_by in doc else [f"the name of {made_by}, which makes it"])
    gaps = example
    fn: ast.FunctionDef | None = node if isinstance(node, ast.FunctionDef) else None
    if isinstance(node, ast.ClassDef):  # the constructor's arguments, in the class or __init__ docstring
        init = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
        fn = init[0] if init else None
        doc += "\n" + ((ast.get_docstring(fn) or "") if fn else "")
    if fn is not None and _parameters(fn):
        if "\nArgs:" not in "\n" + doc:
            gaps.append("Args:")
        else:
            gaps += [f"Args: {p}" for p in _parameters(fn) if p.lstrip("*") not in _args_named(doc)
                     and p not in _args_named(doc)]
    if isinstance(node, ast.FunctionDef) and _returns_something(node) and "\nReturns:" not in "\n" + doc:
        gaps.append("Returns:")
    return gaps


def test_the_scan_finds_the_public_api():
    names = _public_callables()
    assert len([n for n in names if n.startswith("Dataset.")]) >= 45, sorted(names)
    for name in ("Dataset.map", "Dataset.pack", "io.TFRecordDataset", "io.make_csv_dataset", "image.decode",
                 "torch.to_torch", "keras.adapt", "jax.to_jax", "lightning.ExactlyOnce",
                 "io.FixedLenFeature", "io.example.encode", "image.image_format", "io.files.glob",
                 "io.TFRecordWriter", "io.TFRecordOptions"):
        assert name in names, name


def test_every_public_callable_has_args_and_returns_sections():
    gaps = {name: m for name, node in _public_callables().items()
            if (m := _missing(node, MADE_BY.get(name)))}
    assert not gaps, f"public docstrings lacking sections (summary, example, Args, Returns, Raises): {gaps}"


def test_the_public_methods_of_those_classes_have_args_and_returns_sections():
    methods = _public_methods()
    assert {"torch.TorchIterableDataset.load_state_dict", "jax.JaxIterator.get_state",
            "io.TFRecordWriter.write"} <= set(methods), sorted(methods)
    gaps = {name: m for name, fn in methods.items()
            if (m := (["docstring"] if not ast.get_docstring(fn) else [] if _is_property(fn)
                      else [g for g in _missing(fn) if g != "an example"]))}
    assert not gaps, f"public methods' docstrings lacking sections (Args, Returns, Raises): {gaps}"


def test_the_check_sees_a_missing_section():
    (fn,) = ast.parse('def f(x: int) -> int:\n    """Summary.\n\n    >>> f(1)\n\n    Returns:\n        x.\n    """\n'
                      ).body
    assert _missing(fn) == ["Args:"]
    (fn,) = ast.parse('def f(x, *ys, z=1):\n    """S.\n\n    >>> f(1)\n\n    Args:\n        x, *ys: one.\n    """\n'
                      ).body
    assert _missing(fn) == ["Args: z"]
    (fn,) = ast.parse('def f(self) -> None:\n    """Summary."""\n').body
    assert _missing(fn) == ["an example"]
    (cls,) = ast.parse('class C:\n    """Made by g().\n\n    >>> g()\n    """\n    def __init__(self, x): ...\n').body
    assert _missing(cls) == ["Args:"]
    assert _missing(cls, "g") == [] and _missing(cls, "h") == ["the name of h, which makes it"]
