"""Lazy import of Apache Beam, with an error that names the extra to install."""

from __future__ import annotations

from typing import Any

INSTALL_HINT = "pip install 'headrace[beam]'"


def import_beam() -> Any:
    """``apache_beam``, or ``ImportError`` telling how to install it."""
    try:
        import apache_beam
    except ImportError as e:
        raise ImportError(f"headrace.convert runs on Apache Beam, which is not installed ({e}); install it with: "
                          f"{INSTALL_HINT}") from e
    return apache_beam
