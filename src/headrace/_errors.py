"""The one exception tree of headrace.

::

    Exception
    └── HeadraceError
        ├── MemoryBudgetError (also MemoryError)  an element or buffer cannot fit the memory budget
        ├── DataLossError     (also OSError)      a record failed its CRC or was truncated
        ├── ImageDecodeError  (also ValueError)   bytes that are not a decodable image
        └── StateError        (also ValueError)   get_state / set_state mismatch or bad checkpoint

Argument validation raises the built-in ``ValueError`` / ``TypeError`` with a message that names the
offending value, the allowed range and the fix. Exceptions raised by user functions are re-raised
unchanged, with a note (``e.add_note``) naming the stage and element index where they happened.
"""

from __future__ import annotations


class HeadraceError(Exception):
    """Base class of every error headrace raises on its own account."""


class MemoryBudgetError(HeadraceError, MemoryError):
    """An element, batch or buffer is larger than the pipeline's whole memory budget.

    The message names the stage, the size in bytes and the budget, and how to fix it.
    """


class DataLossError(HeadraceError, OSError):
    """A record is corrupt (CRC mismatch) or truncated. Names the file and the byte offset."""

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None,
                 reason: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset
        self.reason = reason


class ImageDecodeError(HeadraceError, ValueError):
    """Bytes that could not be decoded as an image; names the file or record when known."""


class StateError(HeadraceError, ValueError):
    """An iterator state that does not match the pipeline it is restored into."""


class MemoryBudgetWarning(UserWarning):
    """A configured buffer was shrunk to fit the memory budget (issued once per stage)."""


__all__ = [
    "DataLossError",
    "HeadraceError",
    "ImageDecodeError",
    "MemoryBudgetError",
    "MemoryBudgetWarning",
    "StateError",
]
