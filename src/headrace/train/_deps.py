"""The one place ``headrace.train`` imports PyTorch, with the error that names the extra to install."""

from __future__ import annotations

from types import ModuleType

from .._deps import require


def import_torch() -> ModuleType:
    """``import torch``, or :class:`~headrace.MissingDependencyError` (an ``ImportError``) telling the user to
    ``pip install 'headrace[torch]'``."""
    return require("torch", "headrace.train")
