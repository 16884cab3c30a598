"""The splits of a distributed epoch: how the part of a pipeline upstream of ``distribute`` is cut into disjoint
pieces that together are the whole dataset, and how one piece's pipeline is built on a worker.

A split is a small JSON-able list (``[kind, a, b]``): ``["index", start, stop]``, source elements
``[start, stop)`` of a ``range`` / ``from_tensor_slices`` / ``from_tensors`` source; ``["shard", k, i]``, share
``i`` of ``k`` of a file source (``TFRecordDataset``, ``ParquetDataset``, an ``interleave`` over a file list,
``from_random_access``: whatever implements ``DatasetNode.shard_source``, the hook ``Dataset.shard`` /
``headrace.torch`` use to read less); ``["whole", copy, 0]``, the whole dataset (``parallel_epochs``: one per
worker). The cut is made at the source, below every transformation that keeps a partition a partition (``map``,
``filter``, ``batch``, ``shuffle``, ``prefetch``, ``repeat``: ``DatasetNode.shard_passes``), as
``headrace._ops.shard.shard_at_source`` moves a shard. A source that cannot be cut (``from_generator``,
``from_source``, ``zip``, ``concatenate``, ...) raises :class:`ValueError` naming the op and the fixes.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import Any, cast

from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage
from .._errors import StateError
from .._ops.in_memory import RangeNode, TensorSlicesNode, TensorsNode
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY

Split = list[Any]  # [kind, a, b]: see the module docstring


@dataclass(frozen=True)
class SplitPlan:
    """The splits of one epoch, in the order they are handed out; ``what`` says how the source was cut."""

    splits: tuple[tuple[Any, ...], ...]
    what: str


def _source_chain(node: DatasetNode) -> tuple[list[DatasetNode], DatasetNode]:
    """The transformations a split passes through (top first) and the node it is cut at."""
    chain: list[DatasetNode] = []
    while True:
        if isinstance(node, RangeNode | TensorSlicesNode | TensorsNode):
            return chain, node
        if type(node).shard_source is not DatasetNode.shard_source:
            return chain, node
        if node.shard_passes and len(node.inputs) == 1:
            chain.append(node)
            node = node.inputs[0]
            continue
        return chain, node


def source_of(node: DatasetNode) -> DatasetNode:
    """The node the splits of ``node`` are cut at (its source, below the transformations a split passes)."""
    return _source_chain(node)[1]


def _cannot_split(node: DatasetNode, why: str) -> ValueError:
    return ValueError(
        f"distribute(processing_mode='distributed_epoch'): cannot split the source {node.label!r} into disjoint "
        f"pieces for the workers ({why}); split it at a range / from_tensor_slices / file source "
        "(TFRecordDataset, ParquetDataset, interleave over list_files with shuffle=False) below element-wise "
        "transformations only (map, filter, batch, shuffle, prefetch), or use processing_mode='parallel_epochs' "
        "(every worker runs the whole dataset)")


def plan_splits(node: DatasetNode, processing_mode: str, num_workers: int, per_worker: int = 8) -> SplitPlan:
    """The splits of ``node`` for ``processing_mode`` with ``num_workers`` workers (about ``per_worker`` each,
    so that a slow or lost worker's share is small and spread over the others).

    Raises:
        ValueError: ``distributed_epoch`` over a source that cannot be split (see the module docstring), or
            over an infinite / unknown-size index source.
    """
    if processing_mode == "parallel_epochs":
        return SplitPlan(tuple(("whole", i, 0) for i in range(num_workers)),
                         f"the whole dataset on each of {num_workers} workers")
    _, source = _source_chain(node)
    want = max(1, num_workers * per_worker)
    if isinstance(source, RangeNode | TensorSlicesNode | TensorsNode):
        n = source.cardinality()
        if n in (INFINITE_CARDINALITY, UNKNOWN_CARDINALITY):
            raise _cannot_split(source, "its size is not known")
        k = max(1, min(want, n))
        bounds = [n * j // k for j in range(k + 1)]
        splits = tuple(("index", bounds[j], bounds[j + 1]) for j in range(k) if bounds[j + 1] > bounds[j])
        return SplitPlan(splits or (("index", 0, 0),), f"{n} elements of {source.label} in {len(splits)} index ranges")
    if type(source).shard_source is DatasetNode.shard_source:
        raise _cannot_split(source, "it has no index range or file list to cut")
    k = want
    while k > 1 and source.shard_source(k, 0) is None:
        k -= 1  # (the largest count of shares it can make: one file each, at most ``want``)
    if k == 1:
        raise _cannot_split(source, "it has a single file")
    return SplitPlan(tuple(("shard", k, i) for i in range(k)), f"{k} shares of the files of {source.label}")


def plan_rank_splits(node: DatasetNode, world_size: int, rank: int, num_workers: int,
                     per_worker: int = 8) -> SplitPlan:
    """Rank ``rank``'s splits of a job of ``world_size`` ranks (``distribute(job_name=...)``): source elements
    ``[rank * q, (rank + 1) * q)``, ``q = n // world_size``, cut into pieces at the same relative bounds on every
    rank, so that every rank's pipeline makes the same number of elements (and of batches, when ``batch`` is
    upstream) and no rank of a DDP job waits for another at the end of an epoch. The ``n % world_size`` (<
    ``world_size``) source elements past ``world_size * q`` are left out of the epoch (``drop_remainder``'s
    rule; Ray Data's ``streaming_split(equal=True)`` drops them too).

    Raises:
        ValueError: a source that is not an index range (``range`` / ``from_tensor_slices``) of known size, or a
            transformation between it and ``distribute`` whose count is not known (``filter``): the ranks'
            counts could differ.
    """
    _, source = _source_chain(node)
    n = source.cardinality()
    if not isinstance(source, RangeNode | TensorSlicesNode | TensorsNode) or n < 0:
        raise ValueError(f"distribute(job_name=...): the ranks of a job split an index source of known size "
                         f"(range, from_tensor_slices) into equal shares, not {source.label!r}; for files give each "
                         "rank its own files (headrace.distribute.auto_shard(..., policy='file')) and its own "
                         "distribute() without job_name")
    q = n // world_size
    k = max(1, min(q, num_workers * per_worker))
    bounds = [q * j // k for j in range(k + 1)]
    base = rank * q
    splits = tuple(("index", base + bounds[j], base + bounds[j + 1]) for j in range(k) if bounds[j + 1] > bounds[j])
    splits = splits or (("index", base, base),)
    if split_node(node, list(splits[0])).cardinality() < 0:
        raise ValueError("distribute(job_name=...): a transformation between the source and distribute() drops "
                         "elements (filter, ignore_errors, ...), so the ranks' counts could differ and a DDP job "
                         "hang; move it after distribute()")
    return SplitPlan(splits, f"{q} of {n} elements of {source.label} (rank {rank} of {world_size}) in "
                             f"{len(splits)} index ranges")


def _offset_slice(get: Any, start: int, i: int) -> Any:
    return get(start + i)


def _cut(source: DatasetNode, split: Split) -> DatasetNode:
    kind, a, b = split
    if kind == "shard":
        own = source.shard_source(int(a), int(b))
        if own is None:
            raise ValueError(f"split {split!r}: {source.label} no longer has {a} files to share out")
        return own
    if isinstance(source, RangeNode):
        return RangeNode(source.start + a * source.step, source.start + b * source.step, source.step,
                         dtype=source.dtype)
    if not isinstance(source, TensorSlicesNode):  # from_tensors: one element, one split
        return source
    clone = cast(TensorSlicesNode, source.with_inputs(()))
    clone.slice = functools.partial(_offset_slice, source.slice, int(a))
    clone.length = int(b) - int(a)
    return clone


class InOrderNode(DatasetNode):
    """``input`` with every parallel stage delivering in order (``deterministic=False`` included), as below a
    ``shard``: a split re-run from the count the trainer has (a lost worker, a restore) must make the same
    elements in the same order, or skipping that count would skip other elements."""

    label = "in order"
    spec_passes = True

    def __init__(self, input_node: DatasetNode) -> None:
        super().__init__([input_node])

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return self.inputs[0].make_iterator(ctx.in_order())


def split_node(node: DatasetNode, split: Split) -> DatasetNode:
    """``node`` reading only ``split`` (``["whole", ...]``: ``node`` itself); the recipe is not changed."""
    if split[0] == "whole":
        return node
    chain, source = _source_chain(node)
    out = _cut(source, split)
    for above in reversed(chain):
        out = above.with_inputs([out])
    return out


def _seeded(node: DatasetNode) -> list[DatasetNode]:
    """The nodes of ``node``'s graph that hold a shuffling seed (an int ``seed``), inputs first."""
    out = [n for i in node.inputs for n in _seeded(i)]
    if isinstance(getattr(node, "seed", None), int):
        out.append(node)
    return out


def pipeline_seeds(node: DatasetNode) -> list[int]:
    """The seeds of ``node``'s graph (:func:`_seeded`'s order): a ``seed=None`` shuffle draws its own when the
    pipeline is built, so a freshly built pipeline shuffles otherwise unless it adopts the saved ones."""
    return [int(n.seed) for n in _seeded(node)]  # type: ignore[attr-defined]


def with_seeds(node: DatasetNode, seeds: list[int], where: str) -> DatasetNode:
    """``node``'s graph with the seeds ``seeds`` (:func:`pipeline_seeds` of the pipeline a state was taken in),
    the recipe itself unchanged. Raises ``StateError`` naming ``where`` when the count differs or a seed the
    user gave differs (another pipeline)."""
    have = _seeded(node)
    if len(have) != len(seeds):
        raise StateError(f"{where}: the state holds {len(seeds)} shuffling seed(s), this pipeline upstream of "
                         f"distribute has {len(have)}; restore into the pipeline the state was taken from")
    wanted = {id(n): int(s) for n, s in zip(have, seeds, strict=True)}

    def rebuild(n: DatasetNode) -> DatasetNode:
        inputs = [rebuild(i) for i in n.inputs]
        out = n if all(a is b for a, b in zip(inputs, n.inputs, strict=True)) else n.with_inputs(inputs)
        seed = wanted.get(id(n))
        if seed is None or seed == n.seed:  # type: ignore[attr-defined]
            return out
        if getattr(n, "seed_given", False):
            raise StateError(f"{where}: {n.label} has seed={n.seed} but the state seed={seed}; restore into a "  # type: ignore[attr-defined]
                             "pipeline built with the same seed (or seed=None to adopt the state's)")
        out = copy.copy(out) if out is n else out
        out.seed = seed  # type: ignore[attr-defined]
        return out

    return rebuild(node)


__all__ = ["InOrderNode", "Split", "SplitPlan", "pipeline_seeds", "plan_rank_splits", "plan_splits", "source_of",
           "split_node", "with_seeds"]
