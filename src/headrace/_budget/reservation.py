"""A reservation as an object: what ``StageAccount.reserving`` returns, settled or cancelled exactly once.

``with acc.reserving(acc.estimate(), stop) as r: x = pull(); r.settle(nbytes(x))``: leaving the block without
``settle`` (the input's end, an error, a stop) cancels it, so a stage states reserve -> produce -> settle once
instead of a ``cancel`` in every ``except``.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .account import StageAccount


class Reservation:
    """``nbytes`` reserved in ``account`` for an element that does not exist yet."""

    __slots__ = ("account", "nbytes", "open")

    def __init__(self, account: StageAccount, nbytes: int) -> None:
        self.account = account
        self.nbytes = nbytes  # grows by what a stage below hands into it (headrace._handoff.taking)
        self.open = True

    def settle(self, actual: int, count: int = 1, **options: Any) -> None:
        """The element exists with ``actual`` bytes (``StageAccount.settle``)."""
        self.open = False
        self.account.settle(self.nbytes, actual, count, **options)

    def cancel(self) -> None:
        """No element came of it: given back (``StageAccount.cancel``)."""
        if self.open:
            self.open = False
            self.account.cancel(self.nbytes)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.cancel()
