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
  stays below the batch for its state and element index, so states are the unfused pipeline's. Over a reader's
  run, a function whose results are flat rows of scalars is called by ``map()`` (``calls.call_over_run``) and a
  plain ``batch`` receives its results as column runs (``runs.ColumnRuns``; ``docs/design/rows.md``).

Both are on by default; ``Options(static_optimizations=False)`` (tf.data's
``options.experimental_optimization.apply_default_optimizations = False``) builds every op as its own stage
calling the one below per element. ``explain()`` names the optimization applied at the stage it changed.
Results, errors and states are the same either way (``tests/engine/tuning/test_static_optimizations.py``).
Design: ``docs/design/fusion.md``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, runtime_checkable

from ..._structure import normalize_rows, scalar_columns, scalar_row
from ..calls import Raised, call_over_run, element_caller, run_caller
from ..context import IteratorContext
from ..recipe import DatasetNode, SpecOf
from ..runs import ReadyElements, ready_elements, same_columns
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
    function was called on (``index``), the results computed ahead it hands out first (``ahead``,
    ``calls.Counted``'s) and its input (``UnaryIterator``'s)."""

    index: int
    ahead: deque[Any]
    _source: Stage

    def step(self) -> Step: ...


class MapAndBatch:
    """``map_and_batch_fusion``'s loop, a ``runs.RowRuns`` and ``runs.ColumnRuns``: ``fill`` (one call per batch,
    made by the batch's stage) takes the map's input elements (its ready ones without a Python call each,
    ``runs.ReadyElements``) and calls the map's function on each itself (``calls.run_caller``), counting the map
    stage's ``index``. Over the input's ready run, while the results are flat rows of scalars (no ``finish``), the
    function is called by ``map()`` (``calls.call_over_run``) and the results are made a column at a time:
    normalized rows for ``fill``, column runs for ``fill_columns``; other results, and those computed past one that
    raised, wait in the map stage's ``ahead`` (``docs/design/rows.md``)."""

    def __init__(self, mapped: InlineMap) -> None:
        fn, self.stage, finish = mapped.step()
        source = mapped._source
        self._fn, self._mapped, self._ready = fn, mapped, ready_elements(source)
        self._rows = partial(run_caller(fn, self.stage, finish), mapped, source.__next__, self._ready)
        # while results are flat rows of scalars: calls by map() over the input's runs
        self._by_runs = finish is None and isinstance(source, ReadyElements)

    def optimization(self) -> str:
        return f"map_and_batch_fusion: {self.stage} runs in this stage's loop"

    def fill(self, items: list[Any], k: int, per: int) -> tuple[int, int]:
        """``runs.RowRuns.fill``: results of the input's runs made a column at a time (``_fill_run``) while they
        are flat rows of scalars, then one by one (``calls.run_caller``: results computed ahead first)."""
        start = len(items)
        held = largest = 0
        more = True
        while more and self._by_runs and not self._mapped.ahead and largest <= per and len(items) - start < k:
            got, big, more = self._fill_run(items, k - (len(items) - start), per)
            held, largest = held + got, max(largest, big)
        left = k - (len(items) - start)
        if left <= 0 or largest > per:
            return held, largest
        got, big = self._rows(items, left, per)
        return held + got, max(largest, big)

    def _fill_run(self, items: list[Any], k: int, per: int) -> tuple[int, int, bool]:
        """Up to ``k`` elements from the input's run (``_run_results``) appended as rows: ``(bytes, largest, whether
        a run was called)``."""
        held, largest, ys, error = self._run_results(items, k, per)
        done = normalize_rows(ys) if ys else ([], 0, 0)
        if done is None:  # normalized one by one (by run_caller: the next call), the error after them
            self._keep_ahead(ys, error)
            return held, largest, True
        items.extend(done[0])
        self._mapped.index += len(ys)
        if error is not None:
            raise self._raised(error)
        return held + done[1], max(largest, done[2]), bool(ys)

    def fill_columns(self, runs: list[Any], k: int, per: int) -> tuple[int, int, int]:
        """``runs.ColumnRuns.fill_columns`` for results that are flat rows of scalars (``_run_results``): runs of
        their components as arrays (a dict of them for dict results). ``(0, 0, 0)`` where there are none (no run
        ready, another kind of result: those are computed ahead, the map's ``ahead``, and the batch goes on with
        ``fill``)."""
        mapped = self._mapped
        if mapped.ahead or not self._by_runs:
            return 0, 0, 0
        taken = held = largest = 0
        while taken < k and largest <= per:
            rows: list[Any] = []
            got = self._run_results(rows, k - taken, per)
            ys, error = rows + got[2], got[3]
            columns = scalar_columns(ys) if ys else None
            run = None if columns is None else columns[1] if columns[0] is None else dict(zip(columns[0], columns[1]))
            if run is None or (runs and not same_columns(runs[0], run)):  # (one by one: the batch stacks them and
                mapped.index -= len(rows)  # names a mismatch; the first row, counted by run_caller, goes there too)
                self._keep_ahead(ys, error)
                break
            arrays = columns[1]  # type: ignore[index]
            runs.append(run)
            mapped.index += len(ys) - len(rows)  # (the first row's counted by run_caller)
            size = sum(a.itemsize for a in arrays)
            taken, held, largest = taken + len(ys), held + size * len(ys), max(largest, size)
            if error is not None:
                raise self._raised(error)
        return taken, held, largest

    def _run_results(self, items: list[Any], k: int, per: int) -> tuple[int, int, list[Any], Exception | None]:
        """Up to ``k`` results from the input's run: the first through ``calls.run_caller`` (appended to ``items``),
        and when that one is a flat row of scalars, those of the rest of the run by ``calls.call_over_run`` (not yet
        normalized nor counted in the index): ``(the first's bytes, the largest, the rest's results, the exception
        the function raised on the element after them or None)``. A first result of another kind turns these runs
        off for this iterator (``_by_runs``: the one-by-one loop it was)."""
        held, largest = self._rows(items, 1, per)  # (the input's __next__ when no run is ready: the next block)
        if not scalar_row(items[-1]):
            self._by_runs = False
            return held, largest, [], None
        run = self._ready()
        if run is None or k == 1 or largest > per:
            return held, largest, [], None
        ys, error = call_over_run(self._fn, self.stage, run, k - 1)
        return held, largest, ys, error

    def _keep_ahead(self, ys: list[Any], error: Exception | None) -> None:
        """Results computed ahead, and the exception after them, for the next calls to hand out one by one."""
        ahead = self._mapped.ahead
        ahead.extend(ys)
        if error is not None:
            ahead.append(Raised(error))

    def _raised(self, error: Exception) -> BaseException:
        """``error``, raised by the function on the element after those counted, counted and noted."""
        self._mapped.index += 1
        return note_error(error, self.stage, self._mapped.index - 1)
