"""``Dataset.from_random_access(source, ...)``: elements ``source[i]`` of a source with ``len()`` and ``[i]``.

Global shuffle without a shuffle buffer: with ``shuffle=True`` the iterator visits ``source`` in the order
of a pseudo-random permutation of ``range(len(source))`` computed *index by index* (a keyed Feistel
network with cycle walking, the construction of ``tf.random.experimental.index_shuffle`` and grain's
global shuffle), so it needs O(1) memory however many records there are, and restores in O(1).

- The permutation of an iteration is keyed by ``iteration_seed(seed, iteration path)``; with
  ``reshuffle_each_iteration=True`` (default) every new iterator over the dataset (each epoch, also inside
  ``repeat``) takes the next iteration number, so each epoch has a new, reproducible order.
- Sharding by rank (``num_shards=world_size, index=rank``): all ranks compute the same permutation and
  rank ``r`` takes its positions ``r, r + num_shards, ...``: the shards are disjoint and together cover
  every element once per epoch. ``shuffle=True`` with ``num_shards > 1`` needs an explicit ``seed`` so
  every rank draws the same permutation.
- ``start``: skip the first ``start`` positions of the (global) order in O(1): rank ``r`` then takes
  positions ``start + r, start + r + num_shards, ...``. A run checkpointed at global position ``P`` with
  one number of ranks continues with another (``headrace.train.ElasticDataset``).

State: ``{"kind": "random_access", "position", "iteration_seed", ...settings}`` (position = elements of
this shard already produced). No element is buffered, so nothing is charged to the memory budget.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from .._args import as_int, as_seed
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.seeds import fresh_seed, iteration_seed
from .._engine.stage import Stage
from .._engine.stage_support import check_state, note_error
from .._structure import normalize

_ROUNDS = 6
_BLOCK = 1024
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer (a 64-bit bijective hash), elementwise on uint64 arrays (wrapping)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


class IndexPermutation:
    """A pseudo-random permutation of ``range(n)`` keyed by ``seed``, evaluated index by index.

    ``perm(positions)`` maps an int array of positions in ``[0, n)`` to distinct indices in ``[0, n)``:
    a balanced Feistel network (``_ROUNDS`` rounds) permutes ``[0, 4**k)`` with ``4**k >= n``, and cycle
    walking re-applies it to values ``>= n`` until they fall inside (fewer than 4 rounds on average).
    """

    def __init__(self, n: int, seed: int) -> None:
        self.n = int(n)
        bits = max(2, (self.n - 1).bit_length())
        self._half = np.uint64((bits + 1) // 2)
        self._mask = np.uint64((1 << int(self._half)) - 1)
        self._keys = np.random.SeedSequence(seed).generate_state(_ROUNDS, dtype=np.uint64)

    def _feistel(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for key in self._keys:
            left, right = right, left ^ (_mix(right ^ key) & self._mask)
        return (left << self._half) | right

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        x = self._feistel(np.asarray(positions, dtype=np.uint64))
        outside = x >= np.uint64(self.n)
        while outside.any():
            x[outside] = self._feistel(x[outside])
            outside = x >= np.uint64(self.n)
        return x.astype(np.int64)


def _check_int(name: str, value: Any, minimum: int) -> int:
    return as_int(value, f"from_random_access({name})", minimum=minimum)


class RandomAccessNode(DatasetNode):
    """See the module docstring. ``source`` needs ``__len__`` and ``__getitem__(int)``."""

    label = "from_random_access"

    def __init__(self, source: Any, shuffle: bool = False, seed: int | None = None,
                 reshuffle_each_iteration: bool = True, num_shards: int = 1, index: int = 0,
                 start: int = 0) -> None:
        super().__init__()
        if not (hasattr(source, "__len__") and hasattr(source, "__getitem__")):
            raise TypeError(f"from_random_access(source={type(source).__name__}): the source needs len() and "
                            "[i] (e.g. headrace.io.TFRecordRandomAccess, a list, a numpy array)")
        self.num_shards = _check_int("num_shards", num_shards, 1)
        self.index = _check_int("index", index, 0)
        if self.index >= self.num_shards:
            raise ValueError(f"from_random_access(index={index}, num_shards={num_shards}): index must be in "
                             f"[0, {self.num_shards - 1}] (the rank among num_shards workers)")
        self.start = _check_int("start", start, 0)
        if self.start > len(source):
            raise ValueError(f"from_random_access(start={start}): the source has {len(source)} elements; start "
                             f"must be in [0, {len(source)}] (a position in the global order)")
        seed = as_seed(seed, "from_random_access(seed)")
        if shuffle and seed is None and self.num_shards > 1:
            raise ValueError(f"from_random_access(shuffle=True, num_shards={num_shards}, seed=None): shards need "
                             "the same permutation on every rank; pass the same seed=<int> on every rank")
        self.source = source
        self.shuffle = bool(shuffle)
        self.seed = fresh_seed() if seed is None else int(seed)
        self.reshuffle = bool(reshuffle_each_iteration)

    def shard_source(self, num_shards: int, index: int) -> DatasetNode | None:
        """This share again split ``num_shards`` ways: positions ``index + num_shards * k`` of this shard's."""
        clone = copy.copy(self)
        clone.index = self.index + self.num_shards * index
        clone.num_shards = self.num_shards * num_shards
        return clone

    def cardinality(self) -> int:
        n = len(self.source) - self.start
        return n // self.num_shards + (1 if self.index < n % self.num_shards else 0)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        iteration = tuple(ctx.iteration) if self.reshuffle else ()
        return _RandomAccessIterator(ctx, self, iteration_seed(self.seed, iteration))


class _RandomAccessIterator(Stage):
    kind = "random_access"

    def __init__(self, ctx: IteratorContext, ds: RandomAccessNode, seed: int) -> None:
        super().__init__(ctx)
        self._ds = ds
        self._n = len(ds.source)
        self._count = ds.cardinality()
        self.stage = ctx.stage_name(ds, "from_random_access")
        self._reset(seed, 0)

    def _reset(self, seed: int, position: int) -> None:
        self._seed = seed
        self._perm = IndexPermutation(self._n, seed) if self._ds.shuffle else None
        self._position = position
        self._block_start = -1
        self._block = np.empty(0, dtype=np.int64)

    def _source_index(self, position: int) -> int:
        offset = position - self._block_start
        if self._block_start < 0 or not 0 <= offset < len(self._block):
            self._block_start = position
            stop = min(position + _BLOCK, self._count)
            global_positions = (self._ds.start + self._ds.index
                                + np.arange(position, stop, dtype=np.int64) * self._ds.num_shards)
            self._block = global_positions if self._perm is None else self._perm(global_positions)
            offset = 0
        return int(self._block[offset])

    def __next__(self) -> Any:
        if self._closed or self._position >= self._count:
            raise StopIteration
        position = self._position
        i = self._source_index(position)
        self._position += 1  # stays usable after an error: the next call moves on
        try:
            return normalize(self._ds.source[i], f"from_random_access: source[{i}]")
        except Exception as e:
            raise note_error(e, self.stage, position) from None

    def _settings(self) -> dict[str, Any]:
        return {"length": self._n, "shuffle": self._ds.shuffle, "num_shards": self._ds.num_shards,
                "index": self._ds.index, "start": self._ds.start}

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, **self._settings(), "position": self._position, "iteration_seed": self._seed}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, **self._settings())
        self._reset(int(state["iteration_seed"]), int(state["position"]))
