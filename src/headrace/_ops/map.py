"""``Dataset.map``: apply a function to every element, sequentially or in a thread pool.

Like tf.data, a tuple element is unpacked into positional arguments (``fn(*x)``); any other element
(dict, namedtuple, array) is passed as one argument. The function's result is normalized (Python ints ->
int64, floats -> float32, str -> bytes; lists stay structures).

``num_parallel_calls=None`` runs in the consumer's thread; an int or ``AUTOTUNE`` runs that many workers
(``headrace._ops.parallel``). ``deterministic=False`` yields results as they finish.

Where the function runs (``executor=`` per stage, else ``Options(map_executor=...)``, else ``"auto"`` for
``AUTOTUNE`` and ``"thread"`` for an explicit number; ``headrace._ops.executor``): on the workers' threads
(functions that release the GIL: numpy, OpenCV, image decoders), in worker processes (functions that
hold it), or measured first (``"auto"``). ``executor="process"`` (or ``"auto"``) with
``num_parallel_calls=None`` runs one worker, in order. The options apply to parallel maps only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._options import AUTOTUNE
from .._structure import SCALAR_TYPES, normalize
from .autotune import MAP_WINDOW_PER_WORKER, parallelism, validate_parallel_calls
from .base import DatasetIterator, IteratorContext, UnaryIterator, fn_name, note_error
from .executor import AutoExecutor, ProcessExecutor, validate_executor
from .node import DatasetNode
from .parallel import PoolIterator


def call_with_element(fn: Callable[..., Any], x: Any) -> Any:
    """tf.data's calling convention: unpack exact tuples into positional arguments."""
    return fn(*x) if type(x) is tuple else fn(x)


def guarded_call(fn: Callable[..., Any], x: Any, stage: str) -> Any:
    try:
        return call_with_element(fn, x)
    except StopIteration as e:
        raise RuntimeError(f"{stage}: the function raised StopIteration; return a value or raise another "
                           "exception (StopIteration would silently end the dataset)") from e


class MapNode(DatasetNode):
    shard_passes = True
    def __init__(self, input_node: DatasetNode, fn: Callable[..., Any], num_parallel_calls: int | None,
                 deterministic: bool | None, name: str | None, executor: str | None = None) -> None:
        super().__init__([input_node])
        if not callable(fn):
            raise TypeError(f"map(map_func={fn!r}): map_func must be callable")
        validate_parallel_calls(num_parallel_calls, "map")
        validate_executor(executor, "map(executor)")
        self.fn = fn
        self.num_parallel_calls = num_parallel_calls
        self.deterministic = deterministic
        self.executor = executor
        self.label = f"map({name or fn_name(fn)})"

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()

    def make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        source = self.inputs[0].make_iterator(ctx)
        stage = ctx.stage_name(self, self.label)
        kind = self.executor_kind(ctx)
        if self.num_parallel_calls is None and kind == "thread":
            return _MapIterator(ctx, source, self.fn, stage)
        workers = parallelism(self.num_parallel_calls, ctx)
        fn = self.fn

        def thread_fn(x: Any) -> Any:
            return normalize(guarded_call(fn, x, stage), stage)

        executor: Any = None
        if kind == "process":
            executor = ctx.resource(stage, lambda: ProcessExecutor(fn, stage, ctx, workers))
        elif kind == "auto":
            executor = ctx.resource(stage, lambda: AutoExecutor(fn, thread_fn, stage, ctx, workers, ctx.cpu_budget))
        return PoolIterator(ctx, source, thread_fn, stage, workers, ctx.deterministic(self.deterministic), kind="map",
                            window=MAP_WINDOW_PER_WORKER * workers, executor=executor,
                            autotune=self.num_parallel_calls == AUTOTUNE)

    def executor_kind(self, ctx: IteratorContext) -> str:
        """``"thread"``, ``"process"`` or ``"auto"`` for this stage (see the module docstring)."""
        if self.executor is not None:
            return self.executor
        if self.num_parallel_calls is None:
            return "thread"
        if ctx.options.map_executor is not None:
            return ctx.options.map_executor
        return "auto" if self.num_parallel_calls == AUTOTUNE else "thread"


class _MapIterator(UnaryIterator):
    kind = "map"

    def __init__(self, ctx: IteratorContext, source: DatasetIterator, fn: Callable[..., Any], stage: str) -> None:
        super().__init__(ctx, source)
        self._fn = fn
        self._stage = stage
        self._index = 0

    def __next__(self) -> Any:
        x = self._next_input()
        i = self._index
        self._index = i + 1
        try:
            y = self._fn(*x) if type(x) is tuple else self._fn(x)
        except StopIteration as e:
            raise note_error(RuntimeError(
                f"{self._stage}: the function raised StopIteration; return a value or raise another "
                "exception (StopIteration would silently end the dataset)"), self._stage, i) from e
        except Exception as e:
            note_error(e, self._stage, i)
            raise
        if type(y) in SCALAR_TYPES:
            return y
        return normalize(y, self._stage)

    def _counters(self) -> dict[str, Any]:
        return {"index": self._index}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        self._index = int(state["index"])
