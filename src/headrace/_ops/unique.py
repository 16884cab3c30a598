"""``Dataset.unique()``: each distinct element once, in order of first appearance (tf.data's).

As tf.data, elements must be int32 / int64 scalars or strings (``bytes``); anything else raises
``TypeError`` when the pipeline is built (or at the first such element when its spec is not known).

Memory: the set of values seen grows with the number of distinct values; each new one is charged to the
budget (a mandatory account: ``MemoryBudgetError`` when they cannot fit). State: the input's position and
the values seen *by value* (``by_value.Deferred``: they are what decides the rest of the output).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._engine import by_value
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode, SpecOf
from .._engine.stage import Stage, UnaryIterator
from .._engine.stage_support import check_state
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from .._spec import STRING, TensorSpec

_ALLOWED = (np.dtype(np.int32), np.dtype(np.int64), STRING)
_PER_VALUE_BYTES = 64  # a set entry: the value object and its hash slot (a conservative estimate)


def _check_spec(spec: Any) -> None:
    if not isinstance(spec, TensorSpec) or spec.dtype not in _ALLOWED or spec.shape.rank not in (0, None):
        raise TypeError(f"unique(): elements must be int32, int64 or string scalars (as tf.data), got {spec!r}; "
                        "map them to such a key first")


class UniqueNode(DatasetNode):
    label = "unique"
    spec_passes = True

    def __init__(self, input_node: DatasetNode) -> None:
        super().__init__([input_node])
        spec = input_node.static_spec()
        if spec is not None:
            _check_spec(spec)

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        return INFINITE_CARDINALITY if n == INFINITE_CARDINALITY else UNKNOWN_CARDINALITY

    def compute_spec(self, spec_of: SpecOf) -> Any:
        return spec_of(self.inputs[0])

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _UniqueIterator(ctx, self.inputs[0].make_iterator(ctx), ctx.stage_name(self, "unique"))


class _UniqueIterator(UnaryIterator):
    kind = "unique"

    def __init__(self, ctx: IteratorContext, source: Stage, stage: str) -> None:
        super().__init__(ctx, source)
        self._stage = stage
        self._account = ctx.account(stage, None, mandatory=True, hint="unique() keeps every distinct value")
        self._account.keeps = True
        self._seen: set[Any] = set()

    def _add(self, key: Any) -> None:
        self._account.hold(_PER_VALUE_BYTES + (len(key) if isinstance(key, bytes) else 8))
        self._seen.add(key)

    def __next__(self) -> Any:
        while True:
            x = self._next_input()
            if isinstance(x, bytes):
                key: Any = x
            elif isinstance(x, np.int32 | np.int64):
                key = int(x)
            else:
                from .._spec import spec_of

                _check_spec(spec_of(x))
                key = x.item() if isinstance(x, np.generic) else x
            if key not in self._seen:
                self._add(key)
                return x

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "input": self._source.get_state(), "seen": by_value.Deferred(sorted(
            self._seen, key=lambda v: (isinstance(v, bytes), v)))}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        self._source.set_state(state["input"])
        self._account.release(self._account_bytes(), len(self._seen))
        self._seen = set()
        for key in by_value.decode(state["seen"], self._stage):
            self._add(key)

    def _account_bytes(self) -> int:
        return sum(_PER_VALUE_BYTES + (len(k) if isinstance(k, bytes) else 8) for k in self._seen)

    def _close_self(self) -> None:
        self._account.close()
