"""The ``headrace`` typer app and what every command shares: running a command's work, printing its
summary and JSON line, and turning user errors into one line on stderr."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import typer

from .._errors import HeadraceError

app = typer.Typer(name="headrace", add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Streaming input pipelines inside a memory budget: inspect and benchmark datasets, "
                       "train models, run the demo, convert datasets.")

_USER_ERRORS = (HeadraceError, ValueError, TypeError, OSError, ImportError, RuntimeError, KeyError)


def fail(message: str) -> None:
    """Print ``headrace: error: MESSAGE`` (its first line) on stderr and exit with status 1."""
    text = message.strip()
    typer.echo(f"headrace: error: {text.splitlines()[0] if text else 'failed'}", err=True)
    raise typer.Exit(1)


def run(work: Callable[[], dict[str, Any]], show: Callable[[dict[str, Any]], None] | None = None,
        emit_json: bool = True) -> None:
    """Run a command's work; print its summary and the JSON line, or a one-line error and exit 1."""
    try:
        result = work()
    except _USER_ERRORS as exc:
        message = str(exc).strip() or type(exc).__name__
        if isinstance(exc, KeyError):
            message = f"missing key {message}"
        fail(message)
    from ..distribute import process_info

    if not process_info().is_main:  # under torchrun only rank 0 reports
        return
    if show is not None:
        show(result)
    if emit_json:
        typer.echo(json.dumps(result, default=str))
