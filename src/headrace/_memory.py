"""The memory budget: every byte a pipeline holds is charged, before it exists, against one byte limit.

Scope
-----
``Options(memory_budget=X)`` gives the pipeline its own budget of ``X`` bytes. Without it, every iterator of
the process shares one *process budget* (:func:`process_budget`): 50% of the memory available when the
first iterator is made. Inside a PyTorch ``DataLoader`` worker (``headrace.torch.to_torch``) the process
budget and explicit budgets are divided by the number of workers, so a process tree as a whole stays
inside the budget (:func:`set_process_share`).

Reserve, then produce
---------------------
Every stage that holds elements (prefetch buffers, the shuffle buffer, parallel map results and the work in
its workers, interleave read-ahead, batch assembly and the batch being stacked, unbatch, the in-memory
cache) opens a :class:`StageAccount`. Before it pulls or creates an element it **reserves** an estimate of
its bytes (:meth:`StageAccount.reserve`: the largest such element the stage has seen); once the element
exists it **settles** the reservation to the element's real size (:meth:`StageAccount.settle`), and it
**releases** the bytes when it hands the element on. So an element is counted from before it exists until
the next stage has reserved room for it: results waiting for room, a function's input while the function
runs, a batch while it is stacked are all counted. Sizes are :func:`headrace._structure.nbytes`. A reader
whose input *delivers charged* (a prefetch, an interleave's readers, a parallel map's results, a stacked batch)
does not reserve the element a second time: it checks its share only (``reserve(charged_in=...)``) and the
input moves the element's bytes into its reservation as it hands it on (:mod:`headrace._handoff`).

Invariant (under one lock): ``sum(account.held_bytes) <= limit_bytes``, with one exception that is counted
and reported: an element *larger than every element its stage saw before* is only known once it exists; its
excess over the reservation is charged at once (``memory_stats()["estimate_miss_bytes"]``) and the stage's
estimate grows, so it happens at most once per new largest size. While a stage has seen no element at all
it works on one element at a time (a probe), so a first estimate is learnt from one element, not from many
in parallel. After ``PROBE_WAIT_S`` more reservations go ahead only where they fit the stage's share; a
share computed before any size is known is 0, so a stage that keeps headroom (a parallel ``map`` with
several workers) works on its first element alone until that one's size is known: a slow first element
cannot let many more of unknown size in.

Fair shares without deadlock
----------------------------
A **reserve** (1/16 of the budget, or the largest unit of work if larger, at most 1/4) is kept outside every
share; only a reservation the pipeline cannot progress without may use it (the stage holds nothing, the
consumer waits for exactly this element, or the stage is mandatory). The rest is divided into per-stage
**caps** by max-min fairness ("water filling"): each account declares
a demand in elements (``shuffle(10_000)`` -> 10,000; a parallel map: its window) and a minimum (the
elements it needs to make progress at all). Minimums are served first, then mandatory accounts (batch
assembly, unbatch, cache: they cannot emit part of what they hold), then the others share the rest, small
demands in full, large ones capped at a common level. Since caps add up to at most the budget, a stage
that stays inside its cap never waits for bytes another stage holds inside its own: it only waits for its
own consumer to drain it. A stage holding nothing may always take one element if the budget as a whole
has room.

*Ordered* stages with several producers (a parallel ``map``/``batch`` with ``deterministic=True``, the
readers of a parallel ``interleave``) could fill their cap with results the consumer cannot take yet
while the one it waits for has no room: their producers keep one element of **headroom** free, which
only the *urgent* reservation (the element the consumer waits for) may use.

Stall breaker (infeasible budgets only): if a stage holding nothing waits on the global limit while the
consumer is blocked and no byte was released for ``STALL_S`` seconds, it takes its element as an
**overdraft** (``memory_stats()["overdraft_bytes"]``, warned once, naming the holders) instead of
hanging. A second reservation of a stage still waiting for its first size (a second probe) waits for that
size instead, but a top-up of the probe itself (a batch's one reservation growing as its elements arrive)
is no second probe: it may break a stall (every window's batch of ``group_by_window(...).cache()`` under a
budget the cache fills used to wait forever). With a budget that has room for every stage's minimum this
does not happen (the promise suite checks ``overdraft_bytes == 0``). Before it overdraws, the stall breaker
adds what every other stage cannot give back first (what a keeping account - ``keeps``: an in-memory cache,
``unique`` - or a ``holds_between`` reader holds, a mandatory stage's holding or minimum, any other stage's
minimum) to the reservation: more than the budget can never fit, and is a ``MemoryBudgetError`` naming each
part instead of an overdraft (``_check_feasible``). A reservation that would come back stalled at every turn
(a file reader's buffers, ``reserve(refuse=...)``) raises ``MemoryBudgetError`` at its stall in any case.

A pool's worker reading ahead (``reserve(speculative=True)``, not the element the consumer waits for) is
not privileged even holding nothing, and leaves room for one element of the largest size seen: under a
budget of one element only the element the consumer waits for is read (urgency passes down through the
readers: :func:`headrace._handoff.pulling_for`).

A stage whose cap holds fewer elements than configured is *shrunk*: it warns once
(:class:`~headrace.MemoryBudgetWarning`) unless sized by AUTOTUNE. An element larger than the whole budget,
or a mandatory stage that alone would exceed it, raises :class:`~headrace.MemoryBudgetError` naming the
stage, the size, the budget and the fix; so do readers that hold their buffers while the others read
(``holds_between``: the Parquet readers an ``interleave`` keeps open) and need more than the budget together.

Every wait is a timed wait (``WAIT_SLICE_S``) that re-checks a stop event, so ``close()`` never hangs, and
a cancelled wait raises :class:`Cancelled` (internal; the iterator turns it into
:class:`~headrace.IteratorClosedError`).
"""

from __future__ import annotations

import math
import os
import re
import time
import warnings
from collections.abc import Callable
from typing import Any

import psutil

from ._errors import MemoryBudgetError, MemoryBudgetWarning
from ._sync import Condition
from ._sync import Lock as TimedLock

WAIT_SLICE_S = 0.05
STALL_S = 1.0
PROBE_WAIT_S = 0.2
"""How long more reservations of a stage wait for its first element's size (its probe) before they may go
ahead where they fit the stage's share (see the module docstring)."""

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: int | float | str, what: str = "memory_budget") -> int:
    """Parse a byte count: an int, or a string like ``"512MiB"``, ``"2GB"``, ``"1.5 GiB"``, ``"1024"``.

    Units: B, KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB (powers of 1024); case-insensitive.
    Raises ``ValueError`` naming ``what`` for anything else or a value < 1 byte.
    """
    if isinstance(value, bool):
        raise TypeError(f"{what}={value!r}: expected a byte count (int) or a string like '512MiB'")
    if isinstance(value, int | float):
        n = int(value)
    elif isinstance(value, str):
        m = _SIZE_RE.match(value)
        unit = m.group(2).lower() if m else None
        if not m or unit not in _UNITS:
            raise ValueError(f"{what}={value!r} is not a size; use bytes (e.g. 268435456) or a number with "
                             "a unit: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (e.g. '256MiB')")
        n = int(float(m.group(1)) * _UNITS[unit])
    else:
        raise TypeError(f"{what}={value!r}: expected a byte count (int) or a string like '512MiB'")
    if n < 1:
        raise ValueError(f"{what}={value!r} must be at least 1 byte; use e.g. '256MiB'")
    return n


def format_bytes(n: float) -> str:
    """``format_bytes(268435456) == '256.0 MiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of this process (or ``pid``) in bytes (psutil); 0 if it is gone."""
    try:
        return int((psutil.Process(pid) if pid else psutil.Process()).memory_info().rss)
    except psutil.Error:
        return 0


def default_budget_bytes() -> int:
    """50% of the memory available now (``psutil.virtual_memory().available``)."""
    return max(1, psutil.virtual_memory().available // 2)


class Cancelled(Exception):
    """Raised inside pipeline threads when a wait is interrupted by ``close()`` (never reaches users)."""


# ---- scope: the process budget and the share of a process tree ------------------------------------------
_scope_lock = TimedLock("memory budget scope")
_process_budget: MemoryBudget | None = None
_process_share = 1


def set_process_share(workers: int) -> None:
    """This process is one of ``workers`` that split a budget (a DataLoader worker): every budget made from
    now on in this process is ``1/workers`` of what the options say."""
    global _process_share, _process_budget
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"set_process_share(workers={workers!r}): must be an int >= 1")
    with _scope_lock:
        _process_share = workers
        _process_budget = None


def process_share() -> int:
    return _process_share


def process_budget() -> MemoryBudget:
    """The budget shared by every iterator of this process that sets no ``memory_budget`` (made at first
    use: 50% of the available memory, divided by :func:`process_share`)."""
    global _process_budget
    with _scope_lock:
        b = _process_budget
        if b is None or b.pid != os.getpid():
            b = _process_budget = MemoryBudget(max(1, default_budget_bytes() // _process_share), shared=True)
        return b


def budget_for(limit_bytes: int | None) -> MemoryBudget:
    """The budget of a new iterator: its own for an explicit limit, else the process budget."""
    if limit_bytes is None:
        return process_budget()
    return MemoryBudget(max(1, int(limit_bytes) // _process_share))


# ---- the budget ------------------------------------------------------------------------------------------
class MemoryBudget:
    """One byte limit shared by the buffering stages of one or more iterators (see the module docstring)."""

    def __init__(self, limit_bytes: int, *, shared: bool = False) -> None:
        if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes < 1:
            raise ValueError(f"memory budget {limit_bytes!r} must be an int >= 1 byte")
        self.limit_bytes = int(limit_bytes)
        self.shared = shared
        self.pid = os.getpid()
        self._cv = Condition("memory budget")
        self._accounts: list[StageAccount] = []
        self.total_bytes = 0
        self.peak_bytes = 0
        self.overdraft_bytes = 0
        self.miss_bytes = 0
        self.stalls = 0
        self.consumer_waiting = 0
        self.last_release_s = time.monotonic()
        self.assumed_element_bytes = 0
        self.waiters = 0  # threads blocked in reserve(): release() notifies only when there are any
        self.reserve_bytes = self.limit_bytes // 16  # kept outside every share (see _admit)
        self._overdraft_warned = False

    def account(self, stage: str, demand: int | None, *, mandatory: bool = False, min_units: int = 1,
                hint: str = "make elements smaller (e.g. resize earlier)", owner: object = None,
                group: str | None = None) -> StageAccount:
        """Open an account for ``stage`` wanting to hold up to ``demand`` elements (None = unbounded) and
        needing ``min_units`` to make progress. ``hint`` completes the ``MemoryBudgetError`` message.
        ``group``: accounts that share a limit of their own (``try_reserve(group_limit=...)``)."""
        acc = StageAccount(self, stage, demand, mandatory, max(1, min_units), hint, owner)
        acc.group = group
        with self._cv:
            self._accounts.append(acc)
            self._recompute_caps()
        return acc

    def accounts_of(self, owner: object) -> list[StageAccount]:
        """The open accounts of ``owner`` (an iterator's ``IteratorContext.owner``)."""
        with self._cv:
            return [a for a in self._accounts if a.owner is owner]

    def group_accounts(self, group: str) -> list[StageAccount]:
        """The open accounts of ``group`` (e.g. every stage's worker processes)."""
        with self._cv:
            return [a for a in self._accounts if a.group == group]

    def holders(self) -> str:
        """``"stage=size, ..."`` of the accounts holding bytes now (lock held), for messages."""
        return ", ".join(f"{a.stage}={format_bytes(a.held_bytes)}" for a in self._accounts if a.held_bytes)

    def sizes_unknown(self, other_than: StageAccount) -> bool:
        """Whether a stage other than ``other_than`` has not sized an element yet (its share is a guess)."""
        return any(not a.seen for a in self._accounts if a is not other_than)

    # caps ---------------------------------------------------------------------------------------------
    def _recompute_caps(self) -> None:
        """Max-min fair shares (lock held): minimums first, then mandatory demand, then water filling."""
        self.assumed_element_bytes = max((a.unit_bytes() for a in self._accounts if a.seen), default=0)
        self.reserve_bytes, caps = self._fair_caps(StageAccount.unit_bytes)
        for a, cap in zip(self._accounts, caps, strict=True):
            a.cap_bytes = cap

    def _fair_caps(self, unit_of: Callable[[StageAccount], int], accounts: list[StageAccount] | None = None,
                   *, at_start: bool = False) -> tuple[int, list[float]]:
        """The reserve and every account's cap (in the order of ``accounts``, default all) if one unit of each
        account's work took ``unit_of(account)`` bytes (lock held; nothing changes); ``at_start``: with the
        demands the stages started with, before AUTOTUNE moved them."""
        accounts = self._accounts if accounts is None else accounts
        demands = [a.start_demand if at_start else a.demand for a in accounts]
        units = [unit_of(a) for a in accounts]
        reserve = min(self.limit_bytes // 4, max(self.limit_bytes // 16, max(units, default=0)))
        remaining = float(self.limit_bytes - reserve)
        caps = [float(a.min_units * u) for a, u in zip(accounts, units, strict=True)]
        remaining -= sum(caps)

        def demand(i: int) -> float:
            d, u = demands[i], units[i]
            return 0.0 if u == 0 else math.inf if d is None else float(max(d, accounts[i].min_units)) * u

        for i, a in enumerate(accounts):
            if a.mandatory and remaining > 0:
                # An unbounded mandatory stage (an in-memory cache) is given what it holds and one more unit,
                # not everything: it is not limited by its cap anyway, and an infinite demand left every
                # other stage its minimum (cache().shuffle(100) shuffled with a buffer of one element).
                want = demand(i) if demands[i] is not None else float(a.held_bytes + units[i])
                extra = min(max(0.0, want - caps[i]), remaining)
                caps[i] += extra
                remaining -= extra
        elastic = sorted((i for i, a in enumerate(accounts) if not a.mandatory),
                         key=lambda i: demand(i) - caps[i])
        left = len(elastic)
        for i in elastic:
            share = max(0.0, remaining) / left
            want = max(0.0, demand(i) - caps[i])
            extra = want if want <= share else share
            caps[i] += extra
            remaining -= extra
            left -= 1
        return reserve, caps

    def model_share(self, acc: StageAccount, unit: int, below: tuple[str, ...]) -> tuple[float, bool]:
        """``acc``'s cap if its unit took ``unit`` bytes, each mandatory account of the stages ``below`` it (its
        input's, named ``stage`` or ``stage ...``: a reader's buffers, a batch being assembled) the larger of
        ``unit`` and its largest element (learned or made; not its reservations), its elastic ones (a prefetch,
        a parallel map: the elements it reads, as far as they have read ahead) and every other account
        ``unit`` (and whether there is any other such), each with the demand it started with: not what anyone
        holds now, how far the stages after it have run, nor what AUTOTUNE made of their buffers since, for a
        decision that must be reproducible (a seeded ``shuffle``'s byte capacity)."""
        prefixes = tuple(f"{name} " for name in below)
        others = False

        def unit_of(a: StageAccount) -> int:
            nonlocal others
            if a is acc:
                return unit
            if a.stage in below or a.stage.startswith(prefixes):
                return max(unit, a.max_element_bytes) if a.mandatory else unit
            others = True
            return unit

        with self._cv:  # the accounts of datasets made while the pipeline runs come and go with timing: left out
            accounts = [a for a in self._accounts if not a.nested or a is acc]
            _, caps = self._fair_caps(unit_of, accounts, at_start=True)
            return caps[accounts.index(acc)], others

    def _close_account(self, acc: StageAccount) -> None:
        with self._cv:
            self.total_bytes -= acc.held_bytes
            acc.held_bytes = 0
            acc.held_count = 0
            acc.outstanding = 0
            if acc in self._accounts:
                self._accounts.remove(acc)
                self._recompute_caps()
            self._cv.notify_all()

    def _note_total(self) -> None:
        if self.total_bytes > self.peak_bytes:
            self.peak_bytes = self.total_bytes

    # reporting ----------------------------------------------------------------------------------------
    def stats(self, owner: object = None) -> dict[str, Any]:
        """``limit_bytes``, ``current_bytes``, ``peak_bytes``, ``overdraft_bytes``, ``estimate_miss_bytes``,
        ``stalls`` and per stage ``current_bytes`` / ``peak_bytes`` / ``held_elements`` / ``demand_elements``
        / ``cap_bytes`` (only the stages of ``owner``'s iterator when given)."""
        with self._cv:
            stages = {}
            for a in self._accounts:
                if owner is not None and a.owner is not owner:
                    continue
                stages[a.stage] = {
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


class StageAccount:
    """The bytes one stage holds or has reserved. Thread-safe; every wait is timed and honours a stop event.

    ``held_bytes`` counts settled elements and outstanding reservations; ``held_count`` settled elements.
    """

    def __init__(self, budget: MemoryBudget, stage: str, demand: int | None, mandatory: bool, min_units: int,
                 hint: str, owner: object) -> None:
        self.budget = budget
        self.hint = hint
        self.stage = stage
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
        self.min_what: str | None = None  # what its min_units are, in a MemoryBudgetError (default "N elements")
        self._warned = False
        self.warnings: Any = None    # headrace._warn.PipelineWarnings (at the user's line, once per pipeline)
        self._probe_s = 0.0
        self._stalled_short = False  # the stall breaker reserved less than the estimate (reserve(partial=True))
        self.group: str | None = None
        self.promised_bytes = 0      # what it will need once it runs, counted by its group's limit meanwhile
        # Holds its unit while its stage does not run (a file reader's buffers, between the rows it yields):
        # the units of all such open accounts are held at the same time (see _check_together).
        self.holds_between = False
        # Keeps what it holds until the iterator closes (an in-memory cache, unique's values): see _check_feasible.
        self.keeps = False
        # Of a dataset made while the pipeline runs (an interleave's slot): left out of model_share.
        self.nested = False

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

    def demand_bytes(self) -> float:
        unit = self.unit_bytes()
        if unit == 0:
            return 0.0
        if self.demand is None:
            return math.inf
        return float(max(self.demand, self.min_units)) * unit

    # admission ----------------------------------------------------------------------------------------
    def _fits_cap(self, nbytes: int, urgent: bool, headroom: bool) -> bool:
        if self.mandatory:
            return True  # cannot emit part of what it holds: only the budget as a whole limits it
        if urgent or (self.held_bytes == 0 and not headroom):
            # The element the consumer waits for: only the budget as a whole limits it. A stage at its share
            # with elements it may not emit yet (a replay of a deterministic=False order, a result ahead of
            # the one awaited) would otherwise wait for itself until the stall breaker (1 s) fired.
            return True
        spare = self.unit_bytes() if headroom and not urgent else 0
        return self.held_bytes + nbytes + spare <= self.cap_bytes

    def _admit(self, nbytes: int, urgent: bool, headroom: bool, ignore_cap: bool = False,
               top_up: bool = False, charged_in: int = 0, speculative: bool = False) -> bool:
        b = self.budget
        if (not top_up and not self.seen and self.outstanding > 0
                and time.monotonic() - self._probe_s < PROBE_WAIT_S):
            return False  # probe: one element at a time until the first size is known (or a while passed)
        # The budget keeps a reserve outside every stage's share: only a reservation the pipeline cannot
        # progress without (the stage holds nothing, it is the element the consumer waits for, or the stage
        # cannot emit part of what it holds) may use it, so stages that filled up before the others'
        # element sizes were known (over their share after the shares are recomputed) cannot starve them.
        # A reader reading ahead (``speculative``, not the element the consumer waits for) leaves room for
        # one element of the largest size seen, even holding nothing: two readers that each took the last
        # element's room ahead of the consumer left none for the one it waits for (nested interleaves under
        # a budget of one element stalled until the stall breaker overdrew, issue 22).
        privileged = urgent or self.mandatory or (self.held_bytes == 0 and not speculative)
        keep = max(b.reserve_bytes, b.assumed_element_bytes) if speculative else b.reserve_bytes
        room = b.limit_bytes if privileged else b.limit_bytes - keep
        return b.total_bytes + nbytes <= room and (ignore_cap or self._fits_cap(nbytes + charged_in, urgent,
                                                                                 headroom))

    def cap_reached(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more would take this stage past its share (not just the budget past full)."""
        return self.held_bytes > 0 and self.held_bytes + nbytes > self.cap_bytes

    def _stalled(self, urgent: bool, speculative: bool = False) -> bool:
        """Holding nothing (or urgent, or a stage that cannot emit part of what it holds; not a read-ahead),
        blocked by the global limit, the consumer waiting, nothing released for ``STALL_S``: the pipeline
        cannot progress without this element."""
        b = self.budget
        idle = self.held_bytes == 0 and not speculative
        return ((idle or urgent or self.mandatory) and b.consumer_waiting > 0
                and time.monotonic() - b.last_release_s >= STALL_S)

    def _check_together(self, nbytes: int) -> None:
        """Accounts that hold their unit while their stage does not run (``holds_between``: the readers an
        ``interleave`` or a ``zip`` keeps open, each holding a row group's buffers while the others read) hold
        them at the same time: what they hold and this reservation, more than the budget together, can never
        fit, and used to stall (1 s each, overdrawn) at every turn of the cycle (two Parquet readers of
        104 MiB row groups under 160 MiB: 152 s, 5.8 GB overdrawn). Refused, naming them."""
        b = self.budget
        others = [a for a in b._accounts if a.holds_between and a is not self and a.held_bytes]
        if not others:  # (one that holds nothing now is not counted: a restore's replay of a reader not read)
            return
        needs = [(self.stage, self.held_bytes + nbytes)] + [(a.stage, a.held_bytes) for a in others]
        self._refuse_over(needs, f"{len(needs)} readers are open at once and each holds its buffers while the "
                                 "others read", "together", "read fewer at once (a smaller interleave cycle_length), "
                                 "raise Options(memory_budget=...)")

    def _refuse_over(self, needs: list[tuple[str, int]], what: str, when: str, fix: str) -> None:
        """``MemoryBudgetError`` naming each ``(stage, bytes)`` of ``needs`` if together they exceed the budget."""
        limit = self.budget.limit_bytes
        total = sum(n for _, n in needs)
        if total > limit:
            each = ", ".join(f"{stage} {format_bytes(n)}" for stage, n in needs)
            raise MemoryBudgetError(
                f"{what} ({each}): {format_bytes(total)} ({total} bytes) {when}, more than the whole memory "
                f"budget of {format_bytes(limit)} ({limit} bytes); {fix} or {self.hint}")

    def _check_feasible(self, nbytes: int) -> None:
        """At a stall (nothing released for ``STALL_S``, the consumer waiting): ``MemoryBudgetError`` if this
        reservation and what every other stage of the pipeline needs at once cannot fit the budget, instead of
        overdrawing it. Each other stage counts what it cannot give back before this reservation is served:
        a stage that keeps its bytes (``keeps``: an in-memory cache) or holds them between reads
        (``holds_between``) what it holds, a mandatory stage the larger of what it holds and its minimum, any
        other its minimum (those whose elements are sized). The stall breaker overdrew whenever the stage
        itself, alone, fitted: a memory cache holding 15 MiB of 16 left no room for the window's batch below
        it (stall after stall, 12 MiB overdrawn, then the cache's own refusal); a Parquet reader's 40 MiB of
        buffers, a process map's call and its first worker went 17 MiB over 96 MiB (issue 22 sweep seeds 121
        and 65)."""
        b = self.budget
        needs = [(self.stage, nbytes + (self.held_bytes if self.mandatory else 0))]
        for a in b._accounts:
            if a is self or a.owner is not self.owner:
                continue
            least = a.min_bytes() if a.seen else 0.0
            if a.keeps or a.holds_between or a.mandatory:
                least = max(float(a.held_bytes), least)
            if least > 0:
                needs.append((a.stage, int(least)))
        self._refuse_over(needs, f"{self.stage}: needs {format_bytes(nbytes)} more while the pipeline's stages "
                                 "hold what they cannot give back first and need their minimum", "at once",
                          "raise Options(memory_budget=...)")

    def _check_possible(self, nbytes: int) -> None:
        limit = self.budget.limit_bytes
        if self.holds_between:
            self._check_together(nbytes)
        if self.mandatory and self.seen and self.min_bytes() > limit:
            need = self.min_bytes()
            what = self.min_what or f"{self.min_units} elements"
            raise MemoryBudgetError(
                f"{self.stage}: needs room for {what} of up to "
                f"{format_bytes(self.unit_bytes())} at once ({format_bytes(need)}), more than the whole memory "
                f"budget of {format_bytes(limit)} ({limit} bytes); raise Options(memory_budget=...) or {self.hint}")
        if self.mandatory and self.held_bytes + nbytes > limit:
            total = self.held_bytes + nbytes
            raise MemoryBudgetError(
                f"{self.stage}: holding {format_bytes(total)} ({total} bytes) would exceed the whole memory "
                f"budget of {format_bytes(limit)} ({limit} bytes); raise Options(memory_budget=...) or "
                f"{self.hint}")
        if nbytes > limit:
            raise MemoryBudgetError(
                f"{self.stage}: needs {format_bytes(nbytes)} ({nbytes} bytes) at once (an element, or a "
                f"function's input and output together), more than the whole memory budget of "
                f"{format_bytes(limit)} ({limit} bytes); raise Options(memory_budget=...) or {self.hint}")

    def check_possible(self, nbytes: int) -> None:
        """``MemoryBudgetError`` if ``nbytes`` at once (a call's input and output that exist now, found larger
        than any estimate) can never fit this stage (as ``reserve`` checks a reservation): refused before
        ``settle`` charges their excess past the budget (issue 22: a map's first call, 2 MiB in and 2 MiB out
        under 3 MiB, went 1 MiB over before the next reservation refused)."""
        with self.budget._cv:
            self._check_possible(nbytes)

    def _take(self, nbytes: int) -> None:
        b = self.budget
        self.held_bytes += nbytes
        b.total_bytes += nbytes
        if self.held_bytes > self.peak_bytes:
            self.peak_bytes = self.held_bytes
        b._note_total()

    def _reserved(self, nbytes: int, unit: bool) -> int:
        if not self.seen and self.outstanding == 0:
            self._probe_s = time.monotonic()
        self.outstanding += 1
        if unit and nbytes > self.max_reserved_bytes:
            self.max_reserved_bytes = nbytes
            if self.seen:  # the unit of work grew (e.g. a map's input + output): shares change
                self.budget._recompute_caps()
        self._take(nbytes)
        return nbytes

    # the API ------------------------------------------------------------------------------------------
    def try_reserve(self, nbytes: int, *, urgent: bool = False, headroom: bool = False,
                    unit: bool = True, group_limit: int | None = None, charged_in: int = 0) -> int | None:
        """Reserve ``nbytes`` if they fit now (returns the reservation), else None; never blocks.
        ``group_limit``: the accounts of this one's ``group`` together stay within it as well, each of the
        others counting at least its ``promised_bytes`` (what it needs to run at all). ``charged_in``: as in
        ``reserve``."""
        b = self.budget
        with b._cv:
            if group_limit is not None and self.held_bytes + nbytes + sum(
                    max(a.held_bytes, a.promised_bytes) for a in b._accounts
                    if a.group == self.group and a is not self) > group_limit:
                return None
            self._check_possible(nbytes)
            if self._admit(nbytes, urgent, headroom, charged_in=charged_in):
                return self._reserved(nbytes, unit)
            self._maybe_warn_shrunk()
            return None

    def reserve(self, nbytes: int, stop: Any = None, *, urgent: Callable[[], bool] | None = None,
                headroom: bool = False, unit: bool = True, ignore_cap: bool = False, top_up: bool = False,
                partial: bool = False, charged_in: int = 0, speculative: bool = False,
                refuse: Callable[[str, int], str] | None = None) -> int:
        """Wait (in timed slices) until ``nbytes`` fit, reserve them and return the reservation.

        ``headroom``: keep one unit of this stage's cap free for an urgent reservation; ``urgent()`` true
        marks the reservation the consumer waits for (it may use the headroom). ``unit=False``: this
        reservation is not one unit of the stage's work (a whole batch being stacked in an account whose
        unit is one element) and does not grow the stage's unit size. ``ignore_cap``: only the budget as a
        whole limits it (a shuffle buffer filling a byte capacity it fixed earlier, a restore rebuilding a
        buffer that existed). ``top_up``: it grows this stage's own outstanding reservation (a batch sized by
        an element it holds), so it is no second probe and does not wait for the first settle (the caller
        then calls ``merge_reservation``). ``partial``: ``nbytes`` is an estimate (the largest element seen) of
        an element that ``settle`` sizes later; when the stall breaker fires, only what still fits in the
        budget is reserved and ``settle`` charges any real excess, so the budget is exceeded by real bytes only,
        not by an estimate the element may never reach (found by ``bench/promises.py``: 256 B / 12 MiB records
        went 11 KB over for a 12 MiB estimate). ``charged_in``: this many more bytes will be handed into the
        reservation by the stage below, charged already (``headrace._handoff``): they count against this
        stage's share, not against the budget again. ``speculative``: a read-ahead (a pool's worker); unless
        urgent it leaves room for one element of the largest size seen (see ``_admit``) and never
        overdraws. ``refuse``: where the stall breaker would overdraw, raise ``MemoryBudgetError`` with the text
        ``refuse(holders, total)`` builds instead (a reader's buffers: the stages holding the rest of the budget
        wait for the read, so the overdraft would come back at every read). ``stop``: anything with ``is_set()``.
        Raises ``MemoryBudgetError`` if they can never fit, ``Cancelled`` if ``stop`` is set meanwhile.
        """
        b = self.budget
        with b._cv:
            self._check_possible(nbytes)
            while True:
                is_urgent = urgent is not None and urgent()
                if self._admit(nbytes, is_urgent, headroom, ignore_cap, top_up, charged_in, speculative):
                    break
                self._maybe_warn_shrunk()
                if stop is not None and stop.is_set():
                    raise Cancelled()
                if (self.seen or self.outstanding == 0 or top_up) and self._stalled(is_urgent, speculative):
                    if refuse is not None:
                        raise MemoryBudgetError(refuse(b.holders(), b.total_bytes + nbytes))
                    fit = min(nbytes, max(0, b.limit_bytes - b.total_bytes))
                    if partial and fit < nbytes:  # (settle refuses the element if its real size cannot fit)
                        b.stalls += 1
                        self._stalled_short = True  # settle warns if the element does go over
                        return self._reserved(fit, unit)
                    if fit < nbytes:
                        self._check_feasible(nbytes)
                    self._overdraft(nbytes)
                    break
                b.waiters += 1
                try:
                    b._cv.wait(WAIT_SLICE_S)
                finally:
                    b.waiters -= 1
            return self._reserved(nbytes, unit)

    def hold(self, nbytes: int, count: int = 1) -> None:
        """Charge ``count`` elements of ``nbytes`` in total that exist already and must be kept, without
        waiting (a restore rebuilding a buffer the saved run held: waiting for room that the input being
        re-read holds could deadlock)."""
        b = self.budget
        with b._cv:
            self.held_count += count
            per = -(-nbytes // count) if count else nbytes
            grew = per > self.max_element_bytes or not self.seen
            if per > self.max_element_bytes:
                self.max_element_bytes = per
            self.seen = True
            self._take(nbytes)
            if grew:
                b._recompute_caps()

    def set_demand(self, demand: int | None, *, start: bool = False) -> None:
        """The stage now wants up to ``demand`` elements (AUTOTUNE changed its buffer): shares recomputed.
        ``start``: the stage's starting value, set while the pipeline is built (``start_demand``)."""
        b = self.budget
        with b._cv:
            if start:
                self.start_demand = demand
            if demand != self.demand:
                self.demand = demand
                b._recompute_caps()
                if b.waiters:
                    b._cv.notify_all()

    def learn_sizes(self, element: int, reserved: int) -> None:
        """Know the largest element and reservation a saved run had learned (``Iterator.set_state``): a restored
        stage that has produced nothing yet shares the budget as the saved one did, not by a guess."""
        b = self.budget
        with b._cv:
            self.max_element_bytes = max(self.max_element_bytes, int(element))
            self.max_reserved_bytes = max(self.max_reserved_bytes, int(reserved))
            self.seen = True
            b._recompute_caps()
            if b.waiters:
                b._cv.notify_all()

    def grow_unit(self, nbytes: int) -> None:
        """One unit of this stage's work now takes ``nbytes`` (e.g. a worker process whose footprint grew):
        the shares are computed again."""
        b = self.budget
        with b._cv:
            if nbytes > self.max_element_bytes or not self.seen:
                self.max_element_bytes = max(self.max_element_bytes, nbytes)
                self.seen = True
                b._recompute_caps()

    def force(self, nbytes: int, *, refuse: bool = False) -> None:
        """Charge ``nbytes`` that already exist beyond what was reserved for them, without waiting (an
        element larger than its estimate, a worker process that grew); counted as an estimate miss.
        ``refuse``: where they would go over the budget and cannot fit beside what the other stages cannot
        give back first (``_check_feasible``), raise ``MemoryBudgetError`` instead, nothing charged."""
        b = self.budget
        with b._cv:
            if refuse and b.total_bytes + nbytes > b.limit_bytes:
                self._check_feasible(nbytes if self.mandatory else self.held_bytes + nbytes)
            b.miss_bytes += nbytes
            self._take(nbytes)

    def settle(self, reserved: int, actual: int, count: int = 1, *, unit: bool = True,
               largest: int | None = None, refuse: bool = True) -> None:
        """Turn a reservation into ``count`` held elements of ``actual`` bytes in total.

        Less than reserved: the rest is released. More (an element larger than any before it): the excess
        is charged at once and counted as an estimate miss; the estimate grows (``unit=False``: not an
        element of this stage's unit size, e.g. a stacked batch). An excess that would go over the budget
        where this element and what the other stages cannot give back first can never fit together
        (``_check_feasible``) raises ``MemoryBudgetError`` instead, nothing changed (the caller cancels the
        reservation or the iterator's close gives it back): sweep seeds 390 and 454 overdrew by an element
        larger than its estimate just before the stall breaker refused. ``refuse=False``: charge it anyway
        (memory measured after the fact, e.g. a worker process's RSS).
        """
        b = self.budget
        with b._cv:
            if refuse and actual > reserved and b.total_bytes + actual - reserved > b.limit_bytes:
                self._check_feasible(actual - reserved if self.mandatory else actual)
            self.outstanding -= 1
            self.held_count += count
            per = largest if largest is not None else (-(-actual // count) if count else actual)
            grew = False
            if unit and per > self.max_element_bytes:
                self.max_element_bytes = per
                grew = True
            if not self.seen:
                self.seen = True
                grew = True
            delta = actual - reserved
            if delta > 0:
                b.miss_bytes += delta
                over = max(0, b.total_bytes - b.limit_bytes)
                self._take(delta)
                went_over = max(0, b.total_bytes - b.limit_bytes) - over  # an element past the budget
                b.overdraft_bytes += went_over
                if went_over and self._stalled_short:
                    self._warn_over(actual)
            elif delta < 0:
                self.held_bytes += delta
                b.total_bytes += delta
                b.last_release_s = time.monotonic()
                if b.waiters:
                    b._cv.notify_all()
            self._stalled_short = False
            if self.mandatory and self.demand is None and self.held_bytes > self.cap_bytes:
                grew = True  # an unbounded mandatory stage outgrew its share: the others' shares shrink
            if grew:
                b._recompute_caps()
                if b.waiters:
                    b._cv.notify_all()

    def move_to(self, other: StageAccount, nbytes: int, count: int = 1) -> None:
        """Hand ``count`` held elements of ``nbytes`` to ``other``'s open reservation (same budget; the total
        does not change: ``headrace._handoff``)."""
        b = self.budget
        with b._cv:
            self.held_bytes -= nbytes
            self.held_count -= count
            other.held_bytes += nbytes
            if other.held_bytes > other.peak_bytes:
                other.peak_bytes = other.held_bytes
            if b.waiters:
                b._cv.notify_all()

    def merge_reservation(self) -> None:
        """The last ``reserve`` adds to an outstanding reservation (one ``settle`` / ``cancel`` for both)."""
        with self.budget._cv:
            self.outstanding -= 1

    def cancel(self, reserved: int) -> None:
        """Give back a reservation that produced no element (end of input, an error, a stop)."""
        b = self.budget
        with b._cv:
            self.outstanding -= 1
            self.held_bytes -= reserved
            b.total_bytes -= reserved
            b.last_release_s = time.monotonic()
            if b.waiters:
                b._cv.notify_all()

    def release(self, nbytes: int, count: int = 1) -> None:
        """Hand ``count`` held elements of ``nbytes`` in total on (or drop them)."""
        b = self.budget
        with b._cv:
            self.held_bytes -= nbytes
            self.held_count -= count
            b.total_bytes -= nbytes
            b.last_release_s = time.monotonic()
            if b.waiters:
                b._cv.notify_all()

    def adjust(self, delta: int) -> None:
        """Change the bytes held without a wait (memory that already exists, e.g. recycled buffers)."""
        b = self.budget
        with b._cv:
            self.held_bytes += delta
            b.total_bytes += delta
            if delta > 0:
                if self.held_bytes > self.peak_bytes:
                    self.peak_bytes = self.held_bytes
                b._note_total()
            else:
                b.last_release_s = time.monotonic()
                if b.waiters:
                    b._cv.notify_all()

    def close(self) -> None:
        """Release everything still held and leave the budget (the caps are shared out again)."""
        self.budget._close_account(self)

    # reports ------------------------------------------------------------------------------------------
    def _overdraft(self, nbytes: int) -> None:
        b = self.budget
        b.stalls += 1
        b.overdraft_bytes += max(0, b.total_bytes + nbytes - b.limit_bytes)
        self._warn_over(nbytes)

    def _warn_over(self, nbytes: int) -> None:
        b = self.budget
        if not b._overdraft_warned:
            b._overdraft_warned = True
            holders = b.holders()
            where, fix = self._budget_words(f"{format_bytes(b.limit_bytes)}")
            self._warn(("over", self.stage),
                       f"headrace: {self.stage} needed {format_bytes(nbytes)} while the memory budget of "
                       f"{where} was held by buffers that cannot drain first ({holders}); it went over the "
                       f"budget instead of deadlocking. {fix[0].upper() + fix[1:]} or lower buffer sizes.")

    def _budget_words(self, default: str) -> tuple[str, str]:
        """How a warning names the budget and its fix: as the user set it (``self.warnings``, e.g. the CLI's
        ``--memory-budget 384MiB``), else ``default`` and the Options fix."""
        w = self.warnings
        return (w.budget, w.fix) if w is not None else (default, "raise Options(memory_budget=...)")

    def _warn(self, key: tuple[str, str], message: str) -> None:
        if self.warnings is not None:
            self.warnings.warn(key, message, MemoryBudgetWarning)
        else:
            warnings.warn(message, MemoryBudgetWarning, stacklevel=4)

    def _maybe_warn_shrunk(self) -> None:
        if self._warned or not self.warn_shrink or self.demand is None:
            return
        if self.held_count == 0 or self.held_count >= self.demand:
            return
        if self.held_bytes + self.max_element_bytes <= self.cap_bytes or self.cap_bytes >= self.demand_bytes():
            return  # room left, or the share is all it asked for (not shrunk by the budget)
        self.warn_shrunk()

    def warn_shrunk(self) -> None:
        """Say once that this stage runs with fewer elements than configured (not for AUTOTUNE sizes)."""
        if self._warned or not self.warn_shrink or self.demand is None:
            return
        self._warned = True
        where, fix = self._budget_words(f"memory_budget={format_bytes(self.budget.limit_bytes)}")
        self._warn(("shrunk", self.stage),
                   f"headrace: {self.stage} was configured for {self.demand} elements but holds at most about "
                   f"{self.held_count} (elements up to {format_bytes(self.max_element_bytes)}) within {where}, "
                   f"shared with the pipeline's other buffers; it runs with the smaller buffer. "
                   f"{fix[0].upper() + fix[1:]} or lower the buffer size to silence this.")
