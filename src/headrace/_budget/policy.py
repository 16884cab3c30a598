"""What kind of reservation a stage takes (:class:`Policy`): the flags of ``StageAccount.reserve`` that always go
together, one frozen value each stage declares once (a named kind below), so a call site reads as one verb with
one policy. What each flag means for admission and the stall breaker: ``headrace._budget.admission`` and
``StageAccount.reserve``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Policy:
    """How a reservation is admitted and what it teaches the account.

    - ``unit``: the reservation is one unit of the stage's work (it may grow the stage's unit size); False for
      a whole batch being stacked in an account whose unit is one element, or a worker process.
    - ``headroom``: keep one unit of the stage's cap free for an urgent reservation.
    - ``ignore_cap``: only the budget as a whole limits it (a shuffle buffer filling a byte capacity it fixed
      earlier, a restore rebuilding a buffer that existed).
    - ``top_up``: it grows the stage's own open reservation (``Reservation.top_up``): no second probe, and it
      does not wait for the first settle.
    - ``partial``: the bytes are an estimate of an element that ``settle`` sizes later; the stall breaker
      reserves only what still fits and ``settle`` charges any real excess.
    - ``speculative``: a read-ahead (a pool's worker): unless urgent it leaves room for one element of the
      largest size seen and never overdraws.
    - ``refuse``: where the stall breaker would overdraw, raise ``MemoryBudgetError`` with the text
      ``refuse(holders, total)`` builds (a reader's buffers, whose overdraft would come back at every read);
      it returns None where the overdraft is the answer (a process map whose worker, call and one result
      fit: called with the budget's lock held).
    """

    unit: bool = True
    headroom: bool = False
    ignore_cap: bool = False
    top_up: bool = False
    partial: bool = False
    speculative: bool = False
    refuse: Callable[[str, int], str | None] | None = None

    def with_headroom(self, headroom: bool = True) -> Policy:
        """This policy keeping (or not) one unit of headroom for the urgent reservation."""
        return replace(self, headroom=headroom) if headroom != self.headroom else self


ELEMENT = Policy()
"""One element of the stage's unit size, waited for within the stage's share (the default)."""
READ_AHEAD = Policy(partial=True, speculative=True)
"""A worker reading ahead of the consumer on an estimate (a parallel pool's element)."""
WHOLE = Policy(unit=False)
"""Not one unit of the stage's work: a whole batch, a worker process, a cache rebuilt at once."""
TOP_UP = Policy(unit=False, top_up=True)
"""More for a ``WHOLE`` reservation still open (a batch sized by an element it holds): ``Reservation.top_up``."""
UNCAPPED = Policy(ignore_cap=True)
"""Limited by the budget as a whole only: a shuffle buffer filling the capacity it fixed, a restore."""
WHOLE_UNCAPPED = Policy(unit=False, ignore_cap=True)
"""``WHOLE`` and ``UNCAPPED``: a restored batch, a worker's segment after the idle workers were retired."""
