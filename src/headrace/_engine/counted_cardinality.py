"""Exact element counts that may read indexes and record headers: :func:`counted_cardinality`.

``DatasetNode.cardinality()`` is tf.data's and reads nothing, so a ``TFRecordDataset`` and an
``interleave`` / ``flat_map`` report ``UNKNOWN_CARDINALITY`` (-2), and so does every pipeline above them.
Inside :func:`counting` the nodes that can count what they would produce without running the pipeline do:

- ``TFRecordDataset`` (``on_corrupt="raise"``): its files' ``.idx`` record index where one matches the
  file, else the record headers (12 bytes read and a seek per record, nothing of the payload; compressed
  files are decompressed); a names *dataset* is iterated.
- ``interleave`` / ``flat_map`` of a finite input: the sum of the counts of the datasets ``map_func``
  makes, one per input element (the input is iterated and ``map_func`` called once per element, as one
  iteration would; the datasets it returns are not iterated unless their own count needs it).

Every other node keeps its own rule (``batch`` divides, ``filter`` stays unknown ...), applied to the counted
inputs. Counts are memoized for the duration of one :func:`counting` block. ``len(to_torch(ds))`` uses this.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator
from contextvars import ContextVar
from typing import Any

from .._options import UNKNOWN_CARDINALITY

_MEMO: ContextVar[dict[int, tuple[Any, int]] | None] = ContextVar("headrace_counting", default=None)


def counting_enabled() -> bool:
    """True inside :func:`counting`: nodes may read indexes / headers to give an exact cardinality."""
    return _MEMO.get(None) is not None


@contextlib.contextmanager
def counting() -> Iterator[None]:
    """A block in which ``node.cardinality()`` counts where it can (see the module docstring)."""
    if counting_enabled():
        yield
        return
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def memoized(node: Any, compute: Callable[[], int]) -> int:
    """``compute()`` once per ``node`` within the current :func:`counting` block (outside it: every call)."""
    memo = _MEMO.get(None)
    if memo is None:
        return compute()
    hit = memo.get(id(node))
    if hit is None or hit[0] is not node:
        hit = memo[id(node)] = (node, compute())  # the node is kept so that its id is not reused
    return hit[1]


def counted_cardinality(node: Any) -> int:
    """``node.cardinality()`` inside :func:`counting`: exact wherever indexes or headers tell it."""
    with counting():
        return int(node.cardinality())


def unknown_cause(node: Any) -> Any | None:
    """The deepest node whose count is unknown although its inputs' are known (the op that makes the
    count of ``node`` unknown), or ``None`` when ``node``'s count is known."""
    with counting():
        if node.cardinality() != UNKNOWN_CARDINALITY:
            return None
        for inp in node.inputs:
            cause = unknown_cause(inp)
            if cause is not None:
                return cause
        return node


def elements(node: Any) -> Generator[Any, None, None]:
    """The elements of one iteration of ``node`` (iteration path ``(0,)``); the iterator is closed after."""
    with node.one_iteration() as it:
        while True:
            try:
                yield it.__next__()
            except StopIteration:
                return
