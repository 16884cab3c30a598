"""Lazy import of Apache Beam, with an error that names the extra to install."""

from __future__ import annotations

import logging
from typing import Any

from .._deps import install_hint, require

INSTALL_HINT = install_hint("apache_beam")


def _not_gcp_noise(record: logging.LogRecord) -> bool:
    # Beam warns at import that its optional Google Cloud clients are missing; they are not used here.
    return not str(record.msg).startswith("apitools not found")


def import_beam() -> Any:
    """``apache_beam``, or :class:`~headrace.MissingDependencyError` (an ``ImportError``) telling how to
    install it."""
    root = logging.getLogger()
    root.addFilter(_not_gcp_noise)
    try:
        return require("apache_beam", "headrace.convert (it runs on Apache Beam)")
    finally:
        root.removeFilter(_not_gcp_noise)
