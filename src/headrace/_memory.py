"""The memory budget: every byte a pipeline holds is charged, before it exists, against one byte limit.

``Options(memory_budget=X)`` gives the pipeline its own budget of ``X`` bytes; without it every iterator of
the process shares one *process budget* (:func:`process_budget`: 50% of the memory available when the first
iterator is made), and inside a PyTorch ``DataLoader`` worker the budgets made inside :func:`budget_share`
are that worker's share. A stage reserves an element's bytes before it pulls or makes it
(:meth:`StageAccount.reserve`), settles the :class:`Reservation` to the real size once the element exists,
and releases it when it hands the element on; fair shares, the reserve, headroom, the stall breaker and the
refusals live in :mod:`headrace._budget` (``ledger``, ``account``, ``policy``, ``admission``, ``shares``,
``refusals``, ``notices``, ``sizes``). Why it is built so, with a picture: docs/design/budget.md. This
module keeps the scope (the process budget and the share of a process tree) and re-exports the names the
engine imports from here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from ._budget.account import Reservation, StageAccount
from ._budget.admission import PROBE_WAIT_S, STALL_S, WAIT_SLICE_S, Cancelled
from ._budget.ledger import MemoryBudget
from ._budget.policy import ELEMENT, READ_AHEAD, TOP_UP, UNCAPPED, WHOLE, WHOLE_UNCAPPED, Policy
from ._budget.sizes import default_budget_bytes, format_bytes, parse_bytes, rss_bytes
from ._sync import Lock as TimedLock

__all__ = ["ELEMENT", "PROBE_WAIT_S", "READ_AHEAD", "STALL_S", "TOP_UP", "UNCAPPED", "WAIT_SLICE_S", "WHOLE",
           "WHOLE_UNCAPPED", "Cancelled", "MemoryBudget", "Policy", "Reservation", "StageAccount", "budget_for",
           "budget_share", "default_budget_bytes", "format_bytes", "parse_bytes", "process_budget",
           "process_share", "rss_bytes"]


# ---- scope: the process budget and the share of a process tree ------------------------------------------
_scope_lock = TimedLock("memory budget scope")
_process_budget: MemoryBudget | None = None  # the process budget (share 1)
_worker_budgets: dict[int, MemoryBudget] = {}  # the process budget of a process that is one of several
_share: ContextVar[int] = ContextVar("headrace_budget_share", default=1)
"""The number of processes that split the budgets made here (a DataLoader's workers): set by
:func:`budget_share` around what the worker builds and runs, never process-wide by default."""


def _workers(workers: int, what: str) -> int:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"{what}(workers={workers!r}): must be an int >= 1")
    return workers


@contextmanager
def budget_share(workers: int) -> Iterator[None]:
    """Inside: this process is one of ``workers`` that split a budget (a DataLoader worker building or
    advancing its iterator, ``headrace.torch``): the budgets made here are ``1/workers`` of what the options
    say (the process budget included: one per share)."""
    token = _share.set(_workers(workers, "budget_share"))
    try:
        yield
    finally:
        _share.reset(token)


def process_share() -> int:
    """The share the budgets made here now take (:func:`budget_share`)."""
    return _share.get(1)  # (1: no share set in this context)


def process_budget(share: int | None = None) -> MemoryBudget:
    """The budget shared by every iterator of this process that sets no ``memory_budget`` (made at first
    use: 50% of the available memory, divided by ``share``, default :func:`process_share`)."""
    global _process_budget
    share = process_share() if share is None else _workers(share, "process_budget")
    with _scope_lock:
        b = _process_budget if share == 1 else _worker_budgets.get(share)
        if b is None or b.pid != os.getpid():
            b = MemoryBudget(max(1, default_budget_bytes() // share), shared=True, share=share)
            if share == 1:
                _process_budget = b
            else:
                _worker_budgets[share] = b
        return b


def budget_for(limit_bytes: int | None, share: int | None = None) -> MemoryBudget:
    """The budget of a new iterator: its own for an explicit limit, else the process budget; ``1/share`` of
    it (default :func:`process_share`)."""
    share = process_share() if share is None else _workers(share, "budget_for")
    if limit_bytes is None:
        return process_budget(share)
    return MemoryBudget(max(1, int(limit_bytes) // share), share=share)
