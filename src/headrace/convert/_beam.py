"""Lazy import of Apache Beam, with an error that names the extra to install, and Beam's output kept out of
the terminal."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
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


@contextlib.contextmanager
def beam_output(verbose: bool) -> Iterator[None]:
    """Apache Beam's log lines and its worker processes' output go to a temporary file instead of the
    terminal (unless ``verbose``): deleted after a successful run; after a failed one the error's note
    names it (the one-line error already carries the reason), unless it is empty (an argument error found
    before Beam started), when it is deleted too."""
    if verbose:
        yield
        return
    fd, path = tempfile.mkstemp(prefix="headrace-convert-", suffix=".log")
    beam = logging.getLogger("apache_beam")
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
    propagate = beam.propagate
    beam.addHandler(handler)
    beam.propagate = False
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(fd, 2)  # worker processes write to the descriptor they inherit
    failed: Exception | None = None
    try:
        yield
    except Exception as exc:
        failed = exc
        raise
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)
        beam.removeHandler(handler)
        handler.close()
        beam.propagate = propagate
        if failed is not None and os.path.getsize(path):
            failed.add_note(f"Apache Beam's log: {path}")
        else:  # a success, or a failure before Beam wrote anything (an argument error): nothing to point at
            os.unlink(path)
