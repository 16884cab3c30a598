"""``Dataset.prefetch``: a background thread produces up to ``buffer_size`` elements ahead.

The buffered elements are charged to the memory budget; ``buffer_size=AUTOTUNE`` (or ``None``, as in
tf.data) starts at
``PREFETCH_AUTOTUNE_BUFFER`` and shrinks silently to the stage's share of the budget, an explicit size
shrinks with one warning. ``buffer_size=0`` prefetches nothing (the stage passes elements through).
"""

from __future__ import annotations

from typing import Any

from .._args import count_arg
from .._engine.context import IteratorContext
from .._engine.pool.parallel import PoolIterator
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage
from .._engine.tuning.starting_values import PREFETCH_AUTOTUNE_BUFFER
from .._options import AUTOTUNE


def _identity(x: Any) -> Any:
    return x


class PrefetchNode(DatasetNode):
    label = "prefetch"
    shard_passes = True
    spec_passes = True

    def __init__(self, input_node: DatasetNode, buffer_size: int | None) -> None:
        super().__init__([input_node])
        self.buffer_size = AUTOTUNE if buffer_size is None else count_arg(
            buffer_size, "prefetch(buffer_size)", minimum=0, allow_autotune=True,
            fix="use headrace.AUTOTUNE (or None), or 0 for no prefetching")

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()

    @property
    def adds_no_stage(self) -> bool:
        """``prefetch(0)`` builds its input's stage as its own (``static_optimizations`` looks through it)."""
        return self.buffer_size == 0

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        source = self.inputs[0].make_iterator(ctx)
        if self.buffer_size == 0:
            return source
        autotune = self.buffer_size == AUTOTUNE
        size = PREFETCH_AUTOTUNE_BUFFER if autotune else self.buffer_size
        stage = ctx.stage_name(self, f"prefetch({'AUTOTUNE' if autotune else size})")
        return PoolIterator(ctx, source, _identity, stage, 1, True, kind="prefetch", window=size,
                            warn_shrink=not autotune, identity=True, autotune=autotune, runs=False)
