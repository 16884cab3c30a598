"""The one place ``headrace.train`` imports PyTorch, with the error that names the extra to install."""

from __future__ import annotations

from types import ModuleType

from .._errors import MissingDependencyError


def import_torch() -> ModuleType:
    """``import torch``, or :class:`~headrace.MissingDependencyError` (an ``ImportError``) telling the user to
    ``pip install 'headrace[torch]'``."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised only without torch
        raise MissingDependencyError("headrace.train needs PyTorch: pip install 'headrace[torch]'") from exc
    return torch
