"""Training a compressed model: one cosine learning-rate schedule over all epochs and early stopping on a
held-out split of the *training* data (never the eval set), on top of :func:`headrace.train.fit`.

:func:`train` runs ``fit`` once for ``epochs`` epochs with ``eval_dataset=validation``; after each epoch a
callback keeps a copy of the weights with the best held-out accuracy and stops the run (by raising
:class:`_Stop`, caught here) after ``patience`` epochs without a new best. The best weights are loaded back
at the end. Without ``validation`` every epoch runs and the last weights are kept.
"""

from __future__ import annotations

import copy
from typing import Any

from ..train._deps import import_torch
from ..train.schedule import cosine_schedule

torch = import_torch()


class _Stop(Exception):
    """Raised by :class:`EarlyStopping` to end ``fit`` after an epoch."""


class EarlyStopping:
    """A ``fit`` callback: after each epoch, keep the best weights by ``eval_accuracy`` (the held-out
    split's), and stop after ``patience`` epochs without improving it.

    Attributes:
        best_accuracy: the best held-out accuracy seen (``-1.0`` before the first epoch).
        best_epoch: its epoch (1-based; 0 before the first).
        epochs_run: epochs finished.
    """

    def __init__(self, model: Any, patience: int) -> None:
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"patience={patience!r} must be an int >= 1 (epochs without a better held-out "
                             "accuracy before stopping)")
        self.model = model
        self.patience = patience
        self.best_accuracy = -1.0
        self.best_epoch = 0
        self.epochs_run = 0
        self.best_state: dict[str, Any] | None = None

    def on_epoch_end(self, record: dict[str, Any]) -> None:
        self.epochs_run += 1
        accuracy = record.get("eval_accuracy")
        if accuracy is None:
            return
        if accuracy > self.best_accuracy:
            self.best_accuracy, self.best_epoch = float(accuracy), self.epochs_run
            self.best_state = copy.deepcopy(self.model.state_dict())
        elif self.epochs_run - self.best_epoch >= self.patience:
            raise _Stop

    def restore(self) -> None:
        """Load the best weights back into the model (no-op before any held-out evaluation)."""
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)


def steps_per_epoch(dataset: Any, global_batch_size: int, dataset_size: int | None) -> int | None:
    """Optimizer steps of one epoch (for the schedule): from ``dataset_size`` or the dataset's cardinality;
    None when neither is known (then :func:`train` keeps the learning rate constant: a schedule of a guessed
    length would anneal to 0 too early)."""
    size = dataset_size
    if size is None and hasattr(dataset, "cardinality"):
        n = dataset.cardinality()
        size = int(n) if isinstance(n, int) and n >= 0 else None
    return None if size is None else max(1, size // global_batch_size)


def train(model: Any, dataset: Any, *, loss_fn: Any, epochs: int, lr: float, validation: Any = None,
          patience: int = 2, dataset_size: int | None = None, optimizer: str = "sgd",
          **fit_kwargs: Any) -> dict[str, Any]:
    """Train ``model`` in place with SGD (Nesterov momentum 0.9, weight decay 5e-4; or ``optimizer="adamw"``:
    AdamW, weight decay 0.01, the usual choice for Transformers), a cosine schedule over
    ``epochs`` (5% warm-up; a constant ``lr`` when the dataset's size is unknown: pass ``dataset_size``) and
    early stopping on ``validation`` (module docstring).

    Args:
        model: a ``torch.nn.Module``.
        dataset: headrace ``Dataset`` of unbatched ``(inputs, label)`` training elements.
        loss_fn: as :func:`headrace.train.fit` takes it.
        epochs: at most this many epochs (>= 1).
        lr: peak learning rate (> 0).
        optimizer: ``"sgd"`` or ``"adamw"``.
        validation: headrace ``Dataset`` held out from the training data, or None.
        patience: epochs without a better held-out accuracy before stopping.
        dataset_size: elements in ``dataset`` (sets the schedule's length when the cardinality is unknown).
        **fit_kwargs: other :func:`headrace.train.fit` keywords (``global_batch_size`` is required).

    Returns:
        ``{"epochs_run", "best_epoch", "validation_accuracy", "fit_result"}`` (``fit_result`` is None when
        early stopping ended the run).

    Raises:
        ValueError: ``epochs`` < 1, ``lr`` <= 0, ``patience`` < 1, an unknown ``optimizer``, or any error of
            ``fit``.
    """
    from ..train import fit

    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs={epochs!r} must be an int >= 1")
    if not lr > 0:
        raise ValueError(f"lr={lr!r} must be > 0 (e.g. 0.05 for SGD)")
    if optimizer not in ("sgd", "adamw"):
        raise ValueError(f"optimizer={optimizer!r}: choose 'sgd' or 'adamw'")
    stopper = EarlyStopping(model, patience)
    opt = (torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01) if optimizer == "adamw" else
           torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4))
    per_epoch = steps_per_epoch(dataset, fit_kwargs["global_batch_size"], dataset_size)
    scheduler = None
    if per_epoch is not None:
        total = per_epoch * epochs
        scheduler = cosine_schedule(opt, total, warmup_steps=total // 20)
    callbacks = [*fit_kwargs.pop("callbacks", ()), stopper]
    result = None
    try:
        result = fit(model, dataset, loss_fn=loss_fn, optimizer=opt, epochs=epochs, lr_scheduler=scheduler,
                     eval_dataset=validation, callbacks=callbacks, dataset_size=dataset_size, **fit_kwargs)
    except _Stop:
        pass
    stopper.restore()
    model.eval()
    return {"epochs_run": stopper.epochs_run, "best_epoch": stopper.best_epoch,
            "validation_accuracy": stopper.best_accuracy if validation is not None else None,
            "fit_result": result}


__all__ = ["EarlyStopping", "cosine_schedule", "steps_per_epoch", "train"]
