"""The budget itself (:class:`MemoryBudget`): one byte limit, its open accounts and their caps, and the
ledger every account's verbs go through, behind one lock (``cv``).

The ledger's moves (:meth:`MemoryBudget.charge`, :meth:`~MemoryBudget.credit`, :meth:`~MemoryBudget.move`)
are the only places the budget's total changes; the waiters are woken by :meth:`~MemoryBudget.wake` (unrolled in
``credit`` and ``move``, which run once per element).
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .._sync import Condition
from .account import StageAccount
from .admission import WAIT_SLICE_S
from .shares import fair_caps, fixed_capacity, model_share
from .sizes import format_bytes


class MemoryBudget:
    """One byte limit shared by the buffering stages of one or more iterators (see ``headrace._memory``)."""

    def __init__(self, limit_bytes: int, *, shared: bool = False, share: int = 1) -> None:
        if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes < 1:
            raise ValueError(f"memory budget {limit_bytes!r} must be an int >= 1 byte")
        self.limit_bytes = int(limit_bytes)
        self.shared = shared
        self.share = share  # one of ``share`` processes' budgets (headrace._memory.budget_share)
        self.pid = os.getpid()
        self.cv = Condition("memory budget")
        self.accounts: list[StageAccount] = []  # the open accounts (read with the lock held)
        self.total_bytes = 0
        self.peak_bytes = 0
        self.overdraft_bytes = 0
        self.miss_bytes = 0
        self.stalls = 0
        # One entry per consumer inside ``Iterator.__next__`` / ``set_state`` (the stall breaker's "the consumer
        # waits", ``admission.stalled``): a deque's append and pop are atomic, so the iterators of a shared
        # process budget in several threads count without the lock (an int's ``+= 1`` lost updates).
        self.consumers: deque[int] = deque()
        self.last_release_s = time.monotonic()
        self.assumed_element_bytes = 0
        self.waiters = 0  # threads blocked in reserve(): wake() notifies only when there are any
        self.reserve_bytes = self.limit_bytes // 16  # kept outside every share (headrace._budget.admission)
        self.overdraft_warned = False
        # Called (lock held) when a reservation does not fit: each frees memory kept idle for reuse (lent
        # batch buffers, headrace._engine.batch_buffers) and returns the bytes it credited.
        self.reclaimers: list[Callable[[], int]] = []
        # Called (lock let go) at a stall, before the stall breaker overdraws or refuses: each ends something
        # the pipeline can run without (an idle worker process beyond its stage's first) and returns the bytes
        # it gave back (:meth:`shed`).
        self.shedders: list[Callable[[], int]] = []
        self.shedding = False

    # (older names, read by modules outside the budget)
    _cv = property(lambda self: self.cv)
    _accounts = property(lambda self: self.accounts)

    def account(self, stage: str, demand: int | None, *, mandatory: bool = False, min_units: int = 1,
                hint: str = "make elements smaller (e.g. resize earlier)", owner: object = None,
                group: str | None = None, elements: bool = True) -> StageAccount:
        """Open an account for ``stage`` wanting to hold up to ``demand`` elements (None = unbounded) and
        needing ``min_units`` to make progress. ``hint`` completes the ``MemoryBudgetError`` message.
        ``group``: accounts that share a limit of their own (``try_reserve(group_limit=...)``). ``elements``:
        its unit is one of the pipeline's elements (False: a worker process's footprint), so a stage that has
        seen none yet may assume its own are as large (``assumed_element_bytes``)."""
        acc = StageAccount(self, stage, demand, mandatory, max(1, min_units), hint, owner)
        acc.group = group
        acc.unit_is_element = elements
        with self.cv:
            self.accounts.append(acc)
            self.recompute_caps()
        return acc

    def accounts_of(self, owner: object) -> list[StageAccount]:
        """The open accounts of ``owner`` (an iterator tree's ``IteratorContext.tree``)."""
        with self.cv:
            return [a for a in self.accounts if a.owner is owner]

    def group_accounts(self, group: str) -> list[StageAccount]:
        """The open accounts of ``group`` (e.g. every stage's worker processes)."""
        with self.cv:
            return [a for a in self.accounts if a.group == group]

    def holders(self) -> str:
        """``"stage=size, ..."`` of the accounts holding bytes now (lock held), for messages."""
        return ", ".join(f"{a.stage}={format_bytes(a.held_bytes)}" for a in self.accounts if a.held_bytes)

    # shares -------------------------------------------------------------------------------------------
    def recompute_caps(self) -> None:
        """Every account's fair share (lock held; ``headrace._budget.shares``)."""
        self.assumed_element_bytes = max((a.unit_bytes() for a in self.accounts if a.seen and a.unit_is_element),
                                         default=0)
        self.reserve_bytes, caps = fair_caps(self.limit_bytes, self.accounts, StageAccount.unit_bytes)
        for a, cap in zip(self.accounts, caps, strict=True):
            a.cap_bytes = cap

    def model_share(self, acc: StageAccount, unit: int, below: tuple[str, ...]) -> tuple[float, bool]:
        """``acc``'s modelled share and whether other stages are modelled at ``unit`` bytes
        (:func:`headrace._budget.shares.model_share`)."""
        with self.cv:
            return model_share(self.limit_bytes, self.accounts, acc, unit, below)

    def fixed_capacity(self, acc: StageAccount, unit: int, below: tuple[str, ...], wanted: int) -> int | None:
        """The byte capacity of a buffer whose order depends on it (a seeded ``shuffle``), or None where it holds
        ``wanted`` bytes (:func:`headrace._budget.shares.fixed_capacity`)."""
        with self.cv:
            return fixed_capacity(self.limit_bytes, self.accounts, acc, unit, below, wanted)

    # the ledger (lock held) ---------------------------------------------------------------------------
    def charge(self, acc: StageAccount, nbytes: int) -> None:
        """``acc`` holds ``nbytes`` more (peaks noted)."""
        acc.held_bytes += nbytes
        self.total_bytes += nbytes
        if acc.held_bytes > acc.peak_bytes:
            acc.peak_bytes = acc.held_bytes
        if self.total_bytes > self.peak_bytes:
            self.peak_bytes = self.total_bytes

    def credit(self, acc: StageAccount, nbytes: int) -> None:
        """``acc`` gives ``nbytes`` back: a release (the stall breaker's clock restarts, waiters woken). A closed
        account gave everything back when it closed: a late release (a reader thread finishing its read while
        ``close()`` ran) changes nothing."""
        if acc.closed:
            return
        acc.held_bytes -= nbytes
        self.total_bytes -= nbytes
        self.last_release_s = time.monotonic()
        if self.waiters:  # (wake(), unrolled: once per element)
            self.cv.notify_all()

    def move(self, source: StageAccount, target: StageAccount, nbytes: int) -> None:
        """``nbytes`` held by ``source`` are held by ``target`` now (the total does not change)."""
        source.held_bytes -= nbytes
        target.held_bytes += nbytes
        if target.held_bytes > target.peak_bytes:
            target.peak_bytes = target.held_bytes
        if self.waiters:  # (wake(), unrolled: once per element)
            self.cv.notify_all()

    def reclaim(self, nbytes: int) -> bool:
        """(Lock held) ``nbytes`` more do not fit: free the idle memory kept for reuse where the budget's
        limit is what stands in the way; whether anything was freed (then look again)."""
        if not self.reclaimers or self.total_bytes + nbytes <= self.limit_bytes - self.reserve_bytes:
            return False
        return sum(fn() for fn in list(self.reclaimers)) > 0

    def shed(self) -> bool:
        """(Lock held, at a stall) ask the shedders in turn to give back memory the pipeline can run without
        until one did: the stall breaker goes over the budget, or refuses, only when nothing could be given
        back first (docs/design/budget.md, "Shedding before the stall breaker"). The lock is let go while they
        run (each takes its own lock first, then this one, as its stage does); one thread sheds at a time, the
        others wait a slice meanwhile. Returns whether to look again (bytes came back, or another thread is
        shedding)."""
        if not self.shedders:
            return False
        if self.shedding:
            self.wait_slice()
            return True
        self.shedding = True
        shedders = list(self.shedders)
        freed = 0
        try:
            with self.cv.released():
                for fn in shedders:
                    freed = fn()
                    if freed:
                        break
        finally:
            self.shedding = False
        return freed > 0

    def wake(self) -> None:
        """Wake the threads waiting for room (if any) to look again."""
        if self.waiters:
            self.cv.notify_all()

    def wait_slice(self) -> None:
        """Wait (lock held) one slice (``WAIT_SLICE_S``) for a change: the caller looks again and re-checks its
        stop flag (every wait in headrace is timed)."""
        self.waiters += 1
        try:
            self.cv.wait(WAIT_SLICE_S)
        finally:
            self.waiters -= 1

    def close_account(self, acc: StageAccount) -> None:
        """``acc`` gives back everything and leaves the budget (the caps are shared out again)."""
        with self.cv:
            acc.closed = True
            self.total_bytes -= acc.held_bytes
            acc.held_bytes = 0
            acc.held_count = 0
            acc.outstanding = 0
            if acc in self.accounts:
                self.accounts.remove(acc)
                self.recompute_caps()
            self.cv.notify_all()

    # reporting ----------------------------------------------------------------------------------------
    def stats(self, owner: object = None) -> dict[str, Any]:
        """``limit_bytes``, ``current_bytes``, ``peak_bytes``, ``overdraft_bytes``, ``estimate_miss_bytes``,
        ``stalls`` and per stage ``current_bytes`` / ``peak_bytes`` / ``held_elements`` / ``demand_elements``
        / ``cap_bytes`` (only the stages of ``owner``'s iterator when given)."""
        with self.cv:
            stages = {}
            for a in self.accounts:
                if owner is not None and a.owner is not owner:
                    continue
                stages[a.stage] = {
                    "stage": a.stage_of or a.stage,  # the stage the account belongs to (explain())
                    "current_bytes": a.held_bytes,
                    "peak_bytes": a.peak_bytes,
                    "held_elements": a.held_count,
                    "demand_elements": a.demand,
                    "cap_bytes": None if math.isinf(a.cap_bytes) else int(a.cap_bytes),
                }
            return {"limit_bytes": self.limit_bytes, "current_bytes": self.total_bytes,
                    "peak_bytes": self.peak_bytes, "overdraft_bytes": self.overdraft_bytes,
                    "estimate_miss_bytes": self.miss_bytes, "stalls": self.stalls, "shared": self.shared,
                    "stages": stages}
