"""``Dataset.sample_from_datasets`` and ``Dataset.choose_from_datasets``.

``sample_from_datasets`` picks the source of each element at random with probabilities ``weights``
(uniform by default). When a source is exhausted it is dropped and the weights of the others are
renormalized, or, with ``stop_on_empty_dataset=True``, iteration ends. As in tf.data: ``weights`` may be
a Dataset (each element is the vector of weights for one draw; iteration ends with it); datasets of weight
0 are never read and all-zero weights give an empty dataset; integer weights raise ``TypeError`` (tf.data
requires float32 / float64); the datasets' element specs must be compatible (checked when built); one
dataset with list weights is that dataset. The draws come from a seeded PCG64 stream: with
``rerandomize_each_iteration`` ``None`` / ``False`` (tf.data's default) every iteration repeats the same
draws, with ``True`` each iteration (epoch) draws anew; the sequence of draws is not tf.data's (its
Philox stream), the distribution is.

``choose_from_datasets`` takes element ``i`` from ``datasets[choice[i]]``; ``choice_dataset`` must yield
int64 scalars in ``[0, len(datasets))``. A choice of an exhausted dataset ends iteration
(``stop_on_empty_dataset=True``, tf.data's default) or is skipped.

State: each input's state, the exhausted flags, and (sampling) the iteration seed and number of draws;
restoring re-draws that many numbers, which is cheap (no data is read).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._args import as_int
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode, SpecOf, as_node, node_of
from .._engine.seeds import check_seed, fresh_seed, seeded_bits
from .._engine.stage import MultiInputIterator, Stage
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from .._spec import TensorSpec, require_compatible

_FIX = "give datasets whose elements have the same structure and dtypes (cast or map one first)"


def _check_datasets(datasets: Sequence[Any], what: str) -> list[DatasetNode]:
    ds = list(datasets)
    if not ds:
        raise ValueError(f"{what}: `datasets` is empty; pass at least one Dataset")
    return [as_node(d, f"{what}: datasets[{i}] is {type(d).__name__}, expected a headrace.Dataset")
            for i, d in enumerate(ds)]


class _MultiSourceIterator(MultiInputIterator):
    """Holds several input iterators and their exhausted flags; subclasses pick the next source."""

    depends_on_input_order = True  # each input's next element, by position

    def __init__(self, ctx: IteratorContext, sources: list[Stage], stop_on_empty: bool) -> None:
        super().__init__(ctx, sources)
        self._exhausted = [False] * len(sources)
        self._stop_on_empty = stop_on_empty
        self._done = False

    def _pull(self, i: int) -> tuple[bool, Any]:
        """(True, element) from source ``i``, or (False, None) when it is exhausted."""
        try:
            return True, self._sources[i].__next__()
        except StopIteration:
            self._exhausted[i] = True
            if self._stop_on_empty:
                self._done = True
            return False, None

    def _counters(self) -> dict[str, Any]:
        return {"exhausted": list(self._exhausted), "done": self._done}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        self._exhausted = [bool(v) for v in state["exhausted"]]
        self._done = bool(state["done"])


def _float_weights(weights: Any, n: int) -> np.ndarray:
    """``weights`` for ``n`` datasets as float64: tf.data's checks (length, float dtype, >= 0)."""
    w = np.asarray(weights)
    if w.shape != (n,):
        raise ValueError(f"sample_from_datasets: {w.size} weights for {n} datasets; give one weight per dataset")
    if w.dtype.kind != "f":
        raise TypeError(f"sample_from_datasets: weights {w.tolist()} have dtype {w.dtype}; tf.data requires "
                        "float32 or float64 weights (write 1.0, not 1)")
    w = w.astype(np.float64)
    if (w < 0).any() or not np.isfinite(w).all():
        raise ValueError(f"sample_from_datasets: weights {w.tolist()} must be finite and >= 0")
    return w


def common_spec(datasets: Sequence[DatasetNode], spec_of: SpecOf, what: str) -> Any:
    """The spec every dataset's elements fit (``TypeError`` when they are incompatible); None if unknown."""
    specs = [spec_of(d) for d in datasets]
    if any(s is None for s in specs):
        return None
    return require_compatible(specs, what, _FIX)


def directed_cardinality(cards: list[int], stop_on_empty: bool) -> int:
    """tf.data's cardinality of a directed interleave: infinite if any input is, else unknown."""
    if INFINITE_CARDINALITY in cards and not (stop_on_empty and any(c >= 0 for c in cards)):
        return INFINITE_CARDINALITY
    return UNKNOWN_CARDINALITY


class SampleNode(DatasetNode):
    label = "sample_from_datasets"

    def __init__(self, datasets: Sequence[Any], weights: Any, seed: int | None,
                 stop_on_empty_dataset: bool, rerandomize_each_iteration: bool | None) -> None:
        ds = _check_datasets(datasets, "sample_from_datasets")
        weights_node = node_of(weights)
        super().__init__(ds if weights_node is None else [*ds, weights_node])
        self.n = len(ds)
        self.weights_from_dataset = weights_node is not None
        if weights_node is not None:
            self.weights = [1.0] * len(ds)
            spec = weights_node.static_spec()
            if isinstance(spec, TensorSpec) and (spec.dtype.kind != "f"
                                                 or not spec.shape.is_compatible_with([len(ds)])):
                raise TypeError(f"sample_from_datasets: the weights dataset has elements {spec!r}; each must be a "
                                f"float vector of {len(ds)} weights, one per dataset")
        elif weights is None:
            self.weights = [1.0 / len(ds)] * len(ds)
        else:
            w = _float_weights(weights, len(ds))
            self.weights = (w / w.sum()).tolist() if w.sum() > 0 else w.tolist()
        self.seed_given = seed is not None
        self.seed = fresh_seed() if seed is None else as_int(seed, "sample_from_datasets(seed)")
        self.rerandomize = bool(rerandomize_each_iteration)
        self.stop_on_empty = bool(stop_on_empty_dataset)
        self.static_spec()  # incompatible datasets raise TypeError now, as in tf.data

    def compute_spec(self, spec_of: SpecOf) -> Any:
        return common_spec(self.inputs[:self.n], spec_of, self.label)

    def cardinality(self) -> int:
        """tf.data's rule (its directed interleave): infinite if a dataset that can be drawn is, else unknown;
        0 when every weight is 0. One deviation: with ``stop_on_empty_dataset=True`` a finite dataset ends
        the result, so it is unknown rather than tf.data's infinite."""
        cards = [d.cardinality() for d, w in zip(self.inputs[:self.n], self.weights) if w > 0]
        if not cards:
            return 0
        return directed_cardinality(cards, self.stop_on_empty)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        iteration = tuple(ctx.iteration) if self.rerandomize else ()
        its = [d.make_iterator(ctx) for d in self.inputs]
        weights = its.pop() if self.weights_from_dataset else None
        return _SampleIterator(ctx, self, its, iteration, weights)


class _SampleIterator(_MultiSourceIterator):
    kind = "sample_from_datasets"

    def __init__(self, ctx: IteratorContext, node: SampleNode, sources: list[Stage],
                 iteration: tuple[int, ...], weights: Stage | None) -> None:
        super().__init__(ctx, sources, node.stop_on_empty)
        self._node = node
        self._weights = node.weights
        self._weights_source = weights
        self._draw_index = 0
        self._seed = node.seed
        self._start(iteration, 0)

    def _start(self, iteration: tuple[int, ...], draws: int) -> None:
        self._iteration = iteration
        self._bits = seeded_bits(self._seed, iteration, draws)
        self._draws = draws

    def _next_weights(self) -> bool:
        """The weights of the next draw from the weights dataset; ``False`` when it has ended."""
        weights = self._weights_source
        if weights is None:
            return False
        try:
            w = weights.__next__()
        except StopIteration:
            return False
        i = self._draw_index
        self._draw_index += 1
        try:
            self._weights = _float_weights(w, len(self._sources)).tolist()
        except (TypeError, ValueError) as e:
            raise type(e)(f"{e} (element {i} of the weights dataset)") from None
        return True

    def _draw(self) -> int | None:
        if self._weights_source is not None and not self._next_weights():
            return None
        live = [i for i, e in enumerate(self._exhausted) if not e and self._weights[i] > 0]
        if not live:
            return None
        self._draws += 1
        r = (int(self._bits.random_raw()) >> 11) * (1.0 / (1 << 53)) * sum(self._weights[i] for i in live)
        for i in live:
            r -= self._weights[i]
            if r < 0:
                return i
        return live[-1]

    def __next__(self) -> Any:
        while not self._done:
            i = self._draw()
            if i is None:
                self._done = True
                break
            ok, x = self._pull(i)
            if ok:
                return x
        raise StopIteration

    def _settings(self) -> dict[str, Any]:
        return {"weights": self._node.weights}

    def _counters(self) -> dict[str, Any]:
        out = {**super()._counters(), "seed": self._seed, "iteration": list(self._iteration), "draws": self._draws}
        if self._weights_source is not None:
            out.update(weights_input=self._weights_source.get_state(), weights_index=self._draw_index)
        return out

    def _restore_counters(self, state: dict[str, Any]) -> None:
        super()._restore_counters(state)
        self._seed = check_seed(self.kind, state, self._node.seed, self._node.seed_given)
        self._start(tuple(int(i) for i in state["iteration"]), int(state["draws"]))
        if self._weights_source is not None:
            self._weights_source.set_state(state["weights_input"])
            self._draw_index = int(state["weights_index"])

    def _children(self) -> list[Stage]:
        return [*self._sources, *([self._weights_source] if self._weights_source is not None else [])]


class ChooseNode(DatasetNode):
    label = "choose_from_datasets"

    def __init__(self, datasets: Sequence[Any], choice_dataset: Any, stop_on_empty_dataset: bool) -> None:
        ds = _check_datasets(datasets, "choose_from_datasets")
        choice = as_node(choice_dataset, f"choose_from_datasets: choice_dataset must be a Dataset of int64 "
                                         f"scalars, got {type(choice_dataset).__name__}")
        super().__init__([*ds, choice])
        self.n = len(ds)
        self.stop_on_empty = bool(stop_on_empty_dataset)
        self.static_spec()  # incompatible datasets raise TypeError now, as in tf.data
        spec = choice.static_spec()
        if isinstance(spec, TensorSpec) and (spec.dtype != np.int64 or spec.shape.rank not in (None, 0)):
            raise TypeError(f"choose_from_datasets: choice_dataset has elements {spec!r}; it must yield int64 "
                            "scalars (Dataset.range, or .map(lambda i: tf-style int64 casts))")

    def compute_spec(self, spec_of: SpecOf) -> Any:
        return common_spec(self.inputs[:self.n], spec_of, self.label)

    def cardinality(self) -> int:
        return directed_cardinality([d.cardinality() for d in self.inputs[:self.n]], self.stop_on_empty)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        its = [d.make_iterator(ctx) for d in self.inputs]
        return _ChooseIterator(ctx, its[:-1], its[-1], self.stop_on_empty)


class _ChooseIterator(_MultiSourceIterator):
    kind = "choose_from_datasets"

    def __init__(self, ctx: IteratorContext, sources: list[Stage], choice: Stage,
                 stop_on_empty: bool) -> None:
        super().__init__(ctx, sources, stop_on_empty)
        self._choice = choice
        self._index = 0

    def __next__(self) -> Any:
        n = len(self._sources)
        while not self._done:
            c = self._choice.__next__()
            i = self._index
            self._index += 1
            if not isinstance(c, np.integer | int) or isinstance(c, bool | np.bool_) or not 0 <= int(c) < n:
                raise ValueError(f"choose_from_datasets: choice element {i} is {c} ({type(c).__name__}); "
                                 f"expected an int64 scalar in [0, {n - 1}] (one index per dataset)")
            if self._exhausted[int(c)]:
                continue
            ok, x = self._pull(int(c))
            if ok:
                return x
        raise StopIteration

    def _counters(self) -> dict[str, Any]:
        return {**super()._counters(), "index": self._index, "choice": self._choice.get_state()}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        super()._restore_counters(state)
        self._choice.set_state(state["choice"])
        self._index = int(state["index"])

    def _children(self) -> list[Stage]:
        return [*self._sources, self._choice]
