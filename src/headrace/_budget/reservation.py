"""A reservation as an object (:class:`Reservation`): what ``StageAccount.reserve`` / ``try_reserve`` return,
and the verbs on bytes reserved for what does not exist yet: ``settle`` (it exists), ``cancel`` (it never will),
``top_up`` (wait for more), ``force`` (more that exist already); a stage below hands bytes into it
(``headrace._handoff``). Settled or cancelled exactly once.

``with acc.reserve(acc.estimate(), stop) as r: x = pull(); r.settle(nbytes(x))``: leaving the block without
``settle`` (the input's end, an error, a stop, a refused settle) cancels it, so a stage states reserve ->
produce -> settle once instead of a ``cancel`` in every ``except``. A stage that keeps a reservation across
calls (a batch being gathered, a worker process starting) keeps the object.

Every verb takes the budget's one lock (``MemoryBudget.cv``); refusals live in ``headrace._budget.refusals``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import notices
from .policy import TOP_UP
from .refusals import refuse_going_over, refuse_impossible

if TYPE_CHECKING:
    from .account import StageAccount


class Reservation:
    """``nbytes`` reserved in ``account`` for an element that does not exist yet."""

    __slots__ = ("account", "nbytes", "open")

    def __init__(self, account: StageAccount, nbytes: int) -> None:
        self.account = account
        self.nbytes = nbytes  # grows by top_up, force and what a stage below hands into it (headrace._handoff)
        self.open = True

    def settle(self, actual: int, count: int = 1, *, unit: bool = True, largest: int | None = None,
               refuse: bool = True, need: int | None = None) -> None:
        """Turn the reservation into ``count`` held elements of ``actual`` bytes in total.

        Less than reserved: the rest is released. More (an element larger than any before it): the excess
        is charged at once and counted as an estimate miss; the estimate grows (``unit=False``: not an
        element of this stage's unit size, e.g. a stacked batch; ``largest``: the largest of the ``count``).
        An excess that would go over the budget where this element and what the other stages cannot give back
        first can never fit together (``refusals.refuse_infeasible``) raises ``MemoryBudgetError`` instead,
        nothing changed and the reservation still open (to cancel): sweep seeds 390 and 454 overdrew by an
        element larger than its estimate just before the stall breaker refused. ``refuse=False``: charge it
        anyway (memory measured after the fact, e.g. a worker process's RSS). ``need``: first refuse what can
        never fit this stage at once (``refusals.refuse_impossible``: a call's input and output found larger
        than any estimate, before their excess is charged; issue 22: 1 MiB over under 3 MiB).
        """
        acc = self.account
        b = acc.budget
        with b.cv:
            if need is not None and (acc.mandatory or acc.holds_between or need > b.limit_bytes):
                refuse_impossible(acc, need)  # (it refuses nothing else: not called per element)
            reserved = self.nbytes
            if refuse and actual > reserved:
                refuse_going_over(acc, actual - reserved, actual - reserved if acc.mandatory else actual)
            self.open = False
            acc.outstanding -= 1
            acc.held_count += count
            per = largest if largest is not None else (-(-actual // count) if count else actual)
            grew = acc.sized(per, unit)
            delta = actual - reserved
            if delta > 0:
                b.miss_bytes += delta
                over = max(0, b.total_bytes - b.limit_bytes)
                b.charge(acc, delta)
                went_over = max(0, b.total_bytes - b.limit_bytes) - over  # an element past the budget
                b.overdraft_bytes += went_over
                if went_over and acc.stalled_short:
                    notices.warn_over(acc, actual)
            elif delta < 0:
                b.credit(acc, -delta)
            acc.stalled_short = False
            if acc.mandatory and acc.demand is None and acc.held_bytes > acc.cap_bytes:
                grew = True  # an unbounded mandatory stage outgrew its share: the others' shares shrink
            if grew:
                b.recompute_caps()
                b.wake()

    def cancel(self) -> None:
        """No element came of it (end of input, an error, a stop): given back. Once; later calls do nothing."""
        if self.open:
            acc = self.account
            with acc.budget.cv:
                self.open = False
                acc.outstanding -= 1
                acc.budget.credit(acc, self.nbytes)

    def top_up(self, nbytes: int, stop: Any = None, *, urgent: Callable[[], bool] | None = None) -> None:
        """Wait for ``nbytes`` more in this open reservation (``policy.TOP_UP``: a batch sized by an element it
        holds; one ``settle`` / ``cancel`` for both)."""
        acc = self.account
        more = acc.reserve(nbytes, stop, TOP_UP, urgent=urgent)
        with acc.budget.cv:
            acc.outstanding -= 1  # (one reservation: this one)
            more.open = False
        self.nbytes += more.nbytes

    def force(self, nbytes: int) -> None:
        """Charge ``nbytes`` that exist already into this reservation without waiting (an element larger than
        its estimate, arrived): counted as an estimate miss (``StageAccount.force``)."""
        self.account.force(nbytes)
        self.nbytes += nbytes

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.cancel()
