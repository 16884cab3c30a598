"""Fair shares: the budget's reserve and every account's cap (max-min fairness), and the modelled share a
buffer whose order depends on its byte capacity (a seeded ``shuffle``) takes its capacity from.

Pure functions of the accounts they are given (the caller holds the budget's lock; nothing changes here).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .account import StageAccount


def fair_caps(limit_bytes: int, accounts: Sequence[StageAccount], unit_of: Callable[[StageAccount], int], *,
              at_start: bool = False) -> tuple[int, list[float]]:
    """The reserve and every account's cap (in the order of ``accounts``) if one unit of each account's work
    took ``unit_of(account)`` bytes: minimums first, then mandatory demand, then water filling. ``at_start``:
    with the demands the stages started with, before AUTOTUNE moved them."""
    demands = [a.start_demand if at_start else a.demand for a in accounts]
    units = [unit_of(a) for a in accounts]
    # The reserve is for an element larger than any seen (admission): sized by the elements' units, not by a
    # worker process's footprint (admitted as a mandatory account, never from the reserve): a 66 MB worker made
    # it 64 MiB of 256, which kept every read-ahead of the seed image pipeline out (one element at a time).
    elements = (u for a, u in zip(accounts, units, strict=True) if a.unit_is_element)
    reserve = min(limit_bytes // 4, max(limit_bytes // 16, max(elements, default=0)))
    remaining = float(limit_bytes - reserve)
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


def model_share(limit_bytes: int, accounts: Sequence[StageAccount], acc: StageAccount, unit: int,
                below: tuple[str, ...]) -> tuple[float, bool]:
    """``acc``'s cap if its unit took ``unit`` bytes, each mandatory account of the stages ``below`` it (its
    input's, named ``stage`` or ``stage ...``: a reader's buffers, a batch being assembled) the larger of
    ``unit`` and its largest element (learned or made; not its reservations), its elastic ones (a prefetch,
    a parallel map: the elements it reads, as far as they have read ahead) and every other account
    ``unit`` (and whether there is any other such), each with the demand it started with: not what anyone
    holds now, how far the stages after it have run, nor what AUTOTUNE made of their buffers since, for a
    decision that must be reproducible (a seeded ``shuffle``'s byte capacity). The accounts of datasets made
    while the pipeline runs come and go with timing: left out (``StageAccount.nested``)."""
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

    modelled = [a for a in accounts if not a.nested or a is acc]
    _, caps = fair_caps(limit_bytes, modelled, unit_of, at_start=True)
    return caps[modelled.index(acc)], others


def fixed_capacity(limit_bytes: int, accounts: Sequence[StageAccount], acc: StageAccount, unit: int,
                   below: tuple[str, ...], wanted: int) -> int | None:
    """The byte capacity of a buffer whose order depends on it (a seeded ``shuffle``) when its largest element
    is ``unit`` bytes and it wants ``wanted`` bytes: None where its modelled share (:func:`model_share`) holds
    them all, else that share, or half of it where other stages (those after it, other pipelines of a shared
    budget) are modelled at ``unit`` bytes: their sizes are guesses, and the half is the budget's reserve for
    their first-sight surprises (a ``map`` after it tripling each element, then ``batch``: found by
    ``bench/promises.py``)."""
    share, others = model_share(limit_bytes, accounts, acc, unit, below)
    if share >= wanted:
        return None
    return int(share // 2 if others else share)
