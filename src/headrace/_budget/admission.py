"""Admission and waiting: whether a reservation may be taken now (the budget's reserve, the stage's share,
the probe), whether a waiting one is *stalled* (the stall breaker's condition), and the timing of waits.
Read with the budget's lock held; nothing changes here. See ``headrace._memory`` for the rules these implement.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .account import StageAccount
    from .policy import Policy

WAIT_SLICE_S = 0.05
"""Every wait for room is a timed wait of this long that re-checks its stop event (``close()`` never hangs)."""
STALL_S = 1.0
"""How long nothing may be released, the consumer waiting, before a reservation the pipeline cannot progress
without is stalled (:func:`stalled`)."""
PROBE_WAIT_S = 0.2
"""How long more reservations of a stage wait for its first element's size (its probe) before they may go
ahead where they fit the stage's share (see ``headrace._memory``)."""


class Cancelled(Exception):
    """Raised inside pipeline threads when a wait is interrupted by ``close()`` (never reaches users)."""


def fits_cap(acc: StageAccount, nbytes: int, urgent: bool, headroom: bool) -> bool:
    """Whether ``nbytes`` more fit ``acc``'s share (keeping one unit of ``headroom`` for an urgent one)."""
    if acc.mandatory:
        return True  # cannot emit part of what it holds: only the budget as a whole limits it
    if urgent or (acc.held_bytes == 0 and not headroom):
        # The element the consumer waits for: only the budget as a whole limits it. A stage at its share
        # with elements it may not emit yet (a replay of a deterministic=False order, a result ahead of
        # the one awaited) would otherwise wait for itself until the stall breaker (1 s) fired.
        return True
    spare = acc.unit_bytes() if headroom and not urgent else 0
    return acc.held_bytes + nbytes + spare <= acc.cap_bytes


def admits(acc: StageAccount, nbytes: int, urgent: bool, policy: Policy, charged_in: int = 0) -> bool:
    """Whether ``acc`` may reserve ``nbytes`` now (``policy``: the kind of reservation, ``headrace._budget.policy``;
    ``charged_in`` as ``StageAccount.reserve`` takes it)."""
    b = acc.budget
    if (not policy.top_up and not acc.seen and acc.outstanding > 0
            and time.monotonic() - acc.probe_s < PROBE_WAIT_S):
        return False  # probe: one element at a time until the first size is known (or a while passed)
    # The budget keeps a reserve outside every stage's share: only a reservation the pipeline cannot
    # progress without (the stage holds nothing, it is the element the consumer waits for, or the stage
    # cannot emit part of what it holds) may use it, so stages that filled up before the others'
    # element sizes were known (over their share after the shares are recomputed) cannot starve them.
    # A reader reading ahead (``speculative``, not the element the consumer waits for) leaves room for
    # one element of the largest size seen, even holding nothing: two readers that each took the last
    # element's room ahead of the consumer left none for the one it waits for (nested interleaves under
    # a budget of one element stalled until the stall breaker overdrew; docs/design/budget.md).
    speculative = policy.speculative
    privileged = urgent or acc.mandatory or (acc.held_bytes == 0 and not speculative)
    keep = max(b.reserve_bytes, b.assumed_element_bytes) if speculative else b.reserve_bytes
    room = b.limit_bytes if privileged else b.limit_bytes - keep
    return b.total_bytes + nbytes <= room and (
        policy.ignore_cap or fits_cap(acc, nbytes + charged_in, urgent, policy.headroom))


def within_group(acc: StageAccount, nbytes: int, group_limit: int) -> bool:
    """Whether ``nbytes`` more keep the accounts of ``acc``'s group within ``group_limit``, each of the others
    counting at least its ``promised_bytes`` (what it needs to run at all)."""
    group = sum(max(a.held_bytes, a.promised_bytes) for a in acc.budget.accounts
                if a.group == acc.group and a is not acc)
    return acc.held_bytes + nbytes + group <= group_limit


def stalled(acc: StageAccount, urgent: bool, speculative: bool = False) -> bool:
    """Holding nothing (or urgent, or a stage that cannot emit part of what it holds; not a read-ahead),
    blocked by the global limit, the consumer waiting, nothing released for ``STALL_S``: the pipeline
    cannot progress without this element."""
    b = acc.budget
    idle = acc.held_bytes == 0 and not speculative
    return ((idle or urgent or acc.mandatory) and len(b.consumers) > 0
            and time.monotonic() - b.last_release_s >= STALL_S)
