"""``Dataset.shard``: elements ``index, index + num_shards, ...`` (one worker's disjoint share); and
:func:`shard_at_source`, which gives a worker its share by reading less instead of reading everything.

The input runs deterministically (its ``deterministic=False`` stages deliver in order): every rank keeps the
positions it owns of the same stream, so a stream ordered differently in each rank would give overlapping
shares. An input element that raised an error keeps its position (unlike tf.data, which does not count it): the
shard owning that position re-raises the error and the other shards skip it, so the shards stay disjoint
and complete across ranks even when some elements fail.
"""

from __future__ import annotations

from typing import Any

from .._args import count_arg
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage, UnaryIterator
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY


class ShardNode(DatasetNode):
    label = "shard"
    spec_passes = True

    def __init__(self, input_node: DatasetNode, num_shards: int, index: int) -> None:
        super().__init__([input_node])
        num_shards = count_arg(num_shards, "shard(num_shards)", minimum=1, fix="use num_shards=world size (>= 1)")
        index = count_arg(index, "shard(index)", minimum=0, fix="index is the worker's rank, 0 <= index < num_shards")
        if index >= num_shards:
            raise ValueError(f"shard(num_shards={num_shards}, index={index}): index must be in "
                             f"[0, {num_shards - 1}]; pass the worker's rank as index")
        self.num_shards = int(num_shards)
        self.index = int(index)

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if n in (INFINITE_CARDINALITY, UNKNOWN_CARDINALITY):
            return n
        return n // self.num_shards + (1 if self.index < n % self.num_shards else 0)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        # Every rank runs the input and keeps the positions it owns: the shares are disjoint and complete only
        # if the input has the same order in every rank, so its deterministic=False stages run in order.
        return _ShardIterator(ctx, self.inputs[0].make_iterator(ctx.in_order()), self.num_shards, self.index)


class _ShardIterator(UnaryIterator):
    kind = "shard"

    def __init__(self, ctx: IteratorContext, source: Stage, num_shards: int, index: int) -> None:
        super().__init__(ctx, source)
        self._num_shards = num_shards
        self._index = index
        self._position = 0  # input elements consumed

    def __next__(self) -> Any:
        nxt = self._next_input
        while True:
            p = self._position
            mine = p % self._num_shards == self._index
            try:
                x = nxt()
            except StopIteration:
                raise
            except Exception:
                # An element that failed still has a position: the owning shard reports the error,
                # the others skip it, so shard assignment stays aligned across ranks.
                self._position = p + 1
                if mine:
                    raise
                continue
            self._position = p + 1
            if mine:
                return x

    def _settings(self) -> dict[str, Any]:
        return {"num_shards": self._num_shards, "index": self._index}

    def _counters(self) -> dict[str, Any]:
        return {"position": self._position}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        self._position = int(state["position"])


def shard_at_source(node: DatasetNode, num_shards: int, index: int) -> DatasetNode:
    """Share ``index`` of ``num_shards`` of ``node``'s elements, taken as close to the source as possible.

    The shard moves below every transformation that keeps a partition a partition (``map``, ``filter``,
    ``batch``, ``shuffle``, ``prefetch``, ``repeat`` ...: ``shard_passes``), into the file list of an
    ``interleave`` / ``TFRecordDataset`` with at least ``num_shards`` files, or into the shard arguments of a
    random-access or Parquet source; otherwise it is a ``shard()`` right above the deepest node it reached.
    The shares are disjoint and together complete, like ``Dataset.shard``'s, but not the same split (a
    worker gets whole files, and batches of its own elements), as tf.data's ``AutoShardPolicy.FILE`` does.
    Each worker then reads and decodes only its share (``headrace.torch.to_torch`` uses it).
    """
    if num_shards == 1:
        return node
    own = node.shard_source(num_shards, index)
    if own is not None:
        return own
    if node.shard_passes and len(node.inputs) == 1:
        return node.with_inputs([shard_at_source(node.inputs[0], num_shards, index)])
    return ShardNode(node, num_shards, index)
