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

from collections import deque
from collections.abc import Callable
from typing import Any

from .._args import parallel_calls_arg
from .._engine.calls import (
    call_with_element,
    element_caller,
    empty_element_error,
    no_component,
    refuse_empty,
    run_caller,
    traced_guard,
)
from .._engine.context import IteratorContext
from .._engine.pool.auto_executor import AutoExecutor
from .._engine.pool.executor import Executor, ProcessExecutor, ThreadExecutor, validate_executor
from .._engine.pool.parallel import PoolIterator
from .._engine.recipe import DatasetNode, SpecOf, trace
from .._engine.stage import Stage, UnaryIterator
from .._engine.stage_support import fn_name, note_error
from .._engine.tuning.starting_values import MAP_WINDOW_PER_WORKER, parallelism
from .._engine.tuning.static_optimizations import FusedMapIterator, optimizing
from .._errors import StateError
from .._options import AUTOTUNE
from .._spec import from_user
from .._structure import normalize
from .in_memory import convert_to_spec


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

    @property
    def inline(self) -> bool:
        """Whether this map runs in the thread that pulls from it (``num_parallel_calls=None`` on threads): what
        the static optimizations fuse (``headrace._engine.tuning.static_optimizations``)."""
        return self.num_parallel_calls is None and self.executor in (None, "thread")

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
        apply = thread_fn if finish is None else element_caller(self.fn, stage, normalize_result=True, finish=finish)
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
    """``map`` in the consumer's thread: ``calls.element_caller``'s callable (normalized, then ``finish``: the
    ``output_signature`` conversion or the traced-spec check) on each element, its error noted with the element's
    index. Below a ``batch`` the recipe holds ``map_and_batch_fusion``'s node instead
    (``static_optimizations.MapAndBatch``), whose loop counts this stage's ``index`` and keeps in its ``ahead`` the
    results it computed ahead over a run (docs/design/rows.md)."""

    kind = "map"

    def __init__(self, ctx: IteratorContext, source: Stage, fn: Callable[..., Any], stage: str,
                 finish: Callable[[Any], Any] | None = None) -> None:
        super().__init__(ctx, source)
        self._fn = fn
        self._stage = stage
        self.index = 0  # elements the function was called on (the note's "element i", the state's "index")
        # results (or a calls.Raised) map_and_batch_fusion's loop computed ahead over a run, not yet handed out
        self.ahead: deque[Any] = deque()
        self._finish = finish
        self._call = element_caller(fn, stage, normalize_result=True, finish=finish)

    def __next__(self) -> Any:
        if self.ahead:  # (handed out as the fused loop hands them out: normalized, counted, an error noted)
            out: list[Any] = []
            run_caller(self._fn, self._stage, self._finish)(self, self._next_input, _no_run, out, 1, 1 << 62)
            return out[0]
        x = self._next_input()
        i = self.index
        self.index = i + 1
        try:
            return self._call(x)
        except Exception as e:
            note_error(e, self._stage, i)
            raise

    def step(self) -> tuple[Callable[..., Any], str, Callable[[Any], Any] | None]:
        """This map as a step of a fused chain or loop (``static_optimizations``)."""
        return self._fn, self._stage, self._finish

    def get_state(self) -> dict[str, Any]:
        # UnaryIterator's layout written out (a sequential batch takes its input's state once per batch)
        state = {"kind": "map", "index": self.index, "input": self._source.get_state()}
        if self.ahead:  # (the input is past them: a batch gathering them keeps its own start instead)
            state["ahead"] = len(self.ahead)
        return state

    def _counters(self) -> dict[str, Any]:
        return {"index": self.index}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        if state.get("ahead"):
            raise StateError(f"{self._stage}: this state was taken while {state['ahead']} results computed ahead "
                             "were held (inside a batch, whose own state restores them); restore the batch's state")
        self.ahead.clear()
        self.index = int(state["index"])


def _no_run() -> None:
    """No ready elements (``runs.ReadyElements``): what ``_MapIterator.__next__`` hands the fused loop."""
    return None
