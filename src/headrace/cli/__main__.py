"""``python -m headrace.cli ...``: the ``headrace`` command line (used under ``torchrun``)."""

from headrace.cli import main

main()
