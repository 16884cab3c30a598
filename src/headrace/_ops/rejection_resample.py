"""``Dataset.rejection_resample(class_func, target_dist, initial_dist, seed)``: resample to a class
distribution by rejection (tf.data's), yielding ``(class, element)`` pairs.

Element ``x`` of class ``c = class_func(x)`` (an integer scalar in ``[0, len(target_dist))``) is kept with
probability ``a_c = r_c / max_k r_k`` where ``r_c = target_dist[c] / initial_dist[c]``: the kept elements
follow ``target_dist``. ``initial_dist=None`` estimates it from the classes seen so far (counts plus one, so
every class starts possible), as tf.data does online. The draws come from a seeded PCG64 stream (tf.data's
distribution, not its random sequence); ``seed=None`` draws a seed when the pipeline is built.

State: the input's position, the class counts, the seed, the iteration path and the number of draws: all
positions and counters, no elements. Nothing is held beyond the element being decided.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._args import as_int, as_seed
from .._engine.calls import call_with_element, guarded_call
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode, SpecOf, trace
from .._engine.seeds import check_seed, fresh_seed, seeded_bits
from .._engine.stage import Stage, UnaryIterator
from .._engine.stage_support import fn_name, note_error
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from .._spec import TensorSpec


def _dist(values: Any, what: str, n: int | None = None) -> np.ndarray:
    d = np.asarray(values, dtype=np.float64)
    if d.ndim != 1 or d.size == 0 or (n is not None and d.size != n):
        raise ValueError(f"rejection_resample({what}={values!r}): expected {n or 'one or more'} probabilities, "
                         "one per class")
    if (d < 0).any() or not np.isfinite(d).all() or d.sum() <= 0:
        raise ValueError(f"rejection_resample({what}={values!r}): probabilities must be finite, >= 0 and not "
                         "all 0")
    return d / d.sum()


class RejectionResampleNode(DatasetNode):
    def __init__(self, input_node: DatasetNode, class_func: Callable[..., Any], target_dist: Sequence[float],
                 initial_dist: Sequence[float] | None, seed: Any) -> None:
        super().__init__([input_node])
        if not callable(class_func):
            raise TypeError(f"rejection_resample(class_func={class_func!r}): class_func must be callable")
        self.class_func = class_func
        self.target = _dist(target_dist, "target_dist")
        self.initial = None if initial_dist is None else _dist(initial_dist, "initial_dist", self.target.size)
        if self.initial is not None and ((self.target > 0) & (self.initial == 0)).any():
            raise ValueError("rejection_resample: a class with target probability > 0 has initial probability 0; "
                             "it can never be produced")
        seed = as_seed(seed, "rejection_resample(seed)")
        self.seed_given = seed is not None
        self.seed = fresh_seed() if seed is None else seed
        self.label = f"rejection_resample({fn_name(class_func)})"

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        return INFINITE_CARDINALITY if n == INFINITE_CARDINALITY else UNKNOWN_CARDINALITY

    def compute_spec(self, spec_of: SpecOf) -> Any:
        spec = spec_of(self.inputs[0])
        cls = trace(lambda x: call_with_element(self.class_func, x), spec)
        return None if spec is None or not isinstance(cls, TensorSpec) else (cls, spec)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _ResampleIterator(ctx, self.inputs[0].make_iterator(ctx), self, ctx.stage_name(self, self.label))


class _ResampleIterator(UnaryIterator):
    depends_on_input_order = True  # the acceptance draws go by position
    kind = "rejection_resample"

    def __init__(self, ctx: IteratorContext, source: Stage, node: RejectionResampleNode, stage: str) -> None:
        super().__init__(ctx, source)
        self._node = node
        self._stage = stage
        self._counts = np.zeros(node.target.size, np.int64)
        self._index = 0
        self._seed = node.seed
        self._start(tuple(ctx.iteration), 0)

    def _start(self, iteration: tuple[int, ...], draws: int) -> None:
        self._iteration = iteration
        self._bits = seeded_bits(self._seed, iteration, draws)
        self._draws = draws

    def _acceptance(self, c: int) -> float:
        initial = self._node.initial
        if initial is None:
            initial = (self._counts + 1) / (self._counts.sum() + self._counts.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(initial > 0, self._node.target / initial, 0.0)
        top = ratio.max()
        return float(ratio[c] / top) if top > 0 else 0.0

    def __next__(self) -> Any:
        n = self._node.target.size
        while True:
            x = self._next_input()
            i = self._index
            self._index = i + 1
            try:
                raw = guarded_call(self._node.class_func, x, self._stage)
                c = as_int(raw, f"{self._stage}: class_func result")
                if not 0 <= c < n:
                    raise ValueError(f"{self._stage}: class_func returned {c}; classes are 0 .. {n - 1} "
                                     "(one per entry of target_dist)")
            except Exception as e:
                note_error(e, self._stage, i)
                raise
            self._counts[c] += 1
            self._draws += 1
            u = (int(self._bits.random_raw()) >> 11) * (1.0 / (1 << 53))
            if u < self._acceptance(c):
                return (raw if isinstance(raw, np.generic) else np.int64(c)), x

    def _settings(self) -> dict[str, Any]:
        return {"classes": int(self._node.target.size)}

    def _counters(self) -> dict[str, Any]:
        return {"index": self._index, "counts": self._counts.tolist(), "seed": self._seed,
                "iteration": list(self._iteration), "draws": self._draws}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        self._index = int(state["index"])
        self._counts = np.asarray(state["counts"], np.int64)
        self._seed = check_seed(self.kind, state, self._node.seed, self._node.seed_given)
        self._start(tuple(int(i) for i in state["iteration"]), int(state["draws"]))
