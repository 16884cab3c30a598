"""Mixed precision: ``"fp32"``, ``"bf16"`` (``torch.autocast``, CPU and CUDA) or ``"fp16"`` (autocast with
``torch.amp.GradScaler``, CUDA only: float16 gradients underflow without loss scaling, and CPU float16
kernels are slow; use ``"bf16"`` on CPU).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from ._deps import import_torch

torch = import_torch()

PRECISIONS = ("fp32", "bf16", "fp16")


@dataclass
class Precision:
    """What a precision name means on a device: the autocast dtype (None for fp32) and the grad scaler."""

    name: str
    device_type: str
    dtype: Any = None
    scaler: Any = None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The context for forward passes (and the loss); a no-op for fp32."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)


def make_precision(name: str, device: Any) -> Precision:
    """Resolve ``name`` for ``device``.

    Raises:
        ValueError: an unknown name, ``"fp16"`` on a non-CUDA device, or ``"bf16"`` on a CUDA device
            without bfloat16 support.
    """
    device = torch.device(device)
    if name not in PRECISIONS:
        raise ValueError(f"precision={name!r} is not one of {', '.join(PRECISIONS)}")
    if name == "fp32":
        return Precision(name, device.type)
    if name == "fp16":
        if device.type != "cuda":
            raise ValueError(f"precision='fp16' needs a CUDA device (this run uses {device}); use "
                             "precision='bf16' on CPU")
        return Precision(name, "cuda", torch.float16, torch.amp.GradScaler("cuda"))
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(f"precision='bf16': {torch.cuda.get_device_name(device)} has no bfloat16 support; "
                         "use precision='fp16'")
    return Precision(name, device.type, torch.bfloat16)


__all__ = ["PRECISIONS", "Precision", "make_precision"]
