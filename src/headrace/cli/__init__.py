"""The ``headrace`` command: ``inspect``, ``bench``, ``train``, ``demo``, ``convert`` and ``compress``
(``headrace COMMAND --help``).

One module per command (``headrace.cli.inspect_cmd``, ``.bench``, ``.train``, ``.demo``, ``.convert``,
``.compress``; no module here is named like a standard library one, since running this directory's
``__main__.py`` as a file puts the directory first on ``sys.path``), each
with its ``command`` function (the typer signature: flags and help) and the work behind it; ``_app``
holds the typer app and what the commands share. ``python -m headrace.cli`` runs the same command line
as the ``headrace`` console script (``headrace.cli:main``).

Every command prints human-readable lines and ends with one JSON line of its results (under torchrun,
only rank 0 does). Errors a user can fix (a bad path, an empty dataset, an unknown model, a bad size)
print one line, ``headrace: error: ...``, on stderr and exit with status 1, without a traceback.
"""

from __future__ import annotations

import sys

from . import bench, compress, convert, demo, inspect_cmd, train
from ._app import app

for _module in (inspect_cmd, bench, train, demo, convert, compress):  # the order --help lists them in
    app.command(name=_module.__name__.rsplit(".", 1)[-1].removesuffix("_cmd"))(_module.command)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``headrace`` console script."""
    app(args=argv if argv is not None else sys.argv[1:], prog_name="headrace")


__all__ = ["app", "main"]
