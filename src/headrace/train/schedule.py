"""The one-cycle learning-rate schedule ``headrace train`` and ``headrace demo`` use, for any number of steps."""

from __future__ import annotations

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
