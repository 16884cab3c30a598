"""``Dataset.map``: apply a function to every element, sequentially or in a thread pool.

Like tf.data, a tuple element is unpacked into positional arguments (``fn(*x)``); any other element
(dict, namedtuple, array) is passed as one argument. The function's result is normalized as tf.data
normalizes it (Python ints -> int64, floats -> float32, str -> bytes; a list returned at the top level
becomes a tuple, lists inside it are tensors; ``None`` components stay ``None``).

Element spec: ``output_signature=`` (a structure of ``TensorSpec``) declares it, and every result is
converted to it (as ``from_generator`` converts) and checked; without it, the spec is traced from the
function on spec-shaped examples of the input's spec (``node.trace``), else read from the first element.

``num_parallel_calls=None`` runs in the consumer's thread; an int or ``AUTOTUNE`` runs that many workers
(``headrace._engine.pool.parallel``). ``deterministic=False`` yields results as they finish.

Where the function runs (``executor=`` per stage, else ``Options(map_executor=...)``, else ``"auto"`` for
``AUTOTUNE`` and ``"thread"`` for an explicit number; ``headrace._engine.pool.executor``): on the workers' threads
(functions that release the GIL: numpy, OpenCV, image decoders), in worker processes (functions that
hold it), or measured first (``"auto"``). ``executor="process"`` (or ``"auto"``) with
``num_parallel_calls=None`` runs one worker, in order. The options apply to parallel maps only. Results
from worker processes are converted to ``output_signature`` / checked against a traced spec in the parent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._args import parallel_calls_arg
from .._engine.calls import (
    call_with_element,
    element_caller,
    empty_element_error,
    no_component,
    refuse_empty,
    stop_iteration_error,
    traced_guard,
)
from .._engine.context import IteratorContext
from .._engine.pool.auto_executor import AutoExecutor
from .._engine.pool.executor import Executor, ProcessExecutor, ThreadExecutor, validate_executor
from .._engine.pool.parallel import PoolIterator
from .._engine.recipe import DatasetNode, SpecOf, trace
from .._engine.stage import FillTally, Stage, UnaryIterator
from .._engine.stage_support import fn_name, note_error
from .._engine.tuning.starting_values import MAP_WINDOW_PER_WORKER, parallelism
from .._engine.tuning.static_optimizations import FusedMapIterator, optimizing
from .._options import AUTOTUNE
from .._spec import from_user
from .._structure import SCALAR_TYPES, normalize, normalize_sized
from .in_memory import convert_to_spec

_END = object()
_NOTHING_READY: Any = iter(())


class MapNode(DatasetNode):
    shard_passes = True

    def __init__(self, input_node: DatasetNode, fn: Callable[..., Any], num_parallel_calls: int | None,
                 deterministic: bool | None, name: str | None, output_signature: Any = None,
                 executor: str | None = None) -> None:
        super().__init__([input_node])
        if not callable(fn):
            raise TypeError(f"map(map_func={fn!r}): map_func must be callable")
        validate_executor(executor, "map(executor)")
        self.fn = fn
        self.num_parallel_calls = parallel_calls_arg(num_parallel_calls, "map")
        self.deterministic = deterministic
        self.signature = None if output_signature is None else from_user(output_signature,
                                                                        "map(output_signature)")
        self.executor = executor
        self.label = f"map({name or fn_name(fn)})"

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()

    def compute_spec(self, spec_of: SpecOf) -> Any:
        if self.signature is not None:
            return self.signature
        spec = trace(lambda x: normalize(call_with_element(self.fn, x), self.label), spec_of(self.inputs[0]))
        if spec is not None and no_component(spec):
            raise empty_element_error(self.label, f"an element of spec {spec!r}")
        return spec

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        source = self.inputs[0].make_iterator(ctx)
        stage = ctx.stage_name(self, self.label)
        sig = self.signature
        guard = None if sig is not None else traced_guard(self.spec_consulted(), stage)
        kind = self.executor_kind(ctx)
        thread_fn = element_caller(self.fn, stage, normalize_result=True)
        finish: Callable[[Any], Any] | None = guard
        if sig is not None:
            def finish(y: Any) -> Any:
                return convert_to_spec(sig, y, f"{stage}: output_signature")

        if self.num_parallel_calls is None and kind == "thread":
            if isinstance(source, _MapIterator | FusedMapIterator) and optimizing(ctx):
                return FusedMapIterator.chain(ctx, source, (self.fn, stage, finish))
            return _MapIterator(ctx, source, self.fn, stage, finish)
        workers = parallelism(self.num_parallel_calls, ctx)
        if kind == "process":  # results normalized by the executor: refuse () here ("auto" first calls on threads)
            after = finish
            finish = (lambda y: refuse_empty(y, stage)) if after is None else (lambda y: after(refuse_empty(y, stage)))
        apply = thread_fn
        if finish is not None:
            def apply(x: Any) -> Any:
                return finish(thread_fn(x))
        executor = self._executor(kind, ctx, stage, workers, thread_fn, apply, finish)
        return PoolIterator(ctx, source, apply, stage, workers, ctx.deterministic(self.deterministic), kind="map",
                            window=MAP_WINDOW_PER_WORKER * workers, executor=executor,
                            autotune=self.num_parallel_calls == AUTOTUNE)

    def _executor(self, kind: str, ctx: IteratorContext, stage: str, workers: int, thread_fn: Callable[[Any], Any],
                  apply: Callable[[Any], Any], finish: Callable[[Any], Any] | None) -> Executor:
        """The stage's executor: threads calling ``apply`` (``thread_fn``, then ``finish``), or the iteration's
        process / ``"auto"`` executor of this stage (a resource: every ``repeat`` epoch's build reuses it),
        whose results go through this build's ``finish`` in the parent."""
        if kind == "thread":
            return ThreadExecutor(apply)
        fn = self.fn
        if kind == "process":
            ex: ProcessExecutor | AutoExecutor = ctx.tree.resource(
                stage, lambda: ProcessExecutor(fn, stage, ctx, workers))
        else:
            ex = ctx.tree.resource(stage, lambda: AutoExecutor(fn, thread_fn, stage, ctx, workers, ctx.cpu_budget))
        ex.finish = finish
        return ex

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
    """``map`` in the consumer's thread: the calling convention of ``calls.element_caller`` written out in
    ``__next__`` (a call less per element than calling it: ``bench/overhead.py``'s path; the StopIteration
    and no-component tests of ``tests/ops/test_user_functions.py`` cover both), then ``finish`` (the
    ``output_signature`` conversion or the traced-spec check)."""

    kind = "map"

    def __init__(self, ctx: IteratorContext, source: Stage, fn: Callable[..., Any], stage: str,
                 finish: Callable[[Any], Any] | None = None) -> None:
        super().__init__(ctx, source)
        self._fn = fn
        self._stage = stage
        self._index = 0
        self._finish = finish

    def __next__(self) -> Any:
        x = self._next_input()
        i = self._index
        self._index = i + 1
        try:
            y = self._fn(*x) if type(x) is tuple else self._fn(x)
            if type(y) not in SCALAR_TYPES:
                y = normalize(refuse_empty(y, self._stage), self._stage)
            return y if self._finish is None else self._finish(y)
        except StopIteration as e:
            raise note_error(stop_iteration_error(self._stage), self._stage, i) from e
        except Exception as e:
            note_error(e, self._stage, i)
            raise

    def fill(self, items: list[Any], k: int, per: int) -> tuple[int, int]:
        """``Stage.fill`` with ``__next__``'s calling convention fused into its loop (tf.data's map-and-batch
        fusion: a sequential ``batch`` right after this ``map`` makes one call per batch, not one per element;
        ``bench/overhead.py``). Same results, errors, notes and index as ``__next__``."""
        nxt, fn, finish, stage, append = self._next_input, self._fn, self._finish, self._stage, items.append
        ready = self._source.elements_ready
        run = ready() or _NOTHING_READY  # the input's ready elements, pulled without a Python call each
        i = self._index
        start = len(items)
        tally = FillTally(per, scalars=finish is None)  # results appended as they are when there is no finish
        fast = None
        try:
            for _ in range(k):
                x = next(run, _END)
                if x is _END:  # none ready: the input's own __next__ (which may make more ready)
                    x = nxt()
                    run = ready() or _NOTHING_READY
                i += 1
                try:
                    y = fn(*x) if type(x) is tuple else fn(x)
                    if type(y) is fast:
                        append(y)
                        continue
                    if (type(y) is tuple or type(y) is dict) and finish is None:  # normalized and sized at once
                        y, n = normalize_sized(refuse_empty(y, stage), stage)
                        append(y)
                        if tally.add_sized(n):
                            break
                        continue
                    if type(y) not in SCALAR_TYPES:
                        y = normalize(refuse_empty(y, stage), stage)
                    if finish is not None:
                        y = finish(y)
                except StopIteration as e:
                    raise note_error(stop_iteration_error(stage), stage, i - 1) from e
                except Exception as e:
                    note_error(e, stage, i - 1)
                    raise
                append(y)
                if tally.add(y):
                    break
                fast = tally.fast
        finally:
            self._index = i
        return tally.result(len(items) - start)

    def step(self) -> tuple[Callable[..., Any], str, Callable[[Any], Any] | None]:
        """This map as a step of a fused chain (``map_fusion.FusedMapIterator``)."""
        return self._fn, self._stage, self._finish

    def get_state(self) -> dict[str, Any]:
        # UnaryIterator's layout written out (a sequential batch takes its input's state once per batch)
        return {"kind": "map", "index": self._index, "input": self._source.get_state()}

    def _counters(self) -> dict[str, Any]:
        return {"index": self._index}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        self._index = int(state["index"])
