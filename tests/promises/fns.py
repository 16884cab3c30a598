"""The map functions of the promise shapes, in a module that imports only numpy: a worker process of
``executor="process"`` imports it to unpickle them, and starts in the time Python and numpy take (not
headrace's)."""

from __future__ import annotations

from typing import Any

import numpy as np


class _Blowup:
    """map function: a new payload ``factor`` times as large (new memory, as a decoder makes); ``out``: of
    ``out`` bytes whatever the input's size (a decoder of small records into large images)."""

    def __init__(self, factor: float, sizes: dict[str, Any], out: int | None = None) -> None:
        self.factor = factor
        self.sizes = sizes
        self.out = out
        self.__name__ = f"blowup{factor:g}" if out is None else f"decode{out}"

    def __call__(self, x: dict[str, Any]) -> dict[str, Any]:
        ident, payload = x["id"], x["payload"]
        n = int(payload.shape[-1] * self.factor) if self.out is None else self.out
        if np.ndim(ident) == 0:
            return {"id": ident, "payload": np.full(n, int(ident) % 251, np.uint8)}
        rows = (np.asarray(ident) % 251).astype(np.uint8)  # a batch (of batches): one row per id
        return {"id": ident, "payload": np.repeat(rows[..., None], n, axis=-1)}
