"""The one exception tree: every error headrace raises on its own account is a HeadraceError and also the
built-in class callers catch (documented in headrace._errors)."""

from __future__ import annotations

import ast

import pytest

import headrace as hr
from headrace import _errors


@pytest.mark.parametrize(("cls", "builtin"), [
    (hr.MemoryBudgetError, MemoryError), (hr.DataLossError, OSError), (hr.ImageDecodeError, ValueError),
    (hr.StateError, ValueError), (hr.MissingDependencyError, ImportError), (hr.ManifestError, ValueError),
    (hr.ConvertError, RuntimeError), (hr.SchemaConflictError, ValueError), (hr.WorkerError, RuntimeError),
    (hr.SharedMemoryError, OSError), (hr.StaleIndexError, ValueError), (hr.RecordParseError, ValueError),
])
def test_every_error_is_a_headrace_error_and_its_builtin(cls: type, builtin: type) -> None:
    assert issubclass(cls, hr.HeadraceError) and issubclass(cls, builtin)
    assert cls.__name__ in _errors.__doc__  # the tree in the docstring names it
    assert cls.__name__ in _errors.__all__


def test_convert_errors_are_the_tree_s() -> None:
    from headrace import convert

    assert convert.ConvertError is hr.ConvertError and convert.ManifestError is hr.ManifestError
    assert issubclass(hr.SchemaConflictError, hr.ConvertError)


def test_no_exception_class_outside_the_tree() -> None:
    """Every exception class defined in headrace's modules is in the tree (except the engine's private
    Cancelled and private control-flow classes (``_Stop``: early stopping, caught where it is raised), which
    never reach users, and KeyboardInterrupt's TrainingInterrupted)."""
    import importlib
    import pkgutil

    outside = []
    for info in pkgutil.walk_packages(hr.__path__, "headrace."):
        if info.name.startswith(("headrace.torch", "headrace.train", "headrace.cli.__main__", "headrace.keras")):
            continue  # need torch / run the command line / a Keras backend chosen before import; checked below
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == info.name \
                    and not issubclass(value, (hr.HeadraceError, Warning)) and value.__name__ != "Cancelled" \
                    and not value.__name__.startswith("_"):
                outside.append(f"{info.name}.{value.__name__}")
    assert outside == []
    from headrace.train.interrupt import TrainingInterrupted

    assert issubclass(TrainingInterrupted, KeyboardInterrupt)  # Ctrl-C stays a KeyboardInterrupt


# (blocked module, code that needs it, the extra the error must name): a fresh interpreter each, with the module
# made unimportable (sys.modules[name] = None) before headrace is imported
BLOCKED = [
    ("h5py", "from headrace.io import HDF5Dataset; HDF5Dataset('data.h5', 'x')", "hdf5"),
    ("pyarrow", "from headrace.io import ParquetDataset; ParquetDataset('data.parquet')", "parquet"),
    ("torch", "import headrace.torch", "torch"),
    ("torch", "from headrace.train._deps import import_torch; import_torch()", "torch"),
    ("simplejpeg", "import headrace.image as im; im.decode(b'\\xff\\xd8\\xff' + bytes(64))", "image"),
    ("cv2", "import numpy as np, headrace.image as im; im.resize(np.zeros((4, 4, 3), np.uint8), (2, 2))", "image"),
    ("PIL", "import headrace.image as im; im._decode_pillow(b'GIF89a', 3)", "image"),
    ("apache_beam", "from headrace.convert._beam import import_beam; import_beam()", "beam"),
    ("onnxruntime", "from headrace.compress._deps import require; require('onnxruntime.quantization', 'x')",
     "compress"),
    ("matplotlib", "from headrace.compress.report import plot; plot('p.png', [], 1)", "compress"),
    ("pyarrow", "from headrace.cli.inspect_cmd import inspect_path; inspect_path('t.parquet')", "parquet"),
    ("s3fs", "from headrace.io import files; files.file_size('s3://bucket/train.tfrecord')", "s3"),
    ("s3fs", "from headrace.io import files; files.open_file('s3://bucket/train.tfrecord')", "s3"),
    ("keras", "import headrace.keras", "keras"),
    ("jax", "import headrace.jax", "jax"),
]


@pytest.mark.parametrize(("module", "code", "extra"), BLOCKED, ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(BLOCKED)])
def test_a_missing_extra_raises_missing_dependency_error_naming_it(module: str, code: str, extra: str,
                                                                   tmp_path) -> None:
    import subprocess
    import sys

    (tmp_path / "t.parquet").write_bytes(b"PAR1")
    script = (f"import sys\nsys.modules[{module!r}] = None\nimport headrace as hr\ntry:\n"
              + "".join(f"    {line}\n" for line in code.split("; "))
              + "except hr.MissingDependencyError as e:\n"
                "    assert isinstance(e, ImportError)\n"
                "    print('MISSING', e.name, e.extra, '|', e)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith(f"MISSING {module} {extra} | ") and f"pip install 'headrace[{extra}]'" in line, line


def test_every_optional_module_names_an_extra_of_pyproject() -> None:
    import tomllib
    from pathlib import Path

    from headrace._deps import EXTRAS

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    assert {extra for extra, _ in EXTRAS.values()} <= set(extras)


# imports of an optional package that may stay plain: submodules of a package that the module's caller has
# already imported through headrace._deps.require (torch for headrace.train / compress, Beam for convert)
_PLAIN_SUBMODULE_IMPORTS = {
    ("convert/_pipeline.py", "apache_beam"), ("convert/_pipeline.py", "apache_beam.transforms.window"),
    ("convert/_pipeline.py", "apache_beam.utils.timestamp"),
    ("convert/_pipeline.py", "apache_beam.utils.windowed_value"),
    ("train/loop.py", "torch.nn.parallel"), ("compress/model.py", "torch._inductor.config"),
    ("compress/measure.py", "torch.utils.flop_counter"), ("compress/pruning.py", "torch.nn.utils"),
    ("service/_watch.py", "ray._private"),  # (ray itself came through require; its actor table)
}


def _typing_only(tree: ast.AST) -> set[int]:
    """The nodes inside ``if TYPE_CHECKING:`` bodies (never run: imports there are for the type checker)."""
    return {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for stmt in node.body for n in ast.walk(stmt)}


def test_optional_dependencies_are_imported_through_require() -> None:
    """Every optional-dependency import in headrace goes through headrace._deps.require (the one place that
    turns a missing module into MissingDependencyError naming the extra); an import under ``TYPE_CHECKING`` (for
    the type checker, never run) is not one."""
    from pathlib import Path

    from headrace._deps import EXTRAS

    src = Path(hr.__file__).parent
    plain = set()
    for path in src.rglob("*.py"):
        tree = ast.parse(path.read_text())
        typing_only = _typing_only(tree)
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            plain |= {(path.relative_to(src).as_posix(), n) for n in names if n.partition(".")[0] in EXTRAS}
    assert plain - _PLAIN_SUBMODULE_IMPORTS == set()


def test_the_require_rule_skips_only_type_checking_bodies():
    tree = ast.parse("if TYPE_CHECKING:\n    import torch\nelse:\n    import h5py\nimport PIL\n")
    skipped = _typing_only(tree)
    seen = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) and id(n) not in skipped for a in n.names]
    assert sorted(seen) == ["PIL", "h5py"]
