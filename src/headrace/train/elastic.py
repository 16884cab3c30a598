"""Elastic data order: a run checkpointed with N ranks continues with M ranks (Mosaic Streaming's "elastic
determinism"), on top of :meth:`headrace.Dataset.from_random_access`.

The order is defined globally, never per rank:

- Epoch ``e`` visits the records of ``source`` (``len()`` and ``[i]``, e.g.
  :class:`headrace.io.TFRecordRandomAccess` over indexed shards) in the order of a seeded permutation,
  the same on every rank (``shuffle=False``: source order). Its seed is
  :meth:`ElasticDataset.epoch_seed` ``(e)``, so epoch ``e`` has the same order whatever happened before.
- Global step ``k`` of an epoch started at position ``p0`` consumes the positions
  ``[p0 + k*B, p0 + (k+1)*B)`` (``B`` = ``global_batch_size``). Rank ``r`` of ``W`` takes the positions
  ``p0 + r, p0 + r + W, ...`` (``from_random_access(num_shards=W, index=r, start=p0)``), so its ``k``-th
  batch of ``B / W`` elements holds positions ``p0 + k*B + r + j*W``: over all ranks, exactly the global
  step's positions, at any ``W``. A rank reads only its own records.
- The state a checkpoint stores is the global position: ``{"kind": "elastic", "epoch", "position",
  "length", "shuffle", "seed"}``, the same on every rank. ``fit(resume=True)`` with any world size (and
  any global batch size) continues at ``position`` of epoch ``epoch``: every element not yet trained in
  that epoch is seen exactly once across the new ranks. ``position`` counts elements, never batches.

Only an element-wise ``map_func`` may follow the source: a filter, a shuffle buffer or an interleave
would make a rank's stream something other than the positions above, and then no position could be
re-sharded. A pipeline that is not an :class:`ElasticDataset` keeps its position per rank (each rank's own
``Iterator.get_state()``); :func:`resume_data_state` refuses to resume it mid-epoch with another world size,
naming both world sizes and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from .._dataset import Dataset
from .._errors import StateError
from .._options import Options
from ..distribute import ProcessInfo

KIND = "elastic"


def _check_source(source: Any) -> None:
    if not (hasattr(source, "__len__") and hasattr(source, "__getitem__")):
        raise TypeError(f"ElasticDataset(source={type(source).__name__}): the source needs len() and [i] "
                        "(e.g. headrace.io.TFRecordRandomAccess over indexed shards, a list, a numpy array)")


class ElasticDataset:
    """A dataset whose element order is global, so :func:`headrace.train.fit` can resume its checkpoints
    at any world size (module docstring).

    Args:
        source: records with ``len(source)`` and ``source[i]`` (``0 <= i < len``), e.g.
            ``headrace.io.TFRecordRandomAccess(convert.shard_paths(dst))``; every rank must see the same.
        map_func: element-wise function applied to each record (e.g. parse + decode into
            ``(inputs, targets)``); ``None`` keeps the records. Elements are tuples ``(inputs, targets)``
            for ``fit``.
        shuffle: visit each epoch in a seeded pseudo-random order (a new one per epoch); ``False``: source
            order every epoch.
        seed: the order's seed (an int, the same on every rank; required so a resumed run sees the same
            order).
        num_parallel_calls: threads running ``map_func`` (``None``: in the consumer's thread;
            ``headrace.AUTOTUNE``: one per core). Results keep their order.

    Iterating an ``ElasticDataset`` directly yields epoch 0's elements (one process, all positions).

    Raises:
        TypeError: a source without ``len()`` / ``[i]``, a non-callable ``map_func``, a non-int seed.
    """

    def __init__(self, source: Any, map_func: Callable[..., Any] | None = None, *, shuffle: bool = True,
                 seed: int = 0, num_parallel_calls: int | None = None) -> None:
        _check_source(source)
        if map_func is not None and not callable(map_func):
            raise TypeError(f"ElasticDataset(map_func={map_func!r}): expected a function of one element or None")
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
            raise TypeError(f"ElasticDataset(seed={seed!r}): expected an int, the same on every rank")
        self.source = source
        self.map_func = map_func
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.num_parallel_calls = num_parallel_calls

    def __len__(self) -> int:
        return len(self.source)

    def __iter__(self) -> Any:
        return iter(self.dataset())

    def epoch_seed(self, epoch: int) -> int:
        """The permutation seed of epoch ``epoch`` (derived from ``seed``; a 64-bit int)."""
        return int(np.random.SeedSequence([self.seed, int(epoch)]).generate_state(1, np.uint64)[0])

    def dataset(self, epoch: int = 0, start: int = 0, num_shards: int = 1, index: int = 0) -> Dataset:
        """The elements at global positions ``start + index``, ``start + index + num_shards``, ... of epoch
        ``epoch``'s order, as a :class:`headrace.Dataset` (mapped by ``map_func``)."""
        ds = Dataset.from_random_access(self.source, shuffle=self.shuffle, seed=self.epoch_seed(epoch),
                                        reshuffle_each_iteration=False, num_shards=num_shards, index=index,
                                        start=start)
        if self.map_func is not None:
            ds = ds.map(self.map_func, num_parallel_calls=self.num_parallel_calls, deterministic=True)
        return ds

    def fingerprint(self) -> dict[str, Any]:
        """What a checkpoint's position is only valid for: ``length``, ``shuffle``, ``seed``."""
        return {"length": len(self.source), "shuffle": self.shuffle, "seed": self.seed}


class RankBatches:
    """This rank's per-rank batches of an :class:`ElasticDataset`, one epoch per ``iter()`` (what ``fit``
    iterates). Its iterators' states are the global position (module docstring)."""

    def __init__(self, data: ElasticDataset, info: ProcessInfo, batch_size: int, options: Options | None,
                 first_epoch: int = 0) -> None:
        self.data, self.info, self.batch_size, self.options = data, info, batch_size, options
        self.next_epoch = first_epoch

    def __iter__(self) -> RankBatchIterator:
        it = RankBatchIterator(self, self.next_epoch)
        self.next_epoch += 1
        return it

    def cardinality(self) -> int:
        """Batches in a whole epoch: what every rank makes (the smallest rank share, ``len // world_size``
        elements, in whole batches)."""
        return len(self.data) // self.info.world_size // self.batch_size

    def peek(self) -> RankBatchIterator:
        """An iterator over the coming epoch that does not count as one (for a first look at the data)."""
        return RankBatchIterator(self, self.next_epoch)


class RankBatchIterator:
    """Batches of one epoch from ``start`` on; ``get_state()`` / ``set_state()`` carry the global position."""

    def __init__(self, owner: RankBatches, epoch: int) -> None:
        self._owner = owner
        self.epoch = epoch
        self._start = 0
        self._batches = 0
        self._it: Any = None
        self._stats: dict[str, Any] = {"peak_bytes": 0}

    def _inner(self) -> Any:
        if self._it is None:
            o = self._owner
            ds = o.data.dataset(self.epoch, self._start, o.info.world_size, o.info.rank)
            ds = ds.batch(o.batch_size, drop_remainder=True)
            if o.options is not None:
                ds = ds.with_options(o.options)
            self._it = iter(ds)
        return self._it

    def __iter__(self) -> RankBatchIterator:
        return self

    def __next__(self) -> Any:
        batch = next(self._inner())
        self._batches += 1
        return batch

    @property
    def position(self) -> int:
        """Global position after the batches produced so far (every rank's are part of the same steps)."""
        return self._start + self._batches * self._owner.batch_size * self._owner.info.world_size

    def get_state(self) -> dict[str, Any]:
        return {"kind": KIND, "epoch": self.epoch, "position": self.position, **self._owner.data.fingerprint()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue at ``state``'s epoch and global position.

        Raises:
            StateError: not an elastic state, or one written for another source length, shuffle or seed.
        """
        check_elastic_state(state, self._owner.data, "set_state")
        self.close()
        self.epoch, self._start, self._batches = int(state["epoch"]), int(state["position"]), 0

    def memory_stats(self) -> dict[str, Any]:
        return self._it.memory_stats() if self._it is not None else dict(self._stats)

    def close(self) -> None:
        it, self._it = self._it, None
        if it is not None:
            self._stats = it.memory_stats()
            it.close()

    def __enter__(self) -> RankBatchIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_elastic_state(state: Any, data: ElasticDataset, where: str) -> dict[str, Any]:
    """``state`` if it is an elastic position for ``data``; else :class:`StateError` naming the difference."""
    if not isinstance(state, dict) or state.get("kind") != KIND:
        raise StateError(f"{where}: the data state is not an ElasticDataset position "
                         f"({type(state).__name__} {str(state)[:80]}); resume with the pipeline that wrote it")
    mine = data.fingerprint()
    theirs = {k: state.get(k) for k in mine}
    if theirs != mine:
        diff = ", ".join(f"{k}={theirs[k]!r} there but {mine[k]!r} here" for k in mine if theirs[k] != mine[k])
        raise StateError(f"{where}: the checkpoint's ElasticDataset differs from this one ({diff}); resume with "
                         "the same source, shuffle and seed, or start a new run without resume=True")
    position = state.get("position")
    if not isinstance(position, int) or not 0 <= position <= mine["length"]:
        raise StateError(f"{where}: position={position!r} is not in [0, {mine['length']}]; the checkpoint is "
                         "damaged: resume from an earlier one")
    return state


def resume_data_state(checkpoint: dict[str, Any], path: str, info: ProcessInfo, dataset: Any
                      ) -> dict[str, Any] | None:
    """The data state this rank resumes from, out of a ``fit`` checkpoint (``data_states``: one JSON string
    or ``None`` per rank that wrote it).

    - :class:`ElasticDataset`: the global position (the same for every rank), at any world size.
    - Any other pipeline: this rank's own state when the world size is the one that wrote it; at another
      world size only a checkpoint at an epoch boundary (no position inside the epoch) resumes.

    Raises:
        StateError: a mid-epoch checkpoint of a per-rank pipeline at another world size (naming both
            world sizes and the fix), a checkpoint written with an ElasticDataset resumed with another
            kind of dataset or the reverse, or an ElasticDataset with another length, shuffle or seed.
    """
    written = int(checkpoint["world_size"])
    states = [json.loads(s) if s is not None else None for s in checkpoint["data_states"]]
    elastic_saved = [s for s in states if isinstance(s, dict) and s.get("kind") == KIND]
    mid_epoch = any(s is not None for s in states)
    if isinstance(dataset, ElasticDataset):
        if not mid_epoch:
            return None
        if len(elastic_saved) != len(states):
            raise StateError(f"{path} was written by a pipeline with per-rank positions, not an ElasticDataset; "
                             "resume with that pipeline (and the same world size), or start a new run")
        if any(s != elastic_saved[0] for s in elastic_saved):
            raise StateError(f"{path}: the ranks that wrote it recorded different positions "
                             f"({sorted({s['position'] for s in elastic_saved})}); resume from an earlier checkpoint")
        return check_elastic_state(elastic_saved[0], dataset, str(path))
    if elastic_saved:
        raise StateError(f"{path} was written while training on an ElasticDataset; resume with the same "
                         "ElasticDataset (its position is global), or start a new run without resume=True")
    if written == info.world_size:
        return states[info.rank]
    if not mid_epoch:
        return None  # an epoch boundary: every rank starts the next epoch afresh at any world size
    raise StateError(
        f"{path} was written by {written} rank(s) and this run has {info.world_size}: the checkpoint holds "
        f"each of the {written} ranks' own position in its share of the data (dataset.shard({written}, rank)), "
        f"which cannot be re-sharded to {info.world_size} rank(s) mid-epoch. Resume with {written} rank(s) "
        f"(torchrun with WORLD_SIZE={written}), or train on a headrace.train.ElasticDataset (a global order "
        "over a random-access source), whose checkpoints resume at any world size")


def rank_data(dataset: Any, info: ProcessInfo, per_rank: int, drop_remainder: bool, shard: bool,
              options: Options | None, first_epoch: int) -> Any:
    """What ``fit`` iterates on this rank: :class:`RankBatches` for an :class:`ElasticDataset` (training),
    its rank share batched (evaluation), or ``dataset.shard(world_size, rank)`` batched for any other.

    Raises:
        ValueError: ``shard=False`` with an ElasticDataset (it always takes this rank's positions).
    """
    if isinstance(dataset, ElasticDataset):
        if not shard:
            raise ValueError("fit(shard=False) does not apply to an ElasticDataset: it gives each rank its "
                             "positions of the global order itself; drop shard=False")
        if drop_remainder:
            return RankBatches(dataset, info, per_rank, options, first_epoch)
        ds = dataset.dataset(num_shards=info.world_size, index=info.rank)
    else:
        ds = dataset.shard(info.world_size, info.rank) if info.is_distributed and shard else dataset
    ds = ds.batch(per_rank, drop_remainder=drop_remainder)
    return ds.with_options(options) if options is not None else ds


__all__ = ["ElasticDataset", "RankBatchIterator", "RankBatches", "check_elastic_state", "rank_data",
           "resume_data_state"]
