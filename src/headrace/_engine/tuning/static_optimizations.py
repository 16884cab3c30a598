"""tf.data's static optimizations that headrace applies for the user, and where each lives.

- ``map_fusion`` (here): consecutive sequential ``map`` s (``num_parallel_calls=None``, run in the consumer's
  thread) run as one stage, :class:`FusedMapIterator`: one Python call per element for the chain instead of one
  per map. Each map keeps its own function, normalization, ``output_signature`` / traced-spec check, stage name,
  element index and error note; the state is the unfused chain's, nested map by map (``{"kind": "map", "index":
  ..., "input": {"kind": "map", ...}}``), so a state moves between fused and unfused builds in both directions.
- ``map_and_batch_fusion`` (``Stage.fill`` / ``_MapIterator.fill``): a sequential ``batch`` / ``padded_batch``
  gathers its elements with one call per batch, and a sequential ``map`` right below runs its function inside
  that call.

Both are on by default; ``Options(static_optimizations=False)`` (tf.data's
``options.experimental_optimization.apply_default_optimizations = False``) builds every op as its own stage
calling the one below per element. ``explain()`` names the optimization applied at the stage it changed.
Results, errors and states are the same either way (``tests/engine/tuning/test_static_optimizations.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..._structure import SCALAR_TYPES, normalize
from ..calls import refuse_empty, stop_iteration_error
from ..context import IteratorContext
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
        for k, (fn, stage, finish) in enumerate(self._steps):  # each map's convention, as _MapIterator's
            i = index[k]
            index[k] = i + 1
            try:
                x = fn(*x) if type(x) is tuple else fn(x)
                if type(x) not in SCALAR_TYPES:
                    x = normalize(refuse_empty(x, stage), stage)
                if finish is not None:
                    x = finish(x)
            except StopIteration as e:
                raise note_error(stop_iteration_error(stage), stage, i) from e
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
