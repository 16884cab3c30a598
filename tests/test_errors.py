"""The one exception tree: every error headrace raises on its own account is a HeadraceError and also the
built-in class callers catch (documented in headrace._errors)."""

from __future__ import annotations

import pytest

import headrace as hr
from headrace import _errors


@pytest.mark.parametrize(("cls", "builtin"), [
    (hr.MemoryBudgetError, MemoryError), (hr.DataLossError, OSError), (hr.ImageDecodeError, ValueError),
    (hr.StateError, ValueError), (hr.MissingDependencyError, ImportError), (hr.ManifestError, ValueError),
    (hr.ConvertError, RuntimeError), (hr.SchemaConflictError, ValueError),
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
    Cancelled, which never reaches users, and KeyboardInterrupt's TrainingInterrupted)."""
    import importlib
    import pkgutil

    outside = []
    for info in pkgutil.walk_packages(hr.__path__, "headrace."):
        if info.name.startswith(("headrace.torch", "headrace.train", "headrace.cli.__main__")):
            continue  # need torch / run the command line; checked below
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == info.name \
                    and not issubclass(value, (hr.HeadraceError, Warning)) and value.__name__ != "Cancelled":
                outside.append(f"{info.name}.{value.__name__}")
    assert outside == []
    from headrace.train.interrupt import TrainingInterrupted

    assert issubclass(TrainingInterrupted, KeyboardInterrupt)  # Ctrl-C stays a KeyboardInterrupt
