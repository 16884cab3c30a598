"""The one exception tree of headrace: everything headrace raises on its own account is a
``HeadraceError``, each also an instance of the built-in class that code written for tf.data or the
standard library would catch (the second base).

::

    Exception
    └── HeadraceError
        ├── MemoryBudgetError      (also MemoryError)   an element or buffer cannot fit the memory budget
        ├── DataLossError          (also OSError)       a record failed its CRC or was truncated
        ├── ImageDecodeError       (also ValueError)    bytes that are not a decodable image
        ├── RecordParseError       (also ValueError)    a text record (a CSV row) that does not parse
        ├── StateError             (also ValueError)    get_state / set_state mismatch or bad checkpoint
        ├── StaleIndexError        (also ValueError)    a TFRecord ``.idx`` index that does not match its
        │                                               file (stale) or is not an index; names both files
        ├── IteratorClosedError    (also RuntimeError)  next() / get_state() on an iterator after close()
        ├── TooManyErrorsError     (also RuntimeError)  ignore_errors(max_drop_ratio=...) dropped too many
        ├── InternalTimeoutError   (also RuntimeError)  an internal lock held too long (a leaked lock)
        ├── MissingDependencyError (also ImportError)   an optional extra is not installed; names the
        │                                               ``pip install 'headrace[...]'`` to run
        ├── ManifestError          (also ValueError)    a ``headrace convert`` manifest that is missing,
        │                                               unreadable, or does not match its shards
        ├── ConvertError           (also RuntimeError)  a conversion that cannot finish (too many rejected
        │   │                                           rows, no records, an inconsistent result)
        │   └── SchemaConflictError (also ValueError)   a feature holding strings in some rows and
        │                                               numbers in others
        ├── ExportError            (also ValueError)    ``headrace.compress`` could not export a model to
        │                                               ONNX / torch.export (names the layer)
        ├── WorkerError            (also RuntimeError)  a map worker process died (signal, exit status)
        ├── SharedMemoryError      (also OSError)       /dev/shm too small for the process executor
        └── RemoteTraceback                             the ``__cause__`` of an exception raised in a map
                                                        worker process: the worker's traceback

Warnings: ``MemoryBudgetWarning`` (a buffer shrunk to fit the budget), ``IgnoredErrorsWarning``
(``ignore_errors()`` dropped elements: counts and the first error) and
:class:`headrace.io.CorruptRecordWarning` (a corrupt record skipped), all ``UserWarning``.

Argument validation raises the built-in ``ValueError`` / ``TypeError`` with a message that names the
offending value, the allowed range and the fix. Exceptions raised by user functions are re-raised
unchanged, with a note (``e.add_note``) naming the stage and element index where they happened; from a
worker process they come back as the same type, with the worker's traceback as ``__cause__``
(:class:`RemoteTraceback`).

The ``headrace`` command line (:mod:`headrace.cli`) prints a ``HeadraceError``, an ``OSError`` (a bad path,
a full disk) or a ``ValueError`` (a rejected value) as one line, ``headrace: error: ...``, with the
Python parameter names in it replaced by the command's flags; anything else is a bug in headrace and
keeps its traceback.
"""

from __future__ import annotations


class HeadraceError(Exception):
    """Base class of every error headrace raises on its own account."""


class MemoryBudgetError(HeadraceError, MemoryError):
    """An element, batch or buffer is larger than the pipeline's whole memory budget.

    The message names the stage, the size in bytes and the budget, and how to fix it.
    """


class DataLossError(HeadraceError, OSError):
    """A record is corrupt (CRC mismatch) or truncated. Names the file and the byte offset.

    ``lost_elements`` (an int >= 1, default 1) is how many elements the damage cost: a source that loses
    several at once (a Parquet row group, the tail of a TFRecord file after a bad length field) says so,
    and ``ignore_errors()`` counts that many as dropped (its warning and ``max_drop_ratio``).
    ``lost_estimated`` is True where that number is an estimate (a TFRecord tail: the bytes left over the
    mean record size read so far). Any exception may carry a ``lost_elements`` attribute the same way.
    """

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None,
                 reason: str | None = None, lost_elements: int = 1, lost_estimated: bool = False) -> None:
        super().__init__(message)
        if isinstance(lost_elements, bool) or not isinstance(lost_elements, int) or lost_elements < 1:
            raise ValueError(f"DataLossError(lost_elements={lost_elements!r}): must be an int >= 1 (the "
                             "elements the damage cost; 1 for a single record)")
        self.path = path
        self.offset = offset
        self.reason = reason
        self.lost_elements = lost_elements
        self.lost_estimated = bool(lost_estimated)


class ImageDecodeError(HeadraceError, ValueError):
    """Bytes that could not be decoded as an image; names the file or record when known."""


class RecordParseError(HeadraceError, ValueError):
    """A record of a text format that does not parse (a CSV row with a wrong field count, a value that is not a
    number, an unterminated quote); names the file, the line, the byte offset, the column and the value."""


class StateError(HeadraceError, ValueError):
    """An iterator state that does not match the pipeline it is restored into."""


class StaleIndexError(HeadraceError, ValueError):
    """A TFRecord index (``.idx``) that does not match its file: it covers another number of bytes than the
    file has (the file was rewritten or appended to after the index was built), or its text is not an index.
    The message names the index, the file and the fix (``headrace.io.build_index(<file>)``); ``path`` is
    the TFRecord file (``None`` when unknown) and ``index`` the index file."""

    def __init__(self, message: str, *, path: str | None = None, index: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.index = index


class IteratorClosedError(HeadraceError, RuntimeError):
    """The iterator was closed: by ``close()`` (from any thread), ``with`` exit, or an interrupt.

    ``next()``, ``get_state()`` and ``set_state()`` raise it afterwards; create a new iterator with
    ``iter(dataset)`` (and ``set_state`` a state saved earlier to continue).
    """


class TooManyErrorsError(HeadraceError, RuntimeError):
    """``ignore_errors(max_drop_ratio=r)`` dropped more than the fraction ``r`` of the elements it saw.

    The message gives the counts per exception type and the first error with its stage and element.
    """


class InternalTimeoutError(HeadraceError, RuntimeError):
    """An internal lock was held far longer than any headrace code holds one: it was leaked, typically by
    an interrupt (Ctrl-C) landing at the wrong moment. Raised instead of hanging; close the iterator."""


class WorkerError(HeadraceError, RuntimeError):
    """A worker process of a ``map`` on the process executor died while computing an element: killed by a
    signal (a segfault in native code, the OOM killer's ``SIGKILL``) or exited (``os._exit``). Names the
    stage, the element index and the signal or exit status; raised in ``next()`` within seconds, never a
    hang. ``signal`` is the signal number (or None), ``exitcode`` the exit status (or None)."""

    def __init__(self, message: str, *, stage: str | None = None, index: int | None = None,
                 signal: int | None = None, exitcode: int | None = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.index = index
        self.signal = signal
        self.exitcode = exitcode


class SharedMemoryError(HeadraceError, OSError):
    """``/dev/shm`` has no room for the process executor's shared-memory segments (checked when the
    workers start and whenever a segment grows, instead of a ``Bus error`` later). Names the space needed,
    the space free and the fixes (a larger ``/dev/shm``, fewer workers, ``map_executor="thread"``)."""


class RemoteTraceback(HeadraceError):
    """The ``__cause__`` of an exception raised in a worker process (never raised on its own): ``str()`` is
    the worker's traceback."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


class IgnoredErrorsWarning(UserWarning):
    """``ignore_errors()`` dropped elements: the counts per exception type and the first error (once per
    iteration, when it ends or the iterator is closed)."""


class MissingDependencyError(HeadraceError, ImportError):
    """An optional dependency is not installed; the message names the ``pip install`` that adds it.

    Raised by ``headrace._deps.require``, the one place headrace imports an optional dependency: ``name`` is
    the missing top-level module, ``extra`` the headrace extra that installs it (``None`` when unknown).
    """

    extra: str | None = None


class ManifestError(HeadraceError, ValueError):
    """A ``dataset.json`` manifest that is missing, unreadable, or does not match the files beside it."""


class ConvertError(HeadraceError, RuntimeError):
    """A conversion that cannot finish: too many rejected rows, no records, an inconsistent result."""


class SchemaConflictError(ConvertError, ValueError):
    """A feature holds strings in some rows and numbers in others (names the feature and a row of each)."""


class ExportError(HeadraceError, ValueError):
    """A model could not be exported (ONNX or torch.export); the message names the layer when one was running."""


DATA_ERRORS = (DataLossError, ImageDecodeError, RecordParseError)
"""The errors about one bad record or element of the input (damaged bytes, an undecodable image, a text record
that does not parse): what ``ignore_errors()`` skips of headrace's own and what stops training after a
checkpoint."""


class MemoryBudgetWarning(UserWarning):
    """A configured buffer was shrunk to fit the memory budget (issued once per stage)."""


__all__ = [
    "ConvertError",
    "DataLossError",
    "ExportError",
    "HeadraceError",
    "IgnoredErrorsWarning",
    "ImageDecodeError",
    "InternalTimeoutError",
    "IteratorClosedError",
    "ManifestError",
    "MemoryBudgetError",
    "MemoryBudgetWarning",
    "MissingDependencyError",
    "RecordParseError",
    "RemoteTraceback",
    "SchemaConflictError",
    "SharedMemoryError",
    "StaleIndexError",
    "StateError",
    "TooManyErrorsError",
    "WorkerError",
]
