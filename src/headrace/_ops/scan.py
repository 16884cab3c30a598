"""``Dataset.scan``: a running state through the elements (tf.data's ``Dataset.scan``).

``scan_func(state, element) -> (new_state, output)`` (a tuple element is passed as one argument, as tf.data
passes it); the output is the element. The state must keep its structure
and dtypes (``TypeError`` naming the element otherwise). Element spec: traced from ``scan_func`` on the
initial state and a spec-shaped element, else read from the first element.

State: the input's position and the running state *by value* (``by_value.Deferred``: a scan state is data
by nature; tf.data checkpoints it too). The running state is charged to the memory budget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._engine import by_value
from .._engine.calls import check_state_kept, guarded_apply
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode, SpecOf, trace
from .._engine.stage import Stage, UnaryIterator
from .._engine.stage_support import fn_name, note_error
from .._spec import spec_of
from .._structure import nbytes, normalize, normalize_tensors


def call_scan(fn: Callable[..., Any], state: Any, x: Any, stage: str) -> tuple[Any, Any]:
    out = guarded_apply(fn, stage, state, x)
    if not isinstance(out, tuple | list) or len(out) != 2:
        raise TypeError(f"{stage}: scan_func must return (new_state, output), got {type(out).__name__}")
    return normalize_tensors(out[0], "scan state"), normalize(out[1], "scan output")


class ScanNode(DatasetNode):
    shard_passes = False

    def __init__(self, input_node: DatasetNode, initial_state: Any, scan_func: Callable[..., Any],
                 name: str | None) -> None:
        super().__init__([input_node])
        if not callable(scan_func):
            raise TypeError(f"scan(scan_func={scan_func!r}): scan_func must be callable (state, element) -> "
                            "(new_state, output)")
        self.initial_state = normalize_tensors(initial_state, "scan(initial_state)")
        self.state_spec = spec_of(self.initial_state)
        self.fn = scan_func
        self.label = f"scan({name or fn_name(scan_func)})"

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()

    def compute_spec(self, spec_of_input: SpecOf) -> Any:
        return trace(lambda x: call_scan(self.fn, self.initial_state, x, self.label)[1], spec_of_input(self.inputs[0]))

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _ScanIterator(ctx, self.inputs[0].make_iterator(ctx), self, ctx.stage_name(self, self.label))


class _ScanIterator(UnaryIterator):
    depends_on_input_order = True  # the state carried along the stream
    kind = "scan"

    def __init__(self, ctx: IteratorContext, source: Stage, node: ScanNode, stage: str) -> None:
        super().__init__(ctx, source)
        self._node = node
        self._stage = stage
        self._account = ctx.account(stage, 1, mandatory=True)
        self._charged = 0
        self._index = 0
        self._hold(node.initial_state)

    def _hold(self, state: Any) -> None:
        n = nbytes(state)  # the new state exists already: charged without waiting, the old one released
        self._account.hold(n)
        if self._charged:
            self._account.release(self._charged)
        self._state, self._charged = state, n

    def __next__(self) -> Any:
        x = self._next_input()
        i = self._index
        self._index = i + 1
        try:
            new_state, out = call_scan(self._node.fn, self._state, x, self._stage)
            check_state_kept(self._node.state_spec, new_state, f"{self._stage}: scan_func")
        except Exception as e:
            note_error(e, self._stage, i)
            raise
        self._hold(new_state)
        return out

    def _counters(self) -> dict[str, Any]:
        return {"index": self._index, "state": by_value.Deferred(self._state)}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        self._index = int(state["index"])
        self._hold(by_value.decode(state["state"], self._stage))

    def _close_self(self) -> None:
        self._account.close()
