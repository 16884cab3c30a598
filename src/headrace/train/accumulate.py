"""Gradient accumulation: a per-rank batch is split into micro-batches whose losses are weighted so that
the accumulated gradient is the gradient of the mean loss over the global batch.

``global_batch_size = per_rank_batch x world_size``; each per-rank batch of ``B`` elements is split into
``k = ceil(B / micro_batch_size)`` micro-batches of sizes differing by at most one, and micro-batch ``i``
(``b_i`` elements, mean loss ``L_i``) contributes ``L_i * b_i / B``. Summed over ``i`` this is the mean
over the ``B`` elements; DDP then averages over ranks, giving the mean over the global batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .._structure import describe, flatten, pack_as


@dataclass(frozen=True)
class AccumulationPlan:
    """How one optimizer step is made: ``micro_sizes`` per rank, ``world_size`` ranks."""

    global_batch_size: int
    world_size: int
    micro_batch_size: int

    @property
    def per_rank_batch_size(self) -> int:
        return self.global_batch_size // self.world_size

    @property
    def accumulation_steps(self) -> int:
        return math.ceil(self.per_rank_batch_size / self.micro_batch_size)

    @property
    def micro_sizes(self) -> list[int]:
        """Sizes of the micro-batches of one per-rank batch (balanced; they sum to the per-rank batch)."""
        b, k = self.per_rank_batch_size, self.accumulation_steps
        return [b // k + (1 if i < b % k else 0) for i in range(k)]

    def describe(self) -> str:
        sizes = self.micro_sizes
        micro = str(sizes[0]) if len(set(sizes)) == 1 else f"{sizes[-1]}-{sizes[0]}"
        return (f"global batch {self.global_batch_size} = micro-batch {micro} x {self.accumulation_steps} "
                f"accumulation step(s) x {self.world_size} rank(s)")


def make_plan(global_batch_size: int, world_size: int, micro_batch_size: int) -> AccumulationPlan:
    """Validate and build the plan (``micro_batch_size`` is capped at the per-rank batch).

    Raises:
        ValueError: a size < 1, or ``global_batch_size`` not a multiple of ``world_size``.
    """
    for name, v in (("global_batch_size", global_batch_size), ("micro_batch_size", micro_batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r} must be an int >= 1")
    if global_batch_size % world_size:
        nearest = world_size * max(1, global_batch_size // world_size)
        raise ValueError(f"global_batch_size={global_batch_size} is not a multiple of the world size "
                         f"{world_size}; use a multiple such as {nearest}")
    per_rank = global_batch_size // world_size
    return AccumulationPlan(global_batch_size, world_size, min(micro_batch_size, per_rank))


def batch_size_of(batch: Any) -> int:
    """The leading dimension shared by every array/tensor leaf of ``batch``.

    Raises:
        ValueError: no array leaves, or leaves with different leading dimensions.
    """
    sizes = {int(leaf.shape[0]) for leaf in flatten(batch) if getattr(leaf, "ndim", 0) >= 1}
    if len(sizes) != 1:
        raise ValueError(f"cannot split the batch {describe(batch)} into micro-batches: its array leaves "
                         "need one common leading (batch) dimension")
    return sizes.pop()


def split_batch(batch: Any, sizes: list[int]) -> list[Any]:
    """Split every leaf of ``batch`` along axis 0 into consecutive pieces of ``sizes`` (views, no copies)."""
    leaves = flatten(batch)
    out = []
    start = 0
    for n in sizes:
        out.append(pack_as(batch, [leaf[start:start + n] if getattr(leaf, "ndim", 0) >= 1 else leaf
                                   for leaf in leaves]))
        start += n
    return out


__all__ = ["AccumulationPlan", "batch_size_of", "make_plan", "split_batch"]
