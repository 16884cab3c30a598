"""One stage's account (:class:`StageAccount`): what it holds and has reserved, and the verbs its stage
calls: ``reserve`` (waiting, timed) or ``try_reserve``, each with the stage's kind of reservation
(``headrace._budget.policy``), returning a :class:`Reservation` to settle or
cancel; for bytes held: release, hand on (move_to), and the charges of bytes that exist already (hold, force,
adjust); the sizes and demand its share is computed from.

Every verb takes the budget's one lock (``MemoryBudget.cv``) and changes the total only through the
budget's ledger (``charge`` / ``credit`` / ``move``); admission, refusals and warnings are their own modules.

The reservation (:class:`Reservation`, below): what ``StageAccount.reserve`` / ``try_reserve`` return,
and the verbs on bytes reserved for what does not exist yet: ``settle`` (it exists), ``cancel`` (it never will),
``top_up`` (wait for more), ``force`` (more that exist already); a stage below hands bytes into it
(``headrace._handoff``). Settled or cancelled exactly once.

``with acc.reserve(acc.estimate(), stop) as r: x = pull(); r.settle(nbytes(x))``: leaving the block without
``settle`` (the input's end, an error, a stop, a refused settle) cancels it, so a stage states reserve ->
produce -> settle once instead of a ``cancel`` in every ``except``. A stage that keeps a reservation across
calls (a batch being gathered, a worker process starting) keeps the object.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .._errors import MemoryBudgetError
from . import admission, notices
from .policy import ELEMENT, TOP_UP, WHOLE, Policy
from .refusals import refuse_going_over, refuse_impossible, refuse_infeasible

if TYPE_CHECKING:
    from .ledger import MemoryBudget


class StageAccount:
    """The bytes one stage holds or has reserved. Thread-safe; every wait is timed and honours a stop event.

    ``held_bytes`` counts settled elements and outstanding reservations; ``held_count`` settled elements.
    """

    def __init__(self, budget: MemoryBudget, stage: str, demand: int | None, mandatory: bool, min_units: int,
                 hint: str, owner: object) -> None:
        self.budget = budget
        self.hint = hint
        self.stage = stage
        self.stage_of: str | None = None  # the stage it belongs to when not named like it (set where it is made)
        self.demand = demand
        self.start_demand = demand  # before AUTOTUNE moved it: what a reproducible model reads (model_share)
        self.mandatory = mandatory
        self.min_units = min_units
        self.owner = owner
        self.held_bytes = 0
        self.held_count = 0
        self.outstanding = 0     # reservations not settled yet
        self.peak_bytes = 0
        self.max_element_bytes = 0   # largest settled element
        self.max_reserved_bytes = 0  # largest single reservation (e.g. a map's input + output)
        self.seen = False            # has settled at least one element
        self.cap_bytes: float = float(budget.limit_bytes)
        self.warn_shrink = True      # AUTOTUNE-sized stages shrink silently
        self.shrink_warned = False
        self.min_what: str | None = None  # what its min_units are, in a MemoryBudgetError (default "N elements")
        self.warnings: Any = None    # headrace._warn.PipelineWarnings (at the user's line, once per pipeline)
        self.probe_s = 0.0           # when its first reservation (its probe) was taken
        self.stalled_short = False   # the stall breaker reserved less than the estimate (Policy.partial)
        self.group: str | None = None
        self.unit_is_element = True  # (False: a worker process's footprint; never assumed of other stages)
        self.closed = False  # closed: everything given back; a late release changes nothing (ledger.credit)
        self.promised_bytes = 0      # what it will need once it runs, counted by its group's limit meanwhile
        # Holds its unit while its stage does not run (a file reader's buffers, between the rows it yields):
        # the units of all such open accounts are held at the same time (headrace._budget.refusals).
        self.holds_between = False
        self.keeps = False   # keeps what it holds until the iterator closes (a memory cache): see refusals
        self.pulling = 0     # inside a pull from its input, holding its buffer until it returns (pull_begins)
        self.nested = False  # of a dataset made while the pipeline runs (an interleave's slot): see shares

    def pull_begins(self) -> None:
        """Its stage pulls from its input while it holds its buffer (a shuffle refilling): what it holds cannot be
        given back before the pull returns, so a refusal at a stall counts it (``refusals.refuse_infeasible``).
        Paired with :meth:`pull_ends` (in a ``finally``); nests."""
        self.pulling += 1

    def pull_ends(self) -> None:
        self.pulling -= 1

    # estimates ----------------------------------------------------------------------------------------
    def unit_bytes(self) -> int:
        """The bytes one unit of this stage's work takes: the larger of its largest element and its largest
        reservation, or (nothing seen yet) the largest element seen anywhere in the budget."""
        own = max(self.max_element_bytes, self.max_reserved_bytes if self.seen else 0)
        return own or self.budget.assumed_element_bytes

    def estimate(self) -> int:
        """What to reserve for the next element: the largest this stage has held (0 before its first one,
        which is then a probe, charged when it exists: the elements of other stages may be whole batches
        or single rows, so they say nothing about this stage's)."""
        return self.max_element_bytes

    def min_bytes(self) -> float:
        return float(self.min_units * self.unit_bytes())

    # the admission rules as methods (no wrapper call on each reservation; tests patch them here)
    _admit = admission.admits
    _stalled = admission.stalled

    def check_possible(self, nbytes: int) -> None:
        """``MemoryBudgetError`` if ``nbytes`` at once (a call's input and output found larger than any estimate)
        can never fit this stage, before ``settle`` charges their excess (docs/design/budget.md)."""
        with self.budget.cv:
            refuse_impossible(self, nbytes)

    warn_shrunk = notices.warn_shrunk  # say once that this stage runs with fewer elements than configured

    # reserving ----------------------------------------------------------------------------------------
    def try_reserve(self, nbytes: int, policy: Policy = ELEMENT, *, urgent: bool = False,
                    group_limit: int | None = None, charged_in: int = 0) -> Reservation | None:
        """Reserve ``nbytes`` if they fit now (returns the reservation), else None; never blocks.
        ``group_limit``: the accounts of this one's ``group`` together stay within it as well, each of the
        others counting at least its ``promised_bytes`` (what it needs to run at all). ``policy``, ``urgent``
        (a bool here) and ``charged_in``: as in ``reserve``."""
        b = self.budget
        with b.cv:
            if group_limit is not None and not admission.within_group(self, nbytes, group_limit):
                return None
            refuse_impossible(self, nbytes)
            if self._admit(nbytes, urgent, policy, charged_in) or (
                    b.reclaim(nbytes) and self._admit(nbytes, urgent, policy, charged_in)):
                return Reservation(self, self._reserved(nbytes, policy.unit))
            notices.maybe_warn_shrunk(self)
            return None

    def reserve(self, nbytes: int, stop: Any = None, policy: Policy = ELEMENT, *,
                urgent: Callable[[], bool] | None = None, charged_in: int = 0) -> Reservation:
        """Wait (in timed slices) until ``nbytes`` fit, reserve them and return the reservation (to settle or
        cancel: :class:`Reservation`).

        ``policy``: the kind of reservation (``headrace._budget.policy``: headroom, unit, cap, top-up, partial,
        read-ahead, refusal at a stall). ``urgent()`` true marks the reservation the consumer waits for (it may
        use the headroom). ``charged_in``: this many more bytes will be handed into the reservation by the stage
        below, charged already (``headrace._handoff``): they count against this stage's share, not against the
        budget again. ``stop``: anything with ``is_set()``. At a stall (``admission.stalled``) the budget first
        sheds what the pipeline can run without (``MemoryBudget.shed``: an idle worker process beyond its
        stage's first); then the stall breaker overdraws, or reserves what still fits (``policy.partial``:
        ``settle`` charges any real excess, so the budget is exceeded by real bytes only, not by an estimate the
        element may never reach: 256 B / 12 MiB records went 11 KB over for a 12 MiB estimate), or refuses
        (``policy.refuse``, ``refusals``).
        Raises ``MemoryBudgetError`` if they can never fit, ``Cancelled`` if ``stop`` is set meanwhile or the account
        is closed.
        """
        b = self.budget
        with b.cv:
            if self.closed:  # (closed by close() from another thread: it holds nothing more)
                raise admission.Cancelled()
            if self.mandatory or self.holds_between or nbytes > b.limit_bytes:
                refuse_impossible(self, nbytes)  # (it refuses nothing else: not called per element)
            while True:
                is_urgent = urgent is not None and urgent()
                if self._admit(nbytes, is_urgent, policy, charged_in):
                    break
                if b.reclaim(nbytes):  # idle memory kept for reuse gave way: look again
                    continue
                notices.maybe_warn_shrunk(self)
                if stop is not None and stop.is_set():
                    raise admission.Cancelled()
                if ((self.seen or self.outstanding == 0 or policy.top_up)
                        and self._stalled(is_urgent, policy.speculative)):
                    if b.shed():  # memory the pipeline can run without went back first: look again
                        continue
                    text = None if policy.refuse is None else policy.refuse(b.holders(), b.total_bytes + nbytes)
                    if text is not None:
                        raise MemoryBudgetError(text)
                    fit = min(nbytes, max(0, b.limit_bytes - b.total_bytes))
                    if policy.partial and fit < nbytes:  # (settle refuses the element if its real size cannot fit)
                        b.stalls += 1
                        self.stalled_short = True  # settle warns if the element does go over
                        nbytes = fit
                        break
                    if fit < nbytes:
                        refuse_infeasible(self, nbytes)
                    notices.overdraft(self, nbytes)
                    break
                b.wait_slice()
            return Reservation(self, self._reserved(nbytes, policy.unit))

    def _reserved(self, nbytes: int, unit: bool) -> int:
        if not self.seen and self.outstanding == 0:
            self.probe_s = time.monotonic()
        self.outstanding += 1
        if unit and nbytes > self.max_reserved_bytes:
            self.max_reserved_bytes = nbytes
            if self.seen:  # the unit of work grew (e.g. a map's input + output): shares change
                self.budget.recompute_caps()
        self.budget.charge(self, nbytes)
        return nbytes

    def sized(self, per: int, unit: bool = True) -> bool:
        """(Lock held) an element of ``per`` bytes exists: whether the sizes the shares use grew."""
        grew = not self.seen
        if unit and per > self.max_element_bytes:
            self.max_element_bytes = per
            grew = True
        self.seen = True
        return grew

    # held bytes ---------------------------------------------------------------------------------------
    def hold(self, nbytes: int, count: int = 1) -> None:
        """Charge ``count`` elements of ``nbytes`` in total that exist already and must be kept, without
        waiting (a restore rebuilding a buffer the saved run held: waiting for room that the input being
        re-read holds could deadlock)."""
        b = self.budget
        with b.cv:
            self.held_count += count
            grew = self.sized(-(-nbytes // count) if count else nbytes)
            b.charge(self, nbytes)
            if grew:
                b.recompute_caps()

    def force(self, nbytes: int, *, refuse: bool = False) -> None:
        """Charge ``nbytes`` that already exist beyond what was reserved for them, without waiting (an
        element larger than its estimate, a worker process that grew); counted as an estimate miss.
        ``refuse``: where they would go over the budget and cannot fit beside what the other stages cannot
        give back first (``refusals.refuse_infeasible``), raise ``MemoryBudgetError`` instead, nothing charged."""
        b = self.budget
        with b.cv:
            if refuse:
                refuse_going_over(self, nbytes, nbytes if self.mandatory else self.held_bytes + nbytes)
            b.miss_bytes += nbytes
            b.charge(self, nbytes)

    def adjust(self, delta: int) -> None:
        """Change the bytes held without a wait (memory that already exists, e.g. recycled buffers)."""
        b = self.budget
        with b.cv:
            if delta > 0:
                b.charge(self, delta)
            else:
                b.credit(self, -delta)

    def release(self, nbytes: int, count: int = 1) -> None:
        """Hand ``count`` held elements of ``nbytes`` in total on (or drop them)."""
        with self.budget.cv:
            self.held_count -= count
            self.budget.credit(self, nbytes)

    def move_to(self, other: StageAccount, nbytes: int, count: int = 1) -> None:
        """Hand ``count`` held elements of ``nbytes`` to ``other``'s open reservation (same budget; the total
        does not change: ``headrace._handoff``)."""
        with self.budget.cv:
            self.held_count -= count
            self.budget.move(self, other, nbytes)

    def close(self) -> None:
        """Release everything still held and leave the budget (the caps are shared out again)."""
        self.budget.close_account(self)

    # sizes and demand ---------------------------------------------------------------------------------
    def set_demand(self, demand: int | None, *, start: bool = False) -> None:
        """The stage now wants up to ``demand`` elements (AUTOTUNE changed its buffer): shares recomputed.
        ``start``: the stage's starting value, set while the pipeline is built (``start_demand``)."""
        b = self.budget
        with b.cv:
            if start:
                self.start_demand = demand
            if demand != self.demand:
                self.demand = demand
                b.recompute_caps()
                b.wake()

    def learn_sizes(self, element: int, reserved: int) -> None:
        """Know the largest element and reservation a saved run had learned (``Iterator.set_state``): a restored
        stage that has produced nothing yet shares the budget as the saved one did, not by a guess."""
        b = self.budget
        with b.cv:
            self.max_element_bytes = max(self.max_element_bytes, int(element))
            self.max_reserved_bytes = max(self.max_reserved_bytes, int(reserved))
            self.seen = True
            b.recompute_caps()
            b.wake()

    def grow_unit(self, nbytes: int) -> None:
        """One unit of this stage's work now takes ``nbytes`` (e.g. a worker process whose footprint grew):
        the shares are computed again."""
        with self.budget.cv:
            if nbytes > self.max_element_bytes or not self.seen:
                self.max_element_bytes = max(self.max_element_bytes, nbytes)
                self.seen = True
                self.budget.recompute_caps()


class Reservation:
    """``nbytes`` reserved in ``account`` for an element that does not exist yet."""

    __slots__ = ("account", "nbytes", "open")

    def __init__(self, account: StageAccount, nbytes: int) -> None:
        self.account = account
        self.nbytes = nbytes  # grows by top_up, force and what a stage below hands into it (headrace._handoff)
        self.open = True

    def settle(self, actual: int, count: int = 1, *, unit: bool = True, largest: int | None = None,
               refuse: bool = True, need: int | None = None, inputs: tuple[int, int] | None = None,
               release: bool = False, renew: int = 0) -> bool:
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
        than any estimate, before their excess is charged). ``inputs``:
        ``(n, largest)``, the ``n`` elements this reservation also held until now, consumed into this one (a
        batch stacked from its items in the items' reservation): each is a unit of this stage's work, so the
        unit size grows to ``largest`` as if they had been settled and released (one lock instead of three).
        ``release``: the element is handed on at once (no taker waits for it, ``headrace._handoff``): its bytes
        are released in the same lock, as ``StageAccount.release`` would. ``renew``: then, in the same lock, this
        reservation opens again for ``renew`` bytes (the stage's next element, e.g. a batch's next items and
        output) if they are admitted at once, outside the budget's reserve, and no size the shares use grew;
        returns whether it did (else it is closed, and the caller reserves as usual).
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
            if inputs is not None and inputs[0]:
                grew = acc.sized(inputs[1]) or grew
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
            if release:
                acc.held_count -= count
                b.credit(acc, actual)
            if acc.mandatory and acc.demand is None and acc.held_bytes > acc.cap_bytes:
                grew = True  # an unbounded mandatory stage outgrew its share: the others' shares shrink
            if grew:
                b.recompute_caps()
                b.wake()
            elif renew and b.total_bytes + renew <= b.limit_bytes - b.reserve_bytes and acc._admit(
                    renew, False, WHOLE, 0):
                self.open = True
                self.nbytes = acc._reserved(renew, WHOLE.unit)
                return True
            return False

    def cancel(self) -> None:
        """No element came of it (end of input, an error, a stop): given back. Once; later calls do nothing."""
        if self.open:
            with self.account.budget.cv:
                self.cancel_locked()

    def cancel_locked(self) -> int:
        """``cancel`` with the budget's lock held by the caller (a reclaimer); the bytes given back."""
        if not self.open:
            return 0
        acc = self.account
        self.open = False
        acc.outstanding -= 1
        acc.budget.credit(acc, self.nbytes)
        return self.nbytes

    def top_up(self, nbytes: int, stop: Any = None, *, urgent: Callable[[], bool] | None = None,
               policy: Policy = TOP_UP) -> None:
        """Wait for ``nbytes`` more in this open reservation (``policy.TOP_UP``: a batch sized by an element it
        holds; one ``settle`` / ``cancel`` for both; ``policy``: ``TOP_UP`` with the caller's ``refuse``)."""
        acc = self.account
        more = acc.reserve(nbytes, stop, policy, urgent=urgent)
        with acc.budget.cv:
            acc.outstanding -= 1  # (one reservation: this one)
            more.open = False
        self.nbytes += more.nbytes

    def try_top_up(self, nbytes: int, *, urgent: bool = False) -> bool:
        """:meth:`top_up` if the ``nbytes`` fit now (True), else False; never blocks."""
        more = self.account.try_reserve(nbytes, TOP_UP, urgent=urgent)
        if more is None:
            return False
        self.absorb(more)
        return True

    def force(self, nbytes: int) -> None:
        """Charge ``nbytes`` that exist already into this reservation without waiting (an element larger than
        its estimate, arrived): counted as an estimate miss (``StageAccount.force``)."""
        self.account.force(nbytes)
        self.nbytes += nbytes

    def absorb(self, other: Reservation) -> None:
        """Take ``other`` (open, same account) into this reservation: one settle or cancel for both."""
        acc = self.account
        if other.account is not acc or not (self.open and other.open):
            raise ValueError(f"absorb: both reservations must be open and of one account ({acc.stage!r} and "
                             f"{other.account.stage!r}, open {self.open} and {other.open}); absorb before settling")
        with acc.budget.cv:
            other.open = False
            acc.outstanding -= 1
            self.nbytes += other.nbytes

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.cancel()
