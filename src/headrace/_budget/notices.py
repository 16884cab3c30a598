"""What the budget tells the user: an overdraft (the stall breaker went over the budget, counted and warned
once per budget) and a shrunk stage (it holds fewer elements than configured, warned once per stage unless
AUTOTUNE sized it), as :class:`~headrace.MemoryBudgetWarning`, through the pipeline's warnings
(``StageAccount.warnings``: at the user's line, naming the budget as the user set it) where it has them.

Called with the budget's lock held.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

from .._errors import MemoryBudgetWarning
from .sizes import format_bytes

if TYPE_CHECKING:
    from .account import StageAccount


def overdraft(acc: StageAccount, nbytes: int) -> None:
    """The stall breaker takes ``nbytes`` for ``acc`` past the budget: counted and warned."""
    b = acc.budget
    b.stalls += 1
    b.overdraft_bytes += max(0, b.total_bytes + nbytes - b.limit_bytes)
    warn_over(acc, nbytes)


def warn_over(acc: StageAccount, nbytes: int) -> None:
    """Say once per budget that ``acc`` went over it instead of deadlocking, naming the holders."""
    b = acc.budget
    if not b.overdraft_warned:
        b.overdraft_warned = True
        holders = b.holders()
        where, fix = _budget_words(acc, f"{format_bytes(b.limit_bytes)}")
        _emit(acc, ("over", acc.stage),
              f"headrace: {acc.stage} needed {format_bytes(nbytes)} while the memory budget of "
              f"{where} was held by buffers that cannot drain first ({holders}); it went over the "
              f"budget instead of deadlocking. {fix[0].upper() + fix[1:]} or lower buffer sizes.")


def maybe_warn_shrunk(acc: StageAccount) -> None:
    """A reservation waits: :func:`warn_shrunk` if the stage's share holds fewer elements than it asked for."""
    if acc.shrink_warned or not acc.warn_shrink or acc.demand is None:
        return
    if acc.held_count == 0 or acc.held_count >= acc.demand:
        return
    if acc.held_bytes + acc.max_element_bytes <= acc.cap_bytes or acc.cap_bytes >= _demand_bytes(acc):
        return  # room left, or the share is all it asked for (not shrunk by the budget)
    warn_shrunk(acc)


def _demand_bytes(acc: StageAccount) -> float:
    """What the stage asked for, in bytes of its unit (inf: unbounded; 0: no size known yet)."""
    unit = acc.unit_bytes()
    if unit == 0:
        return 0.0
    if acc.demand is None:
        return math.inf
    return float(max(acc.demand, acc.min_units)) * unit


def warn_shrunk(acc: StageAccount) -> None:
    """Say once that this stage runs with fewer elements than configured (not for AUTOTUNE sizes)."""
    if acc.shrink_warned or not acc.warn_shrink or acc.demand is None:
        return
    acc.shrink_warned = True
    where, fix = _budget_words(acc, f"memory_budget={format_bytes(acc.budget.limit_bytes)}")
    _emit(acc, ("shrunk", acc.stage),
          f"headrace: {acc.stage} was configured for {acc.demand} elements but holds at most about "
          f"{acc.held_count} (elements up to {format_bytes(acc.max_element_bytes)}) within {where}, "
          f"shared with the pipeline's other buffers; it runs with the smaller buffer. "
          f"{fix[0].upper() + fix[1:]} or lower the buffer size to silence this.")


def _budget_words(acc: StageAccount, default: str) -> tuple[str, str]:
    """How a warning names the budget and its fix: as the user set it (``acc.warnings``, e.g. the CLI's
    ``--memory-budget 384MiB``), else ``default`` and the Options fix."""
    w = acc.warnings
    return (w.budget, w.fix) if w is not None else (default, "raise Options(memory_budget=...)")


def _emit(acc: StageAccount, key: tuple[str, str], message: str) -> None:
    if acc.warnings is not None:
        acc.warnings.warn(key, message, MemoryBudgetWarning)
    else:  # (stacklevel: the frame that reserved or settled, as before the budget was split into modules)
        warnings.warn(message, MemoryBudgetWarning, stacklevel=4)
