"""Handing an element's bytes from the stage that delivers it to the stage that takes it, in one step.

A stage that holds an element charged until it hands it on (a prefetch buffer, a parallel map's results,
the readers of a parallel ``interleave``, a batch just stacked) *delivers charged*
(``Stage.delivers_charged()``). A reader above it (a prefetch or interleave-slot worker, a
parallel ``map``'s worker) used to reserve room for the element before pulling it, while the stage below
still held it: every hand-off counted the element twice. A batch of half the budget under a ``prefetch``
then needed one and a half budgets (``batch(32).prefetch(2)`` of 4 MiB elements under 256 MiB: tracked
380 MiB, 1.8 GB overdrawn), and a parallel ``interleave`` of parallel ``interleave`` s under a budget of one
element waited on itself until the stall breaker overdrew (docs/design/budget.md).

Now such a reader checks only its own share for the element (``StageAccount.reserve(charged_in=...)``),
then pulls inside :func:`taking` with the reservation it got; the stage below delivers with :func:`hand_off`,
which moves the bytes from its account into the reader's open reservation (the reservation grows by them)
under the budget's lock (the budget's total does not
change, so nothing can slip in between). A stage that returns another stage's elements unchanged (an
``interleave`` returning its slots' elements) passes the taker on (:func:`passing`). Anything else the
stage below does while the taker waits (pulling from stages further down) is not handed to it: a taker
takes only from the iterator it named. If nothing was handed off (the stage below ran inline meanwhile),
``settle`` charges the element when it exists, as an estimate miss.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._memory import Reservation, StageAccount

_local = threading.local()


class Taker:
    """A reader in this thread pulling one element from ``source`` into its open ``reservation``."""

    __slots__ = ("reservation", "source")

    def __init__(self, reservation: Reservation, source: Any) -> None:
        self.reservation = reservation  # grows by the bytes handed to it
        self.source = source  # the iterator whose delivery it takes; None once it took one

    def rearm(self, source: Any) -> None:
        """Take ``source``'s next delivery too (a pool worker pulling a run of elements into one reservation)."""
        self.source = source


@contextmanager
def taking(reservation: Reservation, source: Any) -> Iterator[Taker]:
    """Around ``source.__next__()``: an element ``source`` delivers charged moves into ``reservation``."""
    prev = getattr(_local, "taker", None)
    taker = _local.taker = Taker(reservation, source)
    try:
        yield taker
    finally:
        _local.taker = prev


@contextmanager
def passing(source: Any, inner: Any) -> Iterator[None]:
    """``source`` returns ``inner``'s next element unchanged: a taker of ``source`` takes it from ``inner``."""
    taker = getattr(_local, "taker", None)
    if taker is None or taker.source is not source:
        yield
        return
    taker.source = inner
    try:
        yield
    finally:
        if taker.source is inner:
            taker.source = source


def taker_of(source: Any) -> Taker | None:
    """The taker in this thread waiting for ``source``'s element, if any."""
    taker = getattr(_local, "taker", None)
    return taker if taker is not None and taker.source is source else None


def hand_off(account: StageAccount, nbytes: int, source: Any, count: int = 1) -> None:
    """``source`` delivers ``count`` elements of ``nbytes`` held in ``account``: moved to the taker that
    waits for them in this thread, else released."""
    taker = getattr(_local, "taker", None)
    if taker is not None and taker.source is source:
        reservation = taker.reservation
        if reservation.account.budget is account.budget:
            account.move_to(reservation.account, nbytes, count)
            reservation.nbytes += nbytes
            taker.source = None
            return
    account.release(nbytes, count)


@contextmanager
def pulling_for(urgent: Callable[[], bool]) -> Iterator[None]:
    """Around a pool worker's pull: whether the consumer waits for this element (``urgent()``). A pool
    below whose consumer is this thread is urgent only when this is (:func:`waiter_urgency`): a reader
    reading ahead does not make the stage below it read ahead with the consumer's priority."""
    prev = getattr(_local, "urgent", None)
    _local.urgent = urgent
    try:
        yield
    finally:
        _local.urgent = prev


def waiter_urgency() -> Callable[[], bool] | None:
    """The urgency of the pull this thread is inside (None: the consumer's own thread, always urgent)."""
    return getattr(_local, "urgent", None)


def delivers_charged(it: Any) -> bool:
    """Whether ``it``'s next element arrives charged and handed off (see the module docstring)."""
    probe = getattr(it, "delivers_charged", None)
    return bool(probe()) if probe is not None else False
