"""When a reservation is refused with ``MemoryBudgetError`` instead of waited for or overdrawn: one rule,
*what must be held at once is more than the whole budget*, at three moments.

- Before any wait (:func:`refuse_impossible`): the reservation alone (an element larger than the budget), a
  mandatory stage's minimum or its holding plus the reservation, or the readers that hold their buffers
  while the others read (``holds_between``) together (:func:`refuse_together`).
- At a stall, and where an element's or a worker's excess is charged (:func:`refuse_infeasible`): the
  reservation beside what every other stage cannot give back first.
- A caller's own text at its stall (``Policy(refuse=...)``: a reader's buffers, whose
  overdraft would come back at every read) builds the message in the caller.

Every function is called with the budget's lock held; each names the parts, the total, the budget and the fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import MemoryBudgetError
from .sizes import format_bytes

if TYPE_CHECKING:
    from .account import StageAccount


def refuse_over(acc: StageAccount, needs: list[tuple[str, int]], what: str, when: str, fix: str) -> None:
    """``MemoryBudgetError`` naming each ``(stage, bytes)`` of ``needs`` if together they exceed the budget."""
    limit = acc.budget.limit_bytes
    total = sum(n for _, n in needs)
    if total > limit:
        each = ", ".join(f"{stage} {format_bytes(n)}" for stage, n in needs)
        raise MemoryBudgetError(
            f"{what} ({each}): {format_bytes(total)} ({total} bytes) {when}, more than the whole memory "
            f"budget of {format_bytes(limit)} ({limit} bytes); {fix} or {acc.hint}")


def refuse_together(acc: StageAccount, nbytes: int) -> None:
    """Accounts that hold their unit while their stage does not run (``holds_between``: the readers an
    ``interleave`` or a ``zip`` keeps open, each holding a row group's buffers while the others read) hold
    them at the same time: what they hold and this reservation, more than the budget together, can never
    fit, and used to stall (1 s each, overdrawn) at every turn of the cycle (two Parquet readers of
    104 MiB row groups under 160 MiB: 152 s, 5.8 GB overdrawn). Refused, naming them."""
    others = [a for a in acc.budget.accounts if a.holds_between and a is not acc and a.held_bytes]
    if not others:  # (one that holds nothing now is not counted: a restore's replay of a reader not read)
        return
    needs = [(acc.stage, acc.held_bytes + nbytes)] + [(a.stage, a.held_bytes) for a in others]
    refuse_over(acc, needs, f"{len(needs)} readers are open at once and each holds its buffers while the "
                            "others read", "together", "read fewer at once (a smaller interleave cycle_length), "
                            "raise Options(memory_budget=...)")


def refuse_infeasible(acc: StageAccount, nbytes: int) -> None:
    """At a stall (nothing released for ``STALL_S``, the consumer waiting): ``MemoryBudgetError`` if this
    reservation and what every other stage of the pipeline needs at once cannot fit the budget, instead of
    overdrawing it. Each other stage counts what it cannot give back before this reservation is served:
    a stage that keeps its bytes (``keeps``: an in-memory cache), holds them between reads
    (``holds_between``) or is inside a pull from its input (``pulling``: a shuffle refilling its buffer, which
    gives nothing back before the pull returns) what it holds, a mandatory stage the larger of what it holds and
    its minimum, any other its minimum (those whose elements are sized). The stall breaker overdrew whenever the stage
    itself, alone, fitted: a memory cache holding 15 MiB of 16 left no room for the window's batch below
    it (stall after stall, 12 MiB overdrawn, then the cache's own refusal); a Parquet reader's 40 MiB of
    buffers, a process map's call and its first worker went 17 MiB over 96 MiB (sweep seeds 121
    and 65), a shuffle's 4 MiB counted at its minimum while its refill waited on this reservation went 4 MiB
    over 64 MiB (seed 653; docs/design/budget.md)."""
    needs = [(acc.stage, nbytes + (acc.held_bytes if acc.mandatory else 0))]
    for a in acc.budget.accounts:
        if a is acc or a.owner is not acc.owner:
            continue
        least = a.min_bytes() if a.seen else 0.0
        if a.keeps or a.holds_between or a.mandatory or a.pulling:
            least = max(float(a.held_bytes), least)
        if least > 0:
            needs.append((a.stage, int(least)))
    refuse_over(acc, needs, f"{acc.stage}: needs {format_bytes(nbytes)} more while the pipeline's stages "
                            "hold what they cannot give back first and need their minimum", "at once",
                "raise Options(memory_budget=...)")


def refuse_going_over(acc: StageAccount, excess: int, need: int) -> None:
    """Bytes that exist already (an element larger than its reservation, a worker that grew) charged
    ``excess`` past what was reserved: where that goes over the budget, :func:`refuse_infeasible` for
    ``need`` (what this stage needs at once)."""
    b = acc.budget
    if b.total_bytes + excess > b.limit_bytes:
        refuse_infeasible(acc, need)


def refuse_impossible(acc: StageAccount, nbytes: int) -> None:
    """``MemoryBudgetError`` if ``nbytes`` can never fit this stage, whatever the others release."""
    limit = acc.budget.limit_bytes
    if acc.holds_between:
        refuse_together(acc, nbytes)
    if acc.mandatory and acc.seen and acc.min_bytes() > limit:
        need = acc.min_bytes()
        what = acc.min_what or f"{acc.min_units} elements"
        raise MemoryBudgetError(
            f"{acc.stage}: needs room for {what} of up to "
            f"{format_bytes(acc.unit_bytes())} at once ({format_bytes(need)}), more than the whole memory "
            f"budget of {format_bytes(limit)} ({limit} bytes); raise Options(memory_budget=...) or {acc.hint}")
    if acc.mandatory and acc.held_bytes + nbytes > limit:
        total = acc.held_bytes + nbytes
        raise MemoryBudgetError(
            f"{acc.stage}: holding {format_bytes(total)} ({total} bytes) would exceed the whole memory "
            f"budget of {format_bytes(limit)} ({limit} bytes); raise Options(memory_budget=...) or "
            f"{acc.hint}")
    if nbytes > limit:
        raise MemoryBudgetError(
            f"{acc.stage}: needs {format_bytes(nbytes)} ({nbytes} bytes) at once (an element, or a "
            f"function's input and output together), more than the whole memory budget of "
            f"{format_bytes(limit)} ({limit} bytes); raise Options(memory_budget=...) or {acc.hint}")
