"""``Dataset.ignore_errors``: drop elements whose production raised a *data* error.

Skipped (counted, logged with ``log_warning=True``): exceptions that describe one bad element - corrupt or
truncated records (``DataLossError``), undecodable images (``ImageDecodeError``), text records that do not
parse (``RecordParseError``), and whatever a user
function raises for an element (``ValueError``, ``KeyError``, ``TypeError``, ``OSError`` ...). Sources that
hit corrupt data continue after the bad record, so ``ignore_errors`` yields every good record; a
``DataLossError`` that cost several elements (``elements``: the rows of a damaged HDF5 chunk) counts as that
many drops.

Re-raised (they are not about one element, and dropping would hide them): headrace's own configuration and
resource errors (``MemoryBudgetError``, ``StateError``, ``IteratorClosedError``, ``InternalTimeoutError``,
``MissingDependencyError``) and the Python errors that mean the pipeline's code is wrong (``NameError``,
``SyntaxError``, ``ImportError``, ``NotImplementedError``, ``RecursionError``). Interrupts
(``KeyboardInterrupt``) are never caught.

Counting: an error that cost several elements at once carries ``lost_elements`` (an int >= 1, e.g.
:class:`~headrace.DataLossError` for a damaged Parquet row group: its rows, or its batches with
``batch_size``); it counts as that many dropped elements, in the warning and in ``max_drop_ratio``. Others
count as one.

Reporting: when the iteration ends (or the iterator is closed) after dropping anything, one
:class:`~headrace.IgnoredErrorsWarning` gives the counts per exception type and the first error with its note
(stage, element). ``max_drop_ratio`` (headrace's addition, like Grain's ``filter_raise_threshold_ratio``):
once at least ``MIN_ELEMENTS_FOR_RATIO`` elements were seen, more than that fraction dropped raises
:class:`~headrace.TooManyErrorsError` naming the counts and the first error (a dataset that is mostly
corrupt should stop a run, not shrink it silently).
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from typing import Any

from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage, UnaryIterator
from .._errors import DATA_ERRORS, DataLossError, HeadraceError, IgnoredErrorsWarning, TooManyErrorsError
from .._options import UNKNOWN_CARDINALITY

log = logging.getLogger("headrace")

MIN_ELEMENTS_FOR_RATIO = 100
MAX_SAME_ERROR_IN_A_ROW = 10_000
"""A source that raises the very same ``DataLossError`` (same message: same file and offset or rows) this many
times in a row, with nothing passing in between, is not moving past its bad data: ``TooManyErrorsError``
instead of spinning forever. (A user function raising one message for many elements is left alone.)"""
_PROGRAMMING_ERRORS = (NameError, SyntaxError, ImportError, NotImplementedError, RecursionError)


def lost_elements(e: BaseException) -> int:
    """How many elements the error ``e`` cost: its ``lost_elements`` attribute when that is an int >= 1,
    else 1."""
    n = getattr(e, "lost_elements", 1)
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1


def is_data_error(e: BaseException) -> bool:
    """Whether ``ignore_errors`` may drop the element that raised ``e`` (see the module docstring)."""
    if not isinstance(e, Exception) or isinstance(e, _PROGRAMMING_ERRORS):
        return False
    return not isinstance(e, HeadraceError) or isinstance(e, DATA_ERRORS)


class IgnoreErrorsNode(DatasetNode):
    label = "ignore_errors"
    shard_passes = True
    spec_passes = True

    def __init__(self, input_node: DatasetNode, log_warning: bool, max_drop_ratio: float | None = None) -> None:
        super().__init__([input_node])
        ratio = max_drop_ratio
        if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, int | float)
                                  or not 0.0 <= float(ratio) < 1.0):
            raise ValueError(f"ignore_errors(max_drop_ratio={max_drop_ratio!r}): must be None or a fraction in "
                             "[0, 1), e.g. 0.05 to stop when more than 5% of the elements fail")
        self.log_warning = bool(log_warning)
        self.max_drop_ratio = None if max_drop_ratio is None else float(max_drop_ratio)

    def cardinality(self) -> int:
        return UNKNOWN_CARDINALITY

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _IgnoreErrorsIterator(ctx, self.inputs[0].make_iterator(ctx), self)


FIRST_CHARS = 500
"""The first dropped error's description kept in a state (a state stays small)."""


class _IgnoreErrorsIterator(UnaryIterator):
    kind = "ignore_errors"

    def __init__(self, ctx: IteratorContext, source: Stage, node: IgnoreErrorsNode) -> None:
        super().__init__(ctx, source)
        self._log = node.log_warning
        self._ratio = node.max_drop_ratio
        self.dropped = 0
        self.passed = 0
        self._by_type: Counter[str] = Counter()
        self._first: str | None = None
        self._reported = False
        self._estimated = False  # some count was an estimate (a TFRecord tail): the reports say "about"
        self._last: tuple[str, str] | None = None
        self._repeats = 0

    def __next__(self) -> Any:
        while True:
            try:
                x = self._next_input()
            except StopIteration:
                self._report()
                raise
            except Exception as e:
                if not is_data_error(e):
                    raise
                self._drop(e)
                continue
            self.passed += 1
            self._last, self._repeats = None, 0
            return x

    def _drop(self, e: Exception) -> None:
        lost = lost_elements(e)
        self.dropped += lost
        self._estimated = self._estimated or bool(getattr(e, "lost_estimated", False))
        self._by_type[type(e).__name__] += lost
        notes = "; ".join(getattr(e, "__notes__", []))
        described = f"{type(e).__name__}: {e}" + (f" ({notes})" if notes else "")
        if self._first is None:
            self._first = described
        key = (type(e).__name__, str(e))
        self._repeats = self._repeats + 1 if key == self._last and isinstance(e, DataLossError) else 1
        self._last = key
        if self._repeats >= MAX_SAME_ERROR_IN_A_ROW:  # a source stuck on one record
            self._reported = True
            raise TooManyErrorsError(
                f"ignore_errors: the input raised the same error {self._repeats} times in a row without "
                f"yielding anything ({key[0]}: {key[1]}); its source does not move past the bad data (a "
                "from_source iterator must advance before it raises)") from e
        if self._log:
            log.warning("ignore_errors: dropped %s: %s", "an element" if lost == 1 else f"{lost} elements", described)
        seen = self.dropped + self.passed
        if self._ratio is not None and seen >= MIN_ELEMENTS_FOR_RATIO and self.dropped > self._ratio * seen:
            self._reported = True
            raise TooManyErrorsError(
                f"ignore_errors(max_drop_ratio={self._ratio}): {self._about()}{self.dropped} of {seen} elements failed "
                f"({self.dropped / seen:.1%}; {self._counts()}); the first: {self._first}. Fix the data or the "
                "function, or raise max_drop_ratio") from e

    def _about(self) -> str:
        return "about " if self._estimated else ""

    def _counts(self) -> str:
        return ", ".join(f"{name} x{n}" for name, n in self._by_type.most_common())

    def _report(self) -> None:
        if self.dropped and not self._reported:
            self._reported = True
            message = (f"headrace: ignore_errors dropped {self._about()}{self.dropped} of "
                       f"{self.dropped + self.passed} elements ({self._counts()}); the first: {self._first}")
            sink = self.ctx.tree.warnings
            if sink is None:
                warnings.warn(message, IgnoredErrorsWarning, stacklevel=4)
            else:  # queued for the consumer's thread: this may be a pipeline thread (headrace._warn)
                sink.warn(object(), message, IgnoredErrorsWarning)

    def _close_self(self) -> None:
        self._report()

    def _counters(self) -> dict[str, Any]:
        # the counts per type and the first error too: a restored iterator's warning says what the run dropped
        return {"dropped": self.dropped, "passed": self.passed, "by_type": dict(self._by_type),
                "first": None if self._first is None else self._first[:FIRST_CHARS], "estimated": self._estimated}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        self.dropped = int(state["dropped"])
        self.passed = int(state.get("passed", 0))
        self._by_type = Counter({str(k): int(v) for k, v in state.get("by_type", {}).items()})
        self._first = state.get("first")
        self._estimated = bool(state.get("estimated", False))
