"""``Dataset.group_by_window(key_func, reduce_func, window_size, window_size_func)`` (tf.data's).

Each element goes to the group of ``key_func(element)`` (an integer scalar). When a group holds
``window_size`` elements (or ``window_size_func(key)``, asked when the group opens), ``reduce_func(key,
window)`` is called with the window as a ``headrace.Dataset`` and must return a Dataset, whose elements are
yielded (as ``flat_map``). At the end of the input the remaining groups are flushed the same way in
ascending key order, as tf.data does. Element spec: that of the dataset ``reduce_func`` returns for a
window of the input's spec (found without reading data), else read from the first element.

Memory: the grouped elements are charged to the budget (reserved before each pull) and released when their
window is handed to ``reduce_func``. State: the input's position, the open groups and the window being
reduced *by value* (``by_value.Deferred``; encoded only when a state is kept), and the position inside the
reduced dataset; restoring calls ``reduce_func`` again on the saved window.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._args import as_int
from .._engine import by_value
from .._engine.calls import guarded_apply, guarded_call
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode, ElementsNode, SpecOf, node_of, wrap
from .._engine.stage import Stage, UnaryIterator
from .._engine.stage_support import check_state, fn_name, note_error, stop_flag
from .._options import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from .._structure import nbytes


def _key(value: Any, stage: str) -> int:
    if isinstance(value, np.ndarray) and value.ndim != 0:
        raise TypeError(f"{stage}: key_func must return an integer scalar, got an array of shape {value.shape}")
    return as_int(value, f"{stage}: key_func result")


class GroupByWindowNode(DatasetNode):
    def __init__(self, input_node: DatasetNode, key_func: Callable[..., Any], reduce_func: Callable[..., Any],
                 window_size: Any, window_size_func: Callable[[Any], Any] | None, name: str | None = None) -> None:
        super().__init__([input_node])
        if (window_size is None) == (window_size_func is None):
            raise ValueError("group_by_window: give either window_size or window_size_func (exactly one)")
        for what, fn in (("key_func", key_func), ("reduce_func", reduce_func)):
            if not callable(fn):
                raise TypeError(f"group_by_window({what}={fn!r}): {what} must be callable")
        if window_size is not None:
            n = as_int(window_size, "group_by_window(window_size)", minimum=1, fix="a window holds >= 1 element")
            window_size_func = lambda key, n=n: n  # noqa: E731
        elif not callable(window_size_func):
            raise TypeError(f"group_by_window(window_size_func={window_size_func!r}): must be callable")
        self.key_func = key_func
        self.reduce_func = reduce_func
        self.window_size_func = window_size_func
        self.label = f"group_by_window({name or fn_name(key_func)})"

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        return INFINITE_CARDINALITY if n == INFINITE_CARDINALITY else UNKNOWN_CARDINALITY

    def reduce(self, key: int, elements: list[Any], spec: Any, stage: str) -> DatasetNode:
        out = guarded_apply(self.reduce_func, stage, np.int64(key), wrap(ElementsNode(elements, spec)))
        node = node_of(out)
        if node is None:
            raise TypeError(f"{stage}: reduce_func must return a Dataset, got {type(out).__name__}")
        return node

    output_spec: Callable[[Any], Any] | None = None
    """Set by constructions that know their output spec from the input's (``bucket_by_sequence_length``)."""

    def compute_spec(self, spec_of: SpecOf) -> Any:
        spec = spec_of(self.inputs[0])
        if spec is None:
            return None
        if self.output_spec is not None:
            return self.output_spec(spec)
        try:
            return self.reduce(0, [], spec, self.label).static_spec()
        except Exception:
            return None

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _GroupIterator(ctx, self.inputs[0].make_iterator(ctx), self, ctx.stage_name(self, self.label))


class _GroupIterator(UnaryIterator):
    depends_on_input_order = True  # consecutive elements of a key
    kind = "group_by_window"

    def __init__(self, ctx: IteratorContext, source: Stage, node: GroupByWindowNode, stage: str) -> None:
        super().__init__(ctx, source)
        self._node = node
        self._stage = stage
        self._account = ctx.account(stage, None, mandatory=True)
        self._groups: dict[int, list[tuple[Any, int]]] = {}
        self._sizes: dict[int, int] = {}
        self._ended = False
        self._index = 0
        self._current: tuple[int, list[Any]] | None = None  # the window being reduced
        self._sub: Stage | None = None
        self._spec: Any = None

    def _window_spec(self, first: Any) -> Any:
        if self._spec is None:
            from .._spec import spec_of

            static = self._node.inputs[0].static_spec()
            self._spec = static if static is not None else spec_of(first)
        return self._spec

    def _open(self, key: int, elements: list[Any]) -> None:
        self._current = (key, elements)
        node = self._node.reduce(key, elements, self._window_spec(elements[0]), self._stage)
        self._sub = node.make_iterator(self.ctx)

    def _close_sub(self) -> None:
        if self._sub is not None:
            self._sub.close()
        self._sub, self._current = None, None

    def _take_group(self, key: int) -> list[Any]:
        group = self._groups.pop(key)
        self._sizes.pop(key, None)
        self._account.release(sum(n for _, n in group), len(group))
        return [x for x, _ in group]

    def _pull(self) -> tuple[int, list[Any]] | None:
        """Pull input elements until a window is full (its key and elements), or None at the end."""
        acc = self._account
        while True:
            with acc.reserve(acc.estimate(), stop_flag(self.ctx)) as reservation:  # (cancelled unless settled)
                try:
                    x = self._next_input()
                except StopIteration:
                    self._ended = True
                    return None
                i = self._index
                self._index = i + 1
                try:
                    key = _key(guarded_call(self._node.key_func, x, self._stage), self._stage)
                    if key not in self._groups:
                        size = as_int(guarded_apply(self._node.window_size_func, self._stage, np.int64(key)),
                                      f"{self._stage}: window_size_func",
                                      minimum=1)
                        self._groups[key], self._sizes[key] = [], size
                except Exception as e:
                    note_error(e, self._stage, i)
                    raise
                n = nbytes(x)
                reservation.settle(n)
            self._groups[key].append((x, n))
            if len(self._groups[key]) >= self._sizes[key]:
                return key, self._take_group(key)

    def __next__(self) -> Any:
        while True:
            if self._sub is not None:
                try:
                    return self._sub.__next__()
                except StopIteration:
                    self._close_sub()
            full = None if self._ended else self._pull()
            if full is None:
                if not self._groups:
                    raise StopIteration
                key = min(self._groups)
                full = (key, self._take_group(key))
            self._open(*full)

    def get_state(self) -> dict[str, Any]:
        groups = {str(k): [x for x, _ in g] for k, g in self._groups.items()}
        state: dict[str, Any] = {"kind": self.kind, "input": self._source.get_state(), "ended": self._ended,
                                 "index": self._index, "sizes": {str(k): v for k, v in self._sizes.items()},
                                 "groups": by_value.Deferred(groups)}
        if self._current is not None and self._sub is not None:
            state["window"] = by_value.Deferred(self._current)
            state["window_state"] = self._sub.get_state()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        self._close_sub()
        for key in list(self._groups):
            self._take_group(key)
        self._source.set_state(state["input"])
        self._ended, self._index = bool(state["ended"]), int(state["index"])
        for k, elements in by_value.decode(state["groups"], self._stage).items():
            group = [(x, nbytes(x)) for x in elements]
            for _, n in group:
                self._account.hold(n)
            self._groups[int(k)] = group
            self._sizes[int(k)] = int(state["sizes"][k])
        if "window" in state:
            key, elements = by_value.decode(state["window"], self._stage)
            self._open(int(key), elements)
            assert self._sub is not None
            self._sub.set_state(state["window_state"])

    def _children(self) -> list[Stage]:
        return [self._source, *([self._sub] if self._sub is not None else [])]

    def _close_self(self) -> None:
        self._account.close()
