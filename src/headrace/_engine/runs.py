"""Runs of elements: what a stage may hand a sequential ``batch`` several elements at a time instead of one per
``__next__``, and the batch's loop where it offers nothing (design: ``docs/design/fusion.md``).

Three optional capabilities, each a small protocol a stage may implement (``Stage`` has none of them); a
sequential ``batch`` looks each up once, when it is built, and only under the static optimizations
(``headrace._engine.tuning.static_optimizations``):

- :class:`RowRuns` (``fill``): append up to ``k`` elements to a list in one call (a text or CSV reader's rows
  cut by slices; ``map_and_batch_fusion``'s loop, ``static_optimizations.MapAndBatch``);
- :class:`ColumnRuns` (``fill_columns``): the elements as runs of 1-D columns, concatenated by ``batch`` into its
  batch (no tuple per row is made or stacked): a table or text reader's, and ``MapAndBatch``'s for a map whose
  results are flat rows of scalars (``docs/design/rows.md``);
- :class:`ReadyElements` (``elements_ready``): an iterator, C-level where it can be, over the elements
  ``__next__`` would give next (``range``'s chunk, a columnar reader's rows): what the fused map-and-batch loop
  pulls from without a Python call per element.

A stage offering none is filled by :func:`fill_one_by_one` (one ``__next__`` per element, one call per batch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, runtime_checkable

from .._structure import SCALAR_NBYTES, nbytes

Fill = Callable[[list[Any], int, int], tuple[int, int]]
"""``fill(items, k, per) -> (bytes appended, largest)``: see :meth:`RowRuns.fill`."""


@runtime_checkable
class RowRuns(Protocol):
    """A stage that appends runs of its elements to a batch's list."""

    def fill(self, items: list[Any], k: int, per: int) -> tuple[int, int]:
        """Append up to ``k`` elements to ``items`` (what ``k`` calls of ``__next__`` give), stopping early after
        an element of more than ``per`` bytes: returns the bytes appended and the largest of them. ``StopIteration``
        or an error leaves the elements appended before it in ``items`` (the caller sizes them again)."""
        ...


@runtime_checkable
class ColumnRuns(Protocol):
    """A stage whose elements are flat tuples of scalars held as columns (a table reader), or scalars (a text
    reader's lines); or ``map_and_batch_fusion``'s loop, whose map returns flat rows of scalars."""

    def fill_columns(self, runs: list[Any], k: int, per: int) -> tuple[int, int, int]:
        """Append up to ``k`` elements to ``runs`` as runs, each a list of one 1-D numpy array per tuple component,
        a dict of them for dict elements, or for scalar elements one array (views are fine: a sequential ``batch``
        concatenates them into its batch, in the same call), stopping early after an element of more than ``per``
        bytes; returns ``(elements, bytes, largest)``, the bytes exactly the elements' ``nbytes``. An error or
        ``StopIteration`` leaves the runs appended before it. ``(0, 0, 0)``: none to give as columns (the batch goes
        on with its row loop and does not ask again in this iteration)."""
        ...


@runtime_checkable
class ReadyElements(Protocol):
    """A stage that can hand out the elements it holds ready without a Python call each."""

    def elements_ready(self) -> Iterator[Any] | None:
        """An iterator over the elements ``__next__`` would return next, consuming them as ``__next__`` would
        (the stage's state follows it); when it ends, ``__next__`` gives the next element or ``StopIteration``.
        None when there is none."""
        ...


def row_runs(stage: object) -> Fill | None:
    """``stage``'s :meth:`RowRuns.fill`, or None."""
    return stage.fill if isinstance(stage, RowRuns) else None


def column_runs(stage: object) -> Callable[[list[Any], int, int], tuple[int, int, int]] | None:
    """``stage``'s :meth:`ColumnRuns.fill_columns`, or None."""
    return stage.fill_columns if isinstance(stage, ColumnRuns) else None


def same_columns(a: Any, b: Any) -> bool:
    """Whether two column runs (:meth:`ColumnRuns.fill_columns`: a list of arrays, or a dict of them) hold the same
    components with the same dtypes (``np.concatenate`` would cast int32 and int64 runs to int64)."""
    if type(a) is dict:
        return type(b) is dict and a.keys() == b.keys() and all(a[k].dtype == b[k].dtype for k in a)
    return type(b) is list and len(a) == len(b) and all(x.dtype == y.dtype for x, y in zip(a, b))


def _nothing_ready() -> None:
    return None


def ready_elements(stage: object) -> Callable[[], Iterator[Any] | None]:
    """``stage``'s :meth:`ReadyElements.elements_ready`, or a function that always answers None."""
    return stage.elements_ready if isinstance(stage, ReadyElements) else _nothing_ready


class FillTally:
    """What a ``fill`` call counts of the elements it appends: the bytes and the largest of those it sized one by
    one, and the fixed-size scalar type (``fast``) whose elements it only counts (the first one met, where
    ``scalars``: a map with an ``output_signature`` check sizes every result)."""

    __slots__ = ("fast", "held", "largest", "per", "scalars", "slow")

    def __init__(self, per: int, scalars: bool = True) -> None:
        self.per, self.scalars = per, scalars
        self.fast: type | None = None
        self.held = self.largest = self.slow = 0

    def add(self, x: Any) -> bool:
        """Size ``x`` (appended, not of the fast type); True when it is larger than ``per`` (fill stops)."""
        n = SCALAR_NBYTES.get(type(x))
        if n is None:
            n = nbytes(x)
        elif self.fast is None and self.scalars:
            self.fast = type(x)
        return self.add_sized(n)

    def add_sized(self, n: int) -> bool:
        """``add`` of an element whose size ``n`` is known (``normalize_sized``)."""
        self.slow += 1
        self.held += n
        if n > self.largest:
            self.largest = n
            return n > self.per
        return False

    def result(self, appended: int) -> tuple[int, int]:
        """``fill``'s return value for ``appended`` elements: their bytes and the largest."""
        held = self.held
        if self.fast is not None:
            held += (appended - self.slow) * SCALAR_NBYTES[self.fast]
        return held, self.largest


def fill_one_by_one(next_element: Callable[[], Any], items: list[Any], k: int, per: int) -> tuple[int, int]:
    """:meth:`RowRuns.fill` of any stage (``next_element``: its ``__next__``): one call per element, one call of
    this per batch."""
    append = items.append
    start = len(items)
    tally = FillTally(per)
    fast = None  # the type of elements only counted (tally.fast, kept in a local for the loop)
    for _ in range(k):
        x = next_element()
        append(x)
        if type(x) is fast:
            continue
        if tally.add(x):
            break
        fast = tally.fast
    return tally.result(len(items) - start)
