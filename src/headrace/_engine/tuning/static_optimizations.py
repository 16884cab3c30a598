"""tf.data's static optimizations that headrace applies for the user, and where each lives.

- ``map_fusion`` (here): consecutive sequential ``map`` s (``num_parallel_calls=None``, run in the consumer's
  thread) run as one stage, :class:`FusedMapIterator`: one Python call per element for the chain instead of one
  per map. Each map keeps its own function, normalization, ``output_signature`` / traced-spec check, stage name,
  element index and error note; the state is the unfused chain's, nested map by map (``{"kind": "map", "index":
  ..., "input": {"kind": "map", ...}}``), so a state moves between fused and unfused builds in both directions.
- ``map_and_batch_fusion`` (here): a rewrite of the recipe. :func:`batch_recipe` gives a ``batch`` /
  ``padded_batch`` / ``ragged_batch`` over a sequential ``map`` (one not fused with a map below it) as a
  :class:`MapAndBatchNode`, whose stage is the batch's with :class:`MapAndBatch` as its loop: one call per batch
  pulls the map's input and calls the map's function on each element (``calls.run_caller``). The map's own stage
  stays below the batch for its state and element index, so states are the unfused pipeline's.

Both are on by default; ``Options(static_optimizations=False)`` (tf.data's
``options.experimental_optimization.apply_default_optimizations = False``) builds every op as its own stage
calling the one below per element. ``explain()`` names the optimization applied at the stage it changed.
Results, errors and states are the same either way (``tests/engine/tuning/test_static_optimizations.py``).
Design: ``docs/design/fusion.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, runtime_checkable

from ..calls import element_caller, run_caller
from ..context import IteratorContext
from ..recipe import DatasetNode, SpecOf
from ..runs import ready_elements
from ..stage import Stage
from ..stage_support import check_state, note_error

Step = tuple[Callable[..., Any], str, Callable[[Any], Any] | None]
"""One map of a fused chain: its function, its stage name, and its ``finish`` (signature conversion / check)."""


def optimizing(ctx: IteratorContext) -> bool:
    """Whether this iterator applies the static optimizations (``Options.static_optimizations``)."""
    return ctx.options.static_optimizations is not False


class FusedMapIterator(Stage):
    """Consecutive sequential maps as one stage (``map_fusion``): ``steps`` innermost first."""

    kind = "map"

    def __init__(self, ctx: IteratorContext, source: Stage, steps: list[Step]) -> None:
        super().__init__(ctx)
        self._source = source
        self._next_input = source.__next__
        self._steps = steps
        self._calls = [(element_caller(fn, stage, normalize_result=True, finish=finish), stage)
                       for fn, stage, finish in steps]
        self._index = [0] * len(steps)  # elements each map's function was called on (its note's "element i")
        self._stage = " + ".join(stage for _fn, stage, _finish in steps)

    @classmethod
    def chain(cls, ctx: IteratorContext, below: Stage, step: Step) -> FusedMapIterator:
        """``below`` (a sequential map, fused or not) followed by one more map (``step``)."""
        if isinstance(below, FusedMapIterator):
            fused = cls(ctx, below._source, [*below._steps, step])
            fused._index = [*below._index, 0]
            return fused
        return cls(ctx, below._source, [below.step(), step])  # type: ignore[attr-defined]

    def optimization(self) -> str:
        return f"map_fusion: {' and '.join(stage for _f, stage, _g in self._steps)} run as one stage"

    def __next__(self) -> Any:
        x = self._next_input()
        index = self._index
        for k, (call, stage) in enumerate(self._calls):  # each map's call and note, as _MapIterator's
            i = index[k]
            index[k] = i + 1
            try:
                x = call(x)
            except Exception as e:
                note_error(e, stage, i)
                raise
        return x

    def get_state(self) -> dict[str, Any]:
        state = self._source.get_state()
        for i in self._index:  # innermost map first: the unfused chain's nesting
            state = {"kind": "map", "index": i, "input": state}
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        indices = []
        for _ in self._steps:  # outermost map first
            check_state(state, "map")
            indices.append(int(state["index"]))
            state = state["input"]
        self._source.set_state(state)
        self._index = indices[::-1]

    def _children(self) -> list[Stage]:
        return [self._source]


# ---- map_and_batch_fusion ----------------------------------------------------------------------------------
class Batching(Protocol):
    """A batch node (``batch``, ``padded_batch``, ``ragged_batch``) as :class:`MapAndBatchNode` builds it."""

    inputs: tuple[DatasetNode, ...]
    label: str

    def cardinality(self) -> int: ...

    def compute_spec(self, spec_of: SpecOf) -> Any: ...

    def make_iterator(self, ctx: IteratorContext) -> Stage: ...

    def batch_over(self, ctx: IteratorContext, source: Stage, rows: MapAndBatch | None) -> Stage:
        """The batch's stage over ``source`` (its input's stage), gathering with ``rows`` where given."""
        ...


def _builds_below(node: DatasetNode) -> DatasetNode:
    """The node whose stage ``node`` builds as its own (``with_options`` and ``prefetch(0)`` add no stage)."""
    while getattr(node, "adds_no_stage", False):
        node = node.inputs[0]
    return node


def _inline_map(node: DatasetNode) -> bool:
    """Whether ``node`` builds a sequential map's stage of its own (``MapNode.inline``, not fused with a map below
    it by ``map_fusion``)."""
    node = _builds_below(node)
    return bool(getattr(node, "inline", False)) and not getattr(_builds_below(node.inputs[0]), "inline", False)


def batch_recipe(node: Batching, ctx: IteratorContext) -> MapAndBatchNode | Batching:
    """What the recipe holds for ``node`` under the static optimizations: a :class:`MapAndBatchNode` where its input
    is a sequential map (``map_and_batch_fusion``), else ``node`` itself."""
    if optimizing(ctx) and _inline_map(node.inputs[0]):
        return MapAndBatchNode(node)
    return node


class MapAndBatchNode(DatasetNode):
    """``map_and_batch_fusion``: ``batch`` (``padded_batch``, ``ragged_batch``) over a sequential ``map``, built as
    the batch's stage with :class:`MapAndBatch` as its loop (the recipe's rewrite, :func:`batch_recipe`)."""

    def __init__(self, batch: Batching) -> None:
        super().__init__(batch.inputs)
        self.batch = batch
        self.label = batch.label

    def cardinality(self) -> int:
        return self.batch.cardinality()

    def compute_spec(self, spec_of: SpecOf) -> Any:
        return self.batch.compute_spec(spec_of)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        mapped = self.inputs[0].make_iterator(ctx)  # the map's stage: its state and element index
        return self.batch.batch_over(ctx, mapped, MapAndBatch(mapped) if isinstance(mapped, InlineMap) else None)


@runtime_checkable
class InlineMap(Protocol):
    """A sequential map's stage (``_ops/map.py``) as :class:`MapAndBatch` runs it: its step, the elements its
    function was called on (``index``) and its input (``UnaryIterator``'s)."""

    index: int
    _source: Stage

    def step(self) -> Step: ...


class MapAndBatch:
    """``map_and_batch_fusion``'s loop, a ``runs.RowRuns``: ``fill`` (one call per batch, made by the batch's stage)
    takes the map's input elements (its ready ones without a Python call each, ``runs.ReadyElements``) and calls
    the map's function on each itself (``calls.run_caller``), counting the map stage's ``index``."""

    def __init__(self, mapped: InlineMap) -> None:
        fn, self.stage, finish = mapped.step()
        source = mapped._source
        self.fill = partial(run_caller(fn, self.stage, finish), mapped, source.__next__, ready_elements(source))

    def optimization(self) -> str:
        return f"map_and_batch_fusion: {self.stage} runs in this stage's loop"
