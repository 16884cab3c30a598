"""The memory budget: every buffered element is charged against one byte limit per iterator tree.

Model
-----
One :class:`MemoryBudget` is created per iterator tree (``iter(dataset)``), from
``Options(memory_budget=...)``. Every stage that *holds* elements (prefetch buffers, the shuffle buffer,
parallel map / interleave / batch results, batch assembly, the in-memory cache, unbatch) opens a
:class:`StageAccount` and calls ``acquire(nbytes)`` before holding an element and ``release(nbytes)``
when it hands the element on. Element size is :func:`headrace._structure.nbytes` (numpy ``nbytes`` plus
``bytes`` / ``str`` lengths).

Invariant (checked under one lock): ``sum(account.held_bytes) <= limit_bytes`` at all times, so the tracked
peak never exceeds the budget. An element handed from one stage to the next is, for that moment, held by
neither (at most one element in transit per stage).

No deadlock between competing buffers
-------------------------------------
The budget is divided into per-stage *caps* by max-min fair sharing ("water filling"): each account
declares a demand in elements (``shuffle(10_000)`` -> 10,000, ``prefetch(2)`` -> 2); demand in bytes is
that count times the largest element the stage has seen. *Mandatory* accounts (batch assembly, unbatch,
cache: they cannot emit part of what they hold) are served first; elastic accounts share the rest, small
demands in full, large ones capped at the common water level. Because the caps add up to at most the
budget, a stage never waits for bytes another stage holds within its cap: it waits only for its own
consumer to drain it. A stage holding nothing may always take one element if the global total allows, so
every stage can make progress with a single element.

An account that has not seen an element yet is assumed to hold elements as large as the largest seen
anywhere in the pipeline, so buffers that fill first leave room for the stages after them.

Stall breaker: if, despite the caps, a stage waits on the *global* limit (it is within its own cap) while
the consumer is blocked in ``next()`` and no bytes have been released anywhere for ``STALL_S`` seconds, the
pipeline cannot progress without it: the stage takes its element as an *overdraft* (counted in
``memory_stats()["overdraft_bytes"]``, warned once) instead of hanging. The element already exists in
memory, so accounting for it over the limit is the honest report; it happens only when caps were
recomputed while other stages held more than their new share.

A stage whose cap is below its configured demand is *shrunk*; it warns once
(:class:`~headrace.MemoryBudgetWarning`), naming the stage, the element count it can hold and the budget.

An element larger than the whole budget, or a mandatory stage (a batch being assembled) that alone would
exceed it, raises :class:`~headrace.MemoryBudgetError` naming the stage, the size and the budget.

Blocking waits are always timed (``WAIT_SLICE_S``) and re-check a stop event, so ``close()`` never hangs.
"""

from __future__ import annotations

import math
import re
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import psutil

from ._errors import MemoryBudgetError, MemoryBudgetWarning

WAIT_SLICE_S = 0.05
STALL_S = 1.0

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


def default_budget_bytes() -> int:
    """50% of the memory available now (``psutil.virtual_memory().available``)."""
    return max(1, psutil.virtual_memory().available // 2)


class Cancelled(Exception):
    """Raised inside pipeline threads when a wait is interrupted by ``close()`` (never reaches users)."""


class MemoryBudget:
    """One byte limit shared by every buffering stage of an iterator tree (see the module docstring)."""

    def __init__(self, limit_bytes: int) -> None:
        if limit_bytes < 1:
            raise ValueError(f"memory budget {limit_bytes} must be >= 1 byte")
        self.limit_bytes = int(limit_bytes)
        self._cv = threading.Condition(threading.Lock())
        self._accounts: list[StageAccount] = []
        self.total_bytes = 0
        self.peak_bytes = 0
        self.overdraft_bytes = 0
        self.consumer_waiting = 0
        self.last_release_s = time.monotonic()
        self.assumed_element_bytes = 0
        self.waiters = 0  # threads blocked in acquire(): release() notifies only when there are any
        self._overdraft_warned = False

    def account(self, stage: str, demand: int | None, *, mandatory: bool = False,
                hint: str = "make elements smaller (e.g. resize earlier)") -> StageAccount:
        """Open an account for ``stage`` wanting to hold up to ``demand`` elements (None = unbounded).

        ``hint`` completes the ``MemoryBudgetError`` message: how to make this stage fit.
        """
        acc = StageAccount(self, stage, demand, mandatory, hint)
        with self._cv:
            self._accounts.append(acc)
        return acc

    def _recompute_caps(self) -> None:
        """Max-min fair shares; called with the lock held when a demand estimate grows."""
        self.assumed_element_bytes = max((a.max_element_bytes for a in self._accounts), default=0)
        remaining = float(self.limit_bytes)
        mandatory = [a for a in self._accounts if a.mandatory]
        elastic = [a for a in self._accounts if not a.mandatory]
        for a in mandatory:
            a.cap_bytes = a.demand_bytes()
            remaining -= min(a.cap_bytes, remaining)
        order = sorted(elastic, key=lambda a: a.demand_bytes())
        left = len(order)
        for a in order:
            share = remaining / left
            want = a.demand_bytes()
            a.cap_bytes = want if want <= share else share
            remaining -= a.cap_bytes
            left -= 1

    def _close_account(self, acc: StageAccount) -> None:
        with self._cv:
            self.total_bytes -= acc.held_bytes
            acc.held_bytes = 0
            acc.held_count = 0
            if acc in self._accounts:
                self._accounts.remove(acc)
                self._recompute_caps()
            self._cv.notify_all()

    def stats(self) -> dict[str, Any]:
        """``{"limit_bytes", "current_bytes", "peak_bytes", "stages": {name: {...}}}``."""
        with self._cv:
            stages = {}
            for a in self._accounts:
                stages[a.stage] = {
                    "current_bytes": a.held_bytes,
                    "peak_bytes": a.peak_bytes,
                    "held_elements": a.held_count,
                    "demand_elements": a.demand,
                    "cap_bytes": None if math.isinf(a.cap_bytes) else int(a.cap_bytes),
                }
            return {"limit_bytes": self.limit_bytes, "current_bytes": self.total_bytes,
                    "peak_bytes": self.peak_bytes, "overdraft_bytes": self.overdraft_bytes, "stages": stages}


class StageAccount:
    """The bytes one stage holds. Thread-safe; all waits are timed and honour a stop event."""

    def __init__(self, budget: MemoryBudget, stage: str, demand: int | None, mandatory: bool, hint: str) -> None:
        self.budget = budget
        self.hint = hint
        self.stage = stage
        self.demand = demand
        self.mandatory = mandatory
        self.held_bytes = 0
        self.held_count = 0
        self.peak_bytes = 0
        self.max_element_bytes = 0
        self.cap_bytes: float = float(budget.limit_bytes)
        self.warn_shrink = True  # AUTOTUNE-sized stages shrink silently
        self._warned = False

    def demand_bytes(self) -> float:
        size = self.max_element_bytes or self.budget.assumed_element_bytes
        if size == 0:
            return 0.0
        if self.demand is None:
            return math.inf
        return float(self.demand) * size

    def _observe(self, nbytes: int, count: int) -> None:
        if count == 0:  # a top-up of bytes already counted as elements
            return
        per = -(-nbytes // count)
        if per > self.max_element_bytes:
            self.max_element_bytes = per
            self.budget._recompute_caps()

    def _within_cap(self, nbytes: int, urgent: Callable[[], bool] | None = None) -> bool:
        return (self.held_count == 0 or self.held_bytes + nbytes <= self.cap_bytes
                or (urgent is not None and urgent()))

    def _fits(self, nbytes: int, urgent: Callable[[], bool] | None = None) -> bool:
        b = self.budget
        return b.total_bytes + nbytes <= b.limit_bytes and self._within_cap(nbytes, urgent)

    def _stalled(self, nbytes: int, urgent: Callable[[], bool] | None) -> bool:
        """Waiting on the global limit only, with the consumer blocked and no release for STALL_S."""
        b = self.budget
        return (b.consumer_waiting > 0 and self._within_cap(nbytes, urgent)
                and time.monotonic() - b.last_release_s >= STALL_S)

    def _check_possible(self, nbytes: int) -> None:
        limit = self.budget.limit_bytes
        if self.mandatory and self.held_bytes + nbytes > limit:
            total = self.held_bytes + nbytes
            raise MemoryBudgetError(
                f"{self.stage}: holding {format_bytes(total)} ({total} bytes) would exceed the whole memory "
                f"budget of {format_bytes(limit)} ({limit} bytes); raise Options(memory_budget=...) or "
                f"{self.hint}")
        if nbytes > limit:
            raise MemoryBudgetError(
                f"{self.stage}: an element of {format_bytes(nbytes)} ({nbytes} bytes) is larger than the "
                f"whole memory budget of {format_bytes(limit)} ({limit} bytes); raise "
                f"Options(memory_budget=...) or {self.hint}")

    def _take(self, nbytes: int, count: int) -> None:
        b = self.budget
        self.held_bytes += nbytes
        self.held_count += count
        b.total_bytes += nbytes
        if self.held_bytes > self.peak_bytes:
            self.peak_bytes = self.held_bytes
        if b.total_bytes > b.peak_bytes:
            b.peak_bytes = b.total_bytes

    def try_acquire(self, nbytes: int, count: int = 1) -> bool:
        """Take ``nbytes`` if they fit this stage's cap and the budget now; never blocks."""
        b = self.budget
        with b._cv:
            self._check_possible(nbytes)
            self._observe(nbytes, count)
            if self._fits(nbytes):
                self._take(nbytes, count)
                return True
            self._maybe_warn_shrunk()
            return False

    def acquire(self, nbytes: int, stop: threading.Event | None = None, count: int = 1,
                urgent: Callable[[], bool] | None = None) -> None:
        """Wait (in timed slices) until ``nbytes`` fit, then take them.

        ``urgent()`` true lets this element past the stage's own cap (the element the consumer waits for
        in an ordered buffer that out-of-order results have filled); the global limit still holds.
        Raises ``MemoryBudgetError`` if they can never fit, ``Cancelled`` if ``stop`` is set meanwhile.
        """
        b = self.budget
        with b._cv:
            self._check_possible(nbytes)
            self._observe(nbytes, count)
            while not self._fits(nbytes, urgent):
                self._maybe_warn_shrunk()
                if stop is not None and stop.is_set():
                    raise Cancelled()
                if self._stalled(nbytes, urgent):
                    self._overdraft(nbytes)
                    break
                b.waiters += 1
                try:
                    b._cv.wait(WAIT_SLICE_S)
                finally:
                    b.waiters -= 1
            self._take(nbytes, count)

    def _overdraft(self, nbytes: int) -> None:
        b = self.budget
        b.overdraft_bytes += max(0, b.total_bytes + nbytes - b.limit_bytes)
        if not b._overdraft_warned:
            b._overdraft_warned = True
            holders = ", ".join(f"{a.stage}={format_bytes(a.held_bytes)}" for a in b._accounts if a.held_bytes)
            warnings.warn(
                f"headrace: {self.stage} needed {format_bytes(nbytes)} while the memory budget of "
                f"{format_bytes(b.limit_bytes)} was held by buffers that cannot drain first ({holders}); it "
                "went over the budget instead of deadlocking. Raise Options(memory_budget=...) or lower buffer "
                "sizes.", MemoryBudgetWarning, stacklevel=3)

    def release(self, nbytes: int, count: int = 1) -> None:
        b = self.budget
        with b._cv:
            self.held_bytes -= nbytes
            self.held_count -= count
            b.total_bytes -= nbytes
            b.last_release_s = time.monotonic()
            if b.waiters:
                b._cv.notify_all()

    def close(self) -> None:
        """Release everything still held and leave the budget (the caps are shared out again)."""
        self.budget._close_account(self)

    def _maybe_warn_shrunk(self) -> None:
        if self._warned or not self.warn_shrink or self.demand is None:
            return
        if self.held_count == 0 or self.held_count >= self.demand:
            return
        if self.held_bytes + self.max_element_bytes <= self.cap_bytes:
            return
        self._warned = True
        warnings.warn(
            f"headrace: {self.stage} was configured for {self.demand} elements but holds at most about "
            f"{self.held_count} (elements up to {format_bytes(self.max_element_bytes)}) within "
            f"memory_budget={format_bytes(self.budget.limit_bytes)}, shared with the pipeline's other "
            "buffers; it runs with the smaller buffer. Raise Options(memory_budget=...) or lower the "
            "buffer size to silence this.",
            MemoryBudgetWarning, stacklevel=2)
