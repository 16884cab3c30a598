"""``Dataset.window(size, shift, stride, drop_remainder)``: a dataset of windows, each a Dataset.

Window ``k`` holds the input elements at positions ``k * shift + j * stride`` for ``j < size`` (tf.data's
rule; ``shift`` defaults to ``size``, ``stride`` to 1). At the end, windows that start inside the input but
are incomplete are yielded (shorter) unless ``drop_remainder``. Each window is a ``headrace.Dataset`` over
its elements (element spec ``DatasetSpec(input spec)``), or, for structured elements, the same structure of
Datasets, one per component (tf.data's); ``flat_map(lambda w: w.batch(size))`` turns windows into batches.

Cardinality (tf.data's): ``ceil(n / shift)``, or with ``drop_remainder`` the number of complete windows.

Memory: the elements of the window being gathered (at most ``(size - 1) * stride + 1``) are charged to the
budget (reserved before each pull, settled to their size) and released as the window moves on; a window
handed out refers to its elements, which belong to the consumer from then on.

State: the input's position after the buffered elements, and those elements *by value* (at most one window
span; ``by_value.Deferred``, encoded only when the state is kept), so restoring never re-reads the input.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from .._args import count_arg
from .._engine import by_value
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode, ElementsNode, SpecOf, wrap
from .._engine.stage import Stage, UnaryIterator
from .._engine.stage_support import check_state, stop_flag
from .._spec import DatasetSpec, spec_of
from .._structure import flatten, nbytes, pack_as


class WindowNode(DatasetNode):
    label = "window"

    def __init__(self, input_node: DatasetNode, size: Any, shift: Any, stride: Any, drop_remainder: bool) -> None:
        super().__init__([input_node])
        self.size = count_arg(size, "window(size)", minimum=1, fix="a window holds at least one element")
        self.shift = self.size if shift is None else count_arg(shift, "window(shift)", minimum=1,
                                                                fix="windows move forward by at least 1")
        self.stride = count_arg(stride, "window(stride)", minimum=1, fix="use stride=1 for consecutive elements")
        self.drop_remainder = bool(drop_remainder)
        self.span = (self.size - 1) * self.stride + 1

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if n < 0:
            return n
        if self.drop_remainder:
            return 0 if n < self.span else (n - self.span) // self.shift + 1
        return -(-n // self.shift)

    def compute_spec(self, spec_of_input: SpecOf) -> Any:
        spec = spec_of_input(self.inputs[0])
        if spec is None:
            return None
        if isinstance(spec, dict | tuple | list):
            return pack_as(spec, [DatasetSpec(s) for s in flatten(spec)])
        return DatasetSpec(spec)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _WindowIterator(ctx, self.inputs[0].make_iterator(ctx), self, ctx.stage_name(self, "window"))


class _WindowIterator(UnaryIterator):
    depends_on_input_order = True  # consecutive elements
    kind = "window"

    def __init__(self, ctx: IteratorContext, source: Stage, node: WindowNode, stage: str) -> None:
        super().__init__(ctx, source)
        self._node = node
        self._stage = stage
        self._account = ctx.account(stage, node.span, mandatory=True)
        self._buffer: deque[tuple[Any, int]] = deque()  # (element, bytes charged)
        self._skip = 0  # input elements to drop before the next window (shift > span)
        self._ended = False
        self._spec: Any = None

    def _settings(self) -> dict[str, Any]:
        n = self._node
        return {"size": n.size, "shift": n.shift, "stride": n.stride, "drop_remainder": n.drop_remainder}

    def _pull(self) -> bool:
        """One more input element into the buffer (charged); False at the end of the input."""
        acc = self._account
        with acc.reserve(acc.estimate(), stop_flag(self.ctx)) as reservation:  # (cancelled unless settled)
            try:
                x = self._next_input()
            except StopIteration:
                self._ended = True
                return False
            n = nbytes(x)
            reservation.settle(n)
        self._buffer.append((x, n))
        return True

    def _drop_front(self, k: int) -> None:
        for _ in range(min(k, len(self._buffer))):
            _, n = self._buffer.popleft()
            self._account.release(n)

    def __next__(self) -> Any:
        node = self._node
        while self._skip and not self._ended:
            if self._pull():
                self._skip -= 1
                self._drop_front(1)
        while len(self._buffer) < node.span and not self._ended:
            self._pull()
        if not self._buffer or (node.drop_remainder and len(self._buffer) < node.span):
            self._drop_front(len(self._buffer))
            raise StopIteration
        elements = [x for x, _ in list(self._buffer)[:node.span:node.stride]]
        window = self._window(elements)
        if node.shift <= len(self._buffer):
            self._drop_front(node.shift)
        else:
            self._skip = node.shift - len(self._buffer)
            self._drop_front(len(self._buffer))
        return window

    def _window(self, elements: list[Any]) -> Any:
        """One Dataset per component (tf.data's windows mirror the element structure)."""
        if self._spec is None:
            static = self._node.inputs[0].static_spec()
            self._spec = static if static is not None else spec_of(elements[0])
        spec = self._spec
        if not isinstance(spec, dict | tuple | list):
            return wrap(ElementsNode(elements, spec))
        columns = list(zip(*(flatten(x) for x in elements)))
        return pack_as(spec, [wrap(ElementsNode(list(col), s)) for col, s in zip(columns, flatten(spec))])

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, **self._settings(), "input": self._source.get_state(), "skip": self._skip,
                "ended": self._ended, "buffer": by_value.Deferred([x for x, _ in self._buffer])}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, **self._settings())
        self._drop_front(len(self._buffer))
        self._source.set_state(state["input"])
        self._skip, self._ended = int(state["skip"]), bool(state["ended"])
        for x in by_value.decode(state["buffer"], self._stage):
            n = nbytes(x)
            self._account.hold(n)
            self._buffer.append((x, n))

    def _close_self(self) -> None:
        self._account.close()
