"""The learning-rate schedules of ``headrace train`` and the demos (one-cycle) and of ``headrace compress`` and
the text demo (cosine with warm-up), for any number of steps."""

from __future__ import annotations

import math
from typing import Any

from ._deps import import_torch

torch = import_torch()

WARMUP_SHARE = 0.25
"""The share of the steps whose learning rate rises to the peak (``OneCycleLR``'s ``pct_start``)."""


def one_cycle(optimizer: Any, max_lr: float, total_steps: int) -> Any:
    """``torch.optim.lr_scheduler.OneCycleLR`` over ``total_steps`` optimizer steps, rising for the first
    quarter of them (cosine), then falling to ``max_lr / 25e4``.

    Example::

        schedule = one_cycle(torch.optim.SGD(net.parameters(), lr=0.05), max_lr=0.05, total_steps=4)

    ``OneCycleLR`` divides by ``pct_start * total_steps - 1`` (the rise's last step): a quarter of 4 steps
    ends the rise at step 0 and its first ``step()`` raised ``ZeroDivisionError``. There the rise takes two
    steps (half of the 4); any other count keeps the quarter (under 4 steps the schedule only falls).

    Args:
        optimizer: the ``torch.optim.Optimizer`` whose learning rate it sets.
        max_lr: the peak learning rate (> 0).
        total_steps: the optimizer steps of the whole run (>= 1): ``OneCycleLR`` raises ``ValueError`` at a
            ``step()`` past them.

    Returns:
        The ``OneCycleLR``; its ``state_dict()["total_steps"]`` is ``total_steps``.

    Raises:
        ValueError: ``total_steps`` below 1 (naming it).
    """
    if total_steps < 1:
        raise ValueError(f"one_cycle: total_steps={total_steps}; a schedule needs at least 1 optimizer step")
    share = WARMUP_SHARE if WARMUP_SHARE * total_steps != 1 else 2 / total_steps
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=total_steps, pct_start=share)


def cosine_schedule(optimizer: Any, total_steps: int, warmup_steps: int = 0) -> Any:
    """Linear warm-up over ``warmup_steps`` then cosine decay to 0 at ``total_steps`` (a ``LambdaLR``); past
    ``total_steps`` the factor stays 0 (no error: for runs whose step count is only estimated, e.g. packed rows)."""
    total = max(1, total_steps)
    warm = max(0, min(warmup_steps, total - 1))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / (warm + 1)
        progress = min(1.0, (step - warm) / max(1, total - warm))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
