"""The memory budget: every byte a pipeline holds is charged, before it exists, against one byte limit.

Scope
-----
``Options(memory_budget=X)`` gives the pipeline its own budget of ``X`` bytes. Without it, every iterator of
the process shares one *process budget* (:func:`process_budget`): 50% of the memory available when the
first iterator is made. Inside a PyTorch ``DataLoader`` worker (``headrace.torch.to_torch``) the process
budget and explicit budgets are divided by the number of workers, so a process tree as a whole stays
inside the budget: the budgets made inside :func:`budget_share` (the worker's iterator) are that share.

Reserve, then produce
---------------------
Every stage that holds elements (prefetch buffers, the shuffle buffer, parallel map results and the work in
its workers, interleave read-ahead, batch assembly and the batch being stacked, unbatch, the in-memory
cache) opens a :class:`StageAccount`. Before it pulls or creates an element it **reserves** an estimate of
its bytes (:meth:`StageAccount.reserve`: the largest such element the stage has seen), with the kind of
reservation the stage declared once (a :class:`Policy`, ``headrace._budget.policy``); once the element exists
it **settles** the :class:`Reservation` to the element's real size (:meth:`Reservation.settle`; one that
produced nothing is cancelled, a ``with`` block cancels it unless settled), and it
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
part instead of an overdraft (:mod:`headrace._budget.refusals`). A reservation that would come back stalled at
every turn (a file reader's buffers, ``Policy(refuse=...)``) raises ``MemoryBudgetError`` at its stall in any
case.

A pool's worker reading ahead (``policy.READ_AHEAD``, not the element the consumer waits for) is
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

Where each rule lives (:mod:`headrace._budget`): the budget, its lock and ledger in ``ledger``, a stage's
verbs in ``account``, a reservation's verbs in ``reservation``, the kinds of reservation in ``policy``,
admission and the stall breaker in ``admission``, fair shares in ``shares``, refusals in ``refusals``, warnings
in ``notices``, byte counts in ``sizes``; this module keeps the scope (the process budget and the share of a
process tree) and re-exports the names the engine imports from here.
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
