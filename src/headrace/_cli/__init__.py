"""The work behind the ``headrace`` commands (``headrace.cli`` only parses arguments and prints)."""
