"""The ``headrace`` typer app and what every command shares.

- :func:`run` runs a command's work and prints its summary lines and its JSON line. A
  :class:`~headrace.HeadraceError`, an ``OSError`` (a missing file, a full disk) or a ``ValueError`` (how
  headrace rejects a value) becomes one line on stderr, ``headrace: error: ...``, exit status 1, with the
  Python parameter names in it replaced by the command's flags (``global_batch_size=0`` ->
  ``--global-batch-size 0``). Anything else is a bug in headrace and keeps its traceback. Ctrl-C ends with
  one line and status 130; a ``KeyboardInterrupt`` with a ``signum`` (``headrace train``'s SIGTERM,
  :mod:`headrace.train.interrupt`) with status 128 + that number (143 for SIGTERM).
  Warnings print as one line each, ``headrace: warning: ...``.
- Usage errors (a value the flag's type or range refuses, an unknown flag, a missing argument) are one
  line too, naming the flag, with click's exit status 2; extra arguments get the hint to quote a glob
  pattern (an unquoted one reaches the command as many paths).
- ``headrace --version``; ``-h`` is ``--help`` everywhere.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import typer
from typer.core import TyperGroup

from .._errors import HeadraceError

ONE_LINE_ERRORS = (HeadraceError, OSError, ValueError)
"""What :func:`run` prints as one line: headrace's own errors, the environment's, rejected values."""

USAGE_STATUS = 2
"""Exit status of a usage error (click's)."""

GLOB_HINT = ("a glob pattern must be quoted, e.g. 'data/*.tfrecord', so that headrace expands it and not the "
             "shell (or give the directory)")
"""Added to click's "unexpected extra argument(s)": the shell expanded an unquoted pattern."""

INTERRUPTED_STATUS = 130
"""Exit status after Ctrl-C (128 + SIGINT, as shells report it)."""


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text or "failed"


class _Group(TyperGroup):
    """typer's group, with click's usage errors (bad flag values, unknown flags, missing arguments) printed
    as one line, ``headrace: error: ...``, instead of a usage block."""

    def main(self, args: Any = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False,
                              **extra)
        except typer.TyperException as exc:  # click's ClickException: UsageError, BadParameter, ...
            if not standalone_mode:
                raise
            message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            message = message.replace("Value error, ", "")  # pydantic's prefix on a parser's message
            if "unexpected extra argument" in message:
                message += f"; {GLOB_HINT}"
            ctx = getattr(exc, "ctx", None)
            hint = f" (see {ctx.command_path} --help)" if ctx is not None and getattr(exc, "exit_code", 1) == 2 \
                else ""
            typer.echo(f"headrace: error: {_one_line(message)}{hint}", err=True)
            sys.exit(getattr(exc, "exit_code", USAGE_STATUS))
        except typer.Abort:
            if not standalone_mode:
                raise
            typer.echo("headrace: interrupted", err=True)
            sys.exit(INTERRUPTED_STATUS)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"headrace {__version__}")
        raise typer.Exit()


app = typer.Typer(name="headrace", cls=_Group, add_completion=False, no_args_is_help=True,
                  pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Streaming input pipelines inside a memory budget: inspect and benchmark datasets, "
                       "train models, run the demo, convert datasets.")


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print headrace's version and exit.")) -> None:
    """Streaming input pipelines inside a memory budget: inspect and benchmark datasets, train models, run
    the demo, convert datasets (headrace COMMAND --help)."""


def flags_of(ctx: typer.Context, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{python parameter name: flag}`` for the command being run (its options, ``--long`` spelling),
    plus ``extra`` (library parameter names that differ from the command's, e.g. ``learning_rate``)."""
    out: dict[str, str] = {}
    for p in ctx.command.params:
        longs = [o for o in getattr(p, "opts", []) if o.startswith("--")]
        if p.name and longs and getattr(p, "param_type_name", "") == "option":
            out[p.name] = longs[0]
    out.update(extra or {})
    return out


def given_flags(ctx: typer.Context, *names: str) -> list[str]:
    """The flags of ``names`` (python parameter names) the user gave (command line or environment), not defaults."""
    flags = flags_of(ctx)
    sources = {n: ctx.get_parameter_source(n) for n in names}
    return [flags[n] for n, src in sources.items() if src is not None and src.name != "DEFAULT"]


def translate(message: str, flags: Mapping[str, str]) -> str:
    """``message`` with the Python parameter names in it replaced by their flags.

    ``Options(name=...)`` and ``name=True`` -> ``--flag``; ``name=value`` and ``name='word'`` -> ``--flag
    value`` / ``--flag word``; a bare ``snake_case`` name -> ``--flag`` (bare one-word names are left alone:
    they are ordinary words too). ``--flag (--flag)``, left where a message named both, collapses to
    ``--flag``.
    """
    for name, flag in sorted(flags.items(), key=lambda kv: -len(kv[0])):
        edge = rf"(?<![\w.\-]){re.escape(name)}"
        message = re.sub(rf"\b\w+\(\s*{re.escape(name)}=\.\.\.\s*\)", flag, message)  # Options(name=...)
        message = re.sub(edge + r"='([\w.\-]+)'", rf"{flag} \1", message)  # name='skip' -> --flag skip
        message = re.sub(edge + r"=True\b", flag, message)
        message = re.sub(edge + r"=(?=[^\s,;)])", flag + " ", message)
        message = re.sub(edge + "=", flag, message)
        if "_" in name:
            message = re.sub(edge + r"(?![\w=])", flag, message)
    return re.sub(r"(--[\w-]+)( [^\s()]+)? \(\1( [^\s()]+)?\)", r"\1\2", message)


@contextlib.contextmanager
def _one_line_warnings(flags: Mapping[str, str]) -> Iterator[None]:
    """Warnings as one line each, flags named; each warning once per command (a pipeline says each of its
    warnings once however many epochs it runs, :mod:`headrace._warn`; the same text is not repeated)."""
    seen: set[tuple[type[Warning], str]] = set()

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        text = str(message).removeprefix("headrace: ")
        if (category, text) in seen:
            return
        seen.add((category, text))
        typer.echo(f"headrace: warning: {_one_line(translate(text, flags))}", err=True)

    with warnings.catch_warnings():
        # every command starts afresh: Python's once-per-location registry must not hide a warning an earlier
        # command in this process printed (the CLI run in-process, e.g. by tests); `seen` dedups per command
        warnings.simplefilter("always", UserWarning)
        warnings.showwarning = show
        yield


def fail(message: str, flags: Mapping[str, str] | None = None) -> None:
    """Print ``headrace: error: MESSAGE`` (on one line, flags named) on stderr and exit with status 1."""
    typer.echo(f"headrace: error: {_one_line(translate(message, flags or {}))}", err=True)
    raise typer.Exit(1)


def run(ctx: typer.Context, work: Callable[[], dict[str, Any]],
        show: Callable[[dict[str, Any]], None] | None = None, emit_json: bool = True,
        extra_flags: Mapping[str, str] | None = None,
        interrupted: Callable[[KeyboardInterrupt], str] | None = None) -> None:
    """Run a command's work; print its summary and the JSON line, or a one-line error (module docstring).

    ``extra_flags``: library parameter names -> flags, for :func:`translate`; ``interrupted``: the line to
    print after Ctrl-C or SIGTERM (default ``interrupted``).
    """
    flags = flags_of(ctx, extra_flags)
    with _one_line_warnings(flags):
        try:
            result = work()
        except ONE_LINE_ERRORS as exc:
            notes = "".join(f" ({note})" for note in getattr(exc, "__notes__", ()))
            fail((str(exc) or type(exc).__name__) + notes, flags)
        except KeyboardInterrupt as exc:
            typer.echo(f"headrace: {interrupted(exc) if interrupted else 'interrupted'}", err=True)
            raise typer.Exit(128 + getattr(exc, "signum", signal.SIGINT)) from None
    from ..distribute import process_info

    if not process_info().is_main:  # under torchrun only rank 0 reports
        return
    if show is not None:
        show(result)
    if emit_json:
        typer.echo(json.dumps(result, default=str))
