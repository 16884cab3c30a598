"""``Dataset.repeat``: iterate the input ``count`` times (``None`` or any negative count: forever).

Each epoch builds a fresh input iterator (so ``shuffle`` reshuffles). An epoch that yields nothing ends
the repetition (no infinite loop over an empty dataset).
"""

from __future__ import annotations

from typing import Any

from .._args import as_int
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage
from .._engine.stage_support import check_state
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY


class RepeatNode(DatasetNode):
    label = "repeat"
    shard_passes = True
    spec_passes = True

    def __init__(self, input_node: DatasetNode, count: int | None) -> None:
        super().__init__([input_node])
        self.count = -1 if count is None else max(-1, as_int(count, "repeat(count)"))

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if self.count == 0 or n == 0:
            return 0
        if self.count == -1:
            return INFINITE_CARDINALITY if n != UNKNOWN_CARDINALITY else UNKNOWN_CARDINALITY
        if n in (INFINITE_CARDINALITY, UNKNOWN_CARDINALITY):
            return n
        return n * self.count

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _RepeatIterator(ctx, self.inputs[0], self.count)


class _RepeatIterator(Stage):
    kind = "repeat"
    ctx: IteratorContext

    def __init__(self, ctx: IteratorContext, input_node: DatasetNode, count: int) -> None:
        super().__init__(ctx)
        self._input = input_node
        self._count = count
        self._epoch = 0
        self._in_epoch = 0
        self._source: Stage | None = self._open() if count != 0 else None

    def _open(self) -> Stage:
        """The input for this epoch, in a context whose iteration path ends with the epoch (its seeds)."""
        return self._input.make_iterator(self.ctx.for_iteration(self._epoch))

    def __next__(self) -> Any:
        while self._source is not None:
            try:
                x = self._source.__next__()
            except StopIteration:
                empty = self._in_epoch == 0
                self._source.close()
                self._source = None
                self._epoch += 1
                self._in_epoch = 0
                if empty or (self._count != -1 and self._epoch >= self._count):
                    break
                self._source = self._open()
                continue
            except Exception:
                self._in_epoch += 1  # a failing element still makes the epoch non-empty
                raise
            self._in_epoch += 1
            return x
        raise StopIteration

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "count": self._count, "epoch": self._epoch, "in_epoch": self._in_epoch,
                "iteration": list(self.ctx.iteration),
                "input": None if self._source is None else self._source.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, count=self._count)
        if self._source is not None:
            self._source.close()
            self._source = None
        self._epoch = int(state["epoch"])
        self._in_epoch = int(state["in_epoch"])
        if "iteration" in state:  # the saved run's path: its later epochs reshuffle as the saved run's would
            self.ctx = self.ctx.at_iteration(tuple(int(i) for i in state["iteration"]))
        if state["input"] is not None:
            self._source = self._open()
            self._source.set_state(state["input"])

    def _children(self) -> list[Stage]:
        return [self._source] if self._source is not None else []
