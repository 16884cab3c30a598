"""How ``fit`` calls a loss: ``loss_fn(outputs, targets)``, or ``loss_fn(outputs, targets, inputs)`` for a
loss that needs the inputs too (knowledge distillation runs its teacher on them).

A loss asks for the inputs with a true ``takes_inputs`` attribute (see
:class:`headrace.compress.DistillationLoss`). It is called inside the run's autocast, once per
micro-batch, in training, in the micro-batch search (so whatever it allocates counts against the budget)
and in evaluation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class InputsLoss(Protocol):
    """A loss that needs the inputs too: a true ``takes_inputs``, called ``loss_fn(outputs, targets, inputs)``."""

    takes_inputs: bool

    def __call__(self, outputs: Any, targets: Any, inputs: Any, /) -> Any: ...


LossFn = Callable[[Any, Any], Any] | InputsLoss
"""What ``fit`` takes as ``loss_fn``: ``loss_fn(outputs, targets)``, or an :class:`InputsLoss`."""


def compute_loss(loss_fn: Callable[..., Any], outputs: Any, targets: Any, inputs: Any) -> Any:
    """``loss_fn(outputs, targets)``, or ``loss_fn(outputs, targets, inputs)`` when ``loss_fn.takes_inputs``."""
    if getattr(loss_fn, "takes_inputs", False):
        return loss_fn(outputs, targets, inputs)
    return loss_fn(outputs, targets)


__all__ = ["InputsLoss", "LossFn", "compute_loss"]
