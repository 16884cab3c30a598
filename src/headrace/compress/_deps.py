"""Optional libraries of ``headrace.compress``, imported on use with an error that names the extra."""

from __future__ import annotations

from types import ModuleType

from .._deps import require as _require

INSTALL_HINT = "pip install 'headrace[compress]'"


def require(module: str, purpose: str) -> ModuleType:
    """:func:`headrace._deps.require`: the module, or :class:`~headrace.MissingDependencyError` (an
    ``ImportError``) naming ``purpose`` and the extra to install."""
    return _require(module, purpose, "compress")


__all__ = ["INSTALL_HINT", "require"]
