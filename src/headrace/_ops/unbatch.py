"""``Dataset.unbatch``: split every element along axis 0 into that many elements.

The batch being split is charged to a mandatory memory account until its last row is handed on; rows
of N-D components are copies, so the batch's memory is freed as soon as it is used up.
State: the input's state before the current batch plus the row offset (no copy of the batch); below a
``deterministic=False`` stage the batch being split is saved by value instead (``headrace._engine.by_value``).
"""

from __future__ import annotations

from typing import Any

from .._engine import by_value
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode, SpecOf
from .._engine.replay import rereads_same
from .._engine.stacking import row, unstack
from .._engine.stage import Stage, UnaryIterator
from .._engine.stage_support import check_state, stop_flag
from .._memory import UNCAPPED
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from .._spec import TensorSpec, unbatch_spec
from .._structure import flatten, nbytes, pack_as


class UnbatchNode(DatasetNode):
    label = "unbatch"
    shard_passes = True

    def __init__(self, input_node: DatasetNode) -> None:
        super().__init__([input_node])
        self.static_spec()  # a scalar component raises ValueError now, as tf.data does

    def compute_spec(self, spec_of: SpecOf) -> Any:
        spec = spec_of(self.inputs[0])
        return None if spec is None else unbatch_spec(spec, "unbatch")

    def cardinality(self) -> int:
        """The input's cardinality times its batch size where every component's leading dimension is
        statically the same (``batch(n, drop_remainder=True)``), else unknown (tf.data's rule)."""
        n = self.inputs[0].cardinality()
        spec = self.inputs[0].static_spec()
        if n < 0 or spec is None:
            return n if n == INFINITE_CARDINALITY else UNKNOWN_CARDINALITY
        dims = {s.shape.dims[0] for s in flatten(spec) if isinstance(s, TensorSpec) and s.shape.dims}
        if len(dims) != 1 or None in dims or 0 in dims:
            return UNKNOWN_CARDINALITY
        return n * next(d for d in dims if d is not None)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        source = self.inputs[0].make_iterator(ctx)
        stage = ctx.stage_name(self, "unbatch")
        return _UnbatchIterator(ctx, source, stage)


class _UnbatchIterator(UnaryIterator):
    """Saves the input's state *before* the batch being split plus the row offset (see the module)."""

    kind = "unbatch"

    def __init__(self, ctx: IteratorContext, source: Stage, stage: str) -> None:
        super().__init__(ctx, source)
        self._stage = stage
        self._account = ctx.account(stage, 1, mandatory=True)
        self._clear()

    def _clear(self) -> None:
        self._batch: Any = None
        self._leaves: list[Any] = []
        self._rows = 0
        self._offset = 0
        self._charged = 0
        self._before = None
        self._before_epoch = 0
        self._saved: by_value.Deferred | None = None

    def _release(self) -> None:
        if self._charged:
            self._account.release(self._charged)
        self._clear()

    def _load(self) -> None:
        before = self._source.get_state()
        self._before_epoch = self._source.replay_epoch()
        acc = self._account
        with acc.reserve(acc.estimate(), stop_flag(self.ctx)) as reservation:  # (cancelled unless settled)
            batch = self._next_input()
            rows, leaves = unstack(batch, self._stage)
            reservation.settle(nbytes(batch))
        self._set_batch(batch, rows, leaves, before)

    def _set_batch(self, batch: Any, rows: int, leaves: list[Any], before: Any) -> None:
        self._batch, self._leaves, self._rows, self._offset, self._charged = batch, leaves, rows, 0, nbytes(batch)
        self._before = before

    def _hold(self, batch: Any, before: Any) -> None:
        """A batch restored by value: charge it (it exists already) and split it from the saved row on."""
        rows, leaves = unstack(batch, self._stage)
        n = nbytes(batch)
        self._account.reserve(n, stop_flag(self.ctx), UNCAPPED).settle(n)
        self._set_batch(batch, rows, leaves, before)

    def __next__(self) -> Any:
        while self._offset >= self._rows:
            self._release()
            self._load()
        i = self._offset
        self._offset = i + 1
        if len(self._leaves) == 1 and not isinstance(self._batch, dict | tuple | list):
            out = row(self._leaves[0], i)
        else:
            out = pack_as(self._batch, [row(leaf, i) for leaf in self._leaves])
        return out

    def _deferred(self) -> by_value.Deferred:
        """The batch being split, to be saved by value (one per batch, encoded at most once)."""
        if self._saved is None or self._saved.value is not self._batch:
            self._saved = by_value.Deferred(self._batch)
        return self._saved

    def get_state(self) -> dict[str, Any]:
        if self._batch is not None and self._offset < self._rows:
            if not rereads_same(self._source, self._before_epoch):  # re-reading could give another batch
                return {"kind": self.kind, "input": self._source.get_state(), "offset": self._offset,
                        "batch": self._deferred()}
            return {"kind": self.kind, "input": self._before, "offset": self._offset}
        return {"kind": self.kind, "input": self._source.get_state(), "offset": 0}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        self._release()
        self._source.set_state(state["input"])
        if int(state["offset"]) > 0:
            if "batch" in state:
                self._hold(by_value.decode(state["batch"], self._stage), self._source.get_state())
            else:
                self._load()
            self._offset = int(state["offset"])

    def _close_self(self) -> None:
        self._account.close()
