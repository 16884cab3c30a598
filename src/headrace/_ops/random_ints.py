"""``Dataset.random``: an infinite stream of pseudorandom int64 scalars (tf.data's ``Dataset.random``).

Values are uniform in ``[0, 2**32)``, as tf.data's (which draws 32-bit Philox outputs); the sequence is
not TensorFlow's. ``seed`` makes it reproducible; with ``rerandomize_each_iteration`` ``None`` / ``False``
(tf.data's default) every iteration (every ``iter()``, every ``repeat`` epoch) yields the same sequence,
with ``True`` each one draws anew (from ``SeedSequence([seed, *iteration path])``, ``seeds.py``).

State: the seed, the iteration path and the number of values drawn; restoring advances the generator
(``PCG64.advance``) without drawing, so it costs nothing however far the stream went.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._args import as_seed
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode, SpecOf
from .._engine.seeds import check_seed, fresh_seed, seeded_bits
from .._engine.stage import Stage
from .._engine.stage_support import check_state
from .._options import INFINITE_CARDINALITY
from .._spec import TensorSpec


class RandomNode(DatasetNode):
    label = "random"

    def __init__(self, seed: Any, rerandomize_each_iteration: bool | None) -> None:
        super().__init__()
        seed = as_seed(seed, "random(seed)")
        self.seed_given = seed is not None
        self.seed = fresh_seed() if seed is None else seed
        self.rerandomize = bool(rerandomize_each_iteration)

    def cardinality(self) -> int:
        return INFINITE_CARDINALITY

    def compute_spec(self, spec_of: SpecOf) -> Any:
        return TensorSpec((), np.int64)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _RandomIterator(ctx, self, tuple(ctx.iteration) if self.rerandomize else ())


class _RandomIterator(Stage):
    kind = "random"

    def __init__(self, ctx: IteratorContext, node: RandomNode, iteration: tuple[int, ...]) -> None:
        super().__init__(ctx)
        self._node = node
        self._seed = node.seed
        self._start(iteration, 0)

    def _start(self, iteration: tuple[int, ...], drawn: int) -> None:
        self._iteration = iteration
        self._bits = seeded_bits(self._seed, iteration, drawn)
        self._drawn = drawn

    def __next__(self) -> Any:
        self._drawn += 1
        return np.int64(int(self._bits.random_raw()) >> 32)

    def skip_ahead(self, n: int) -> None:
        self._bits.advance(n)
        self._drawn += n

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "seed": self._seed, "iteration": list(self._iteration), "drawn": self._drawn}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        self._seed = check_seed(self.kind, state, self._node.seed, self._node.seed_given)
        self._start(tuple(int(i) for i in state["iteration"]), int(state["drawn"]))
