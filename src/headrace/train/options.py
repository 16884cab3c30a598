"""``FitOptions``: the arguments of :func:`headrace.train.fit` other than the model and the dataset, as one
validated value that ``fit`` hands to its setup (``fit._fit``) and its loop (``loop._loop``).

Users call ``fit(model, dataset, **arguments)``; the fields and their meaning are ``fit``'s arguments
(see its docstring). Building a ``FitOptions`` validates them (``ValueError`` naming the argument).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


def _check_count(name: str, v: Any) -> None:
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
        raise ValueError(f"{name}={v!r} must be an int >= 1 or None")


@dataclass(frozen=True)
class FitOptions:
    """``fit``'s arguments (its docstring says what each does); validated when built."""

    loss_fn: Callable[..., Any]
    optimizer: Any
    global_batch_size: int
    micro_batch_size: int | str = "auto"
    epochs: int | None = None
    steps: int | None = None
    precision: str = "fp32"
    memory_budget: int | str | None = None
    checkpoint_dir: str | os.PathLike[str] | None = None
    checkpoint_every: int = 100
    resume: bool = False
    eval_dataset: Any = None
    callbacks: Iterable[Any] = ()
    device: Any = None
    shard: bool = True
    data_memory_fraction: float = 0.25
    metrics_path: str | os.PathLike[str] | None = None
    progress: bool | None = None
    log_every: int = 10
    keep_checkpoints: int = 2
    base_rss_bytes: int | None = None
    lr_scheduler: Any = None
    gpu_memory_fraction: float | None = None
    dataset_size: int | None = None

    def __post_init__(self) -> None:
        micro = self.micro_batch_size
        if micro != "auto" and (isinstance(micro, bool) or not isinstance(micro, int) or micro < 1):
            raise ValueError(f"micro_batch_size={micro!r} must be 'auto' or an int >= 1")
        gbs = self.global_batch_size
        if isinstance(gbs, bool) or not isinstance(gbs, int) or gbs < 1:
            raise ValueError(f"global_batch_size={gbs!r} must be an int >= 1")
        for name in ("epochs", "steps", "dataset_size"):
            _check_count(name, getattr(self, name))
        every = self.checkpoint_every
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"checkpoint_every={every!r} must be an int >= 1 (optimizer steps)")
        if not 0.0 < self.data_memory_fraction < 1.0:
            raise ValueError(f"data_memory_fraction={self.data_memory_fraction!r} must be in (0, 1)")
        if self.resume and self.checkpoint_dir is None:
            raise ValueError("resume=True needs checkpoint_dir (where the checkpoints are)")

    @property
    def max_epochs(self) -> int | None:
        """The passes to make: ``epochs``, else none (``steps`` decides), else one."""
        return self.epochs if self.epochs is not None else (None if self.steps is not None else 1)
