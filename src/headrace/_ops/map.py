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
from itertools import chain, count, islice, starmap
from operator import itemgetter
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
from .._engine.pool.executor import AutoExecutor, Executor, ProcessExecutor, ThreadExecutor, validate_executor
from .._engine.pool.parallel import PoolIterator
from .._engine.recipe import DatasetNode, SpecOf, trace
from .._engine.stage import FillTally, Stage, UnaryIterator
from .._engine.stage_support import fn_name, note_error
from .._engine.tuning.starting_values import MAP_WINDOW_PER_WORKER, parallelism
from .._engine.tuning.static_optimizations import FusedMapIterator, optimizing
from .._errors import StateError
from .._options import AUTOTUNE
from .._spec import from_user
from .._structure import SCALAR_NBYTES, SCALAR_TYPES, normalize, normalize_rows, normalize_sized, scalar_columns
from .in_memory import convert_to_spec

_END = object()
_AHEAD = object()  # (in place of an input element: the result was computed ahead)
_NOTHING_READY: Any = iter(())


class _Raised:
    """The exception a function raised on an element whose result was computed ahead (``_MapIterator._fill_run``):
    raised when that element's turn comes."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _same_columns(a: Any, b: Any) -> bool:
    """Whether two column runs (``fill_columns``) hold the same components with the same dtypes."""
    if type(a) is dict:
        return type(b) is dict and a.keys() == b.keys() and all(a[k].dtype == b[k].dtype for k in a)
    return type(b) is list and len(a) == len(b) and all(x.dtype == y.dtype for x, y in zip(a, b))


def _scalar_row(y: Any) -> bool:
    """Whether ``y`` (normalized) is a flat ``dict`` / ``tuple`` of fixed-size numpy scalars."""
    return (type(y) is dict or type(y) is tuple) and all(
        type(v) in SCALAR_NBYTES for v in (y.values() if type(y) is dict else y))


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
    ``output_signature`` conversion or the traced-spec check). Inside a sequential ``batch`` it runs over its input's
    runs (``fill``, ``fill_columns``; see docs/design/rows.md)."""

    kind = "map"

    def __init__(self, ctx: IteratorContext, source: Stage, fn: Callable[..., Any], stage: str,
                 finish: Callable[[Any], Any] | None = None) -> None:
        super().__init__(ctx, source)
        self._fn = fn
        self._stage = stage
        self._index = 0
        self._finish = finish
        self._ahead: deque[Any] = deque()  # results computed ahead of an error (``fill``), not yet handed out
        self._by_runs = True  # while results are flat rows of scalars: calls by map() over the input's runs

    def __next__(self) -> Any:
        if self._ahead:
            out: list[Any] = []
            self._fill_rows(out, 1, 1 << 62)
            return out[0]
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
        ``bench/overhead.py``). Same results, errors, notes and index as ``__next__``.

        Rows of a reader's run (``elements_ready``) whose results are flat rows of scalars go faster: the function
        is called on the rest of the run by ``map`` (no Python loop around it) and the results are normalized a
        column at a time (``normalize_rows``); results that are not such rows are normalized one by one after
        it, those computed past one that raised kept for the next call (``_ahead``)."""
        start = len(items)
        held = largest = 0
        while self._by_runs and self._finish is None and not self._ahead and largest <= per and len(items) - start < k:
            got = self._fill_run(items, k - (len(items) - start), per)
            held, largest = held + got[0], max(largest, got[1])
        left = k - (len(items) - start)
        if left <= 0 or largest > per:
            return held, largest
        more, big = self._fill_rows(items, left, per)
        return held + more, max(largest, big)

    def _fill_run(self, items: list[Any], k: int, per: int) -> tuple[int, int]:
        """Up to ``k`` elements from the input's run (``_run_results``) appended as rows."""
        held, largest, ys, error = self._run_results(items, k, per)
        done = normalize_rows(ys) if ys else ([], 0, 0)
        if done is None:  # normalized one by one (by _fill_rows: the next call), the error after them
            self._ahead.extend(ys)
            if error is not None:
                self._ahead.append(_Raised(error))
            return held, largest
        items.extend(done[0])
        self._index += len(ys)
        if error is not None:
            self._index += 1
            raise note_error(error, self._stage, self._index - 1)
        return held + done[1], max(largest, done[2])

    def fill_columns(self, runs: list[Any], k: int, per: int) -> tuple[int, int, int]:
        """``Stage.fill_columns`` for results that are flat rows of scalars (``_run_results``): runs of their
        components as arrays (a dict of them for dict results), the function called by ``map`` over the input's
        run. ``(0, 0, 0)`` where there are none (no run ready, another kind of result: those are computed ahead,
        ``_ahead``, and the caller goes on with ``fill``)."""
        if self._finish is not None or self._ahead or not self._by_runs:
            return 0, 0, 0
        taken = held = largest = 0
        while taken < k and largest <= per:
            rows: list[Any] = []
            got = self._run_results(rows, k - taken, per)
            ys, error = rows + got[2], got[3]
            columns = scalar_columns(ys) if ys else None
            run = None if columns is None else columns[1] if columns[0] is None else dict(zip(columns[0], columns[1]))
            if run is None or (runs and not _same_columns(runs[0], run)):  # (one by one: the batch stacks them and
                self._index -= len(rows)  # names a mismatch; the first row, counted by _fill_rows, goes there too)
                self._ahead.extend(ys)
                if error is not None:
                    self._ahead.append(_Raised(error))
                break
            arrays = columns[1]  # type: ignore[index]
            runs.append(run)
            self._index += len(ys) - len(rows)  # (the first row's counted by _fill_rows)
            size = sum(a.itemsize for a in arrays)
            taken, held, largest = taken + len(ys), held + size * len(ys), max(largest, size)
            if error is not None:
                self._index += 1
                raise note_error(error, self._stage, self._index - 1)
        return taken, held, largest

    def _run_results(self, items: list[Any], k: int, per: int) -> tuple[int, int, list[Any], Exception | None]:
        """Up to ``k`` results from the input's run: the first through ``_fill_rows`` (appended to ``items``), and
        when that one is a flat row of scalars, those of the rest of the run by ``map`` over it (no Python loop
        around the function; results not yet normalized nor counted in the index): ``(the first's bytes, the
        largest, the rest's results, the exception the function raised on the element after them or None)``. A first
        result of another kind turns these runs off for this iterator (``_by_runs``: the one-by-one loop it was)."""
        held, largest = self._fill_rows(items, 1, per)  # (the input's __next__ when no run is ready: the next block)
        if not _scalar_row(items[-1]):
            self._by_runs = False
            return held, largest, [], None
        run = self._source.elements_ready()
        if run is None or k == 1 or largest > per:
            return held, largest, [], None
        x = next(run, _END)
        if x is _END:
            return held, largest, [], None
        fn = self._fn
        pulled = count()  # the rows taken from the run (the one that raised included)
        rows = map(itemgetter(0), zip(chain((x,), islice(run, k - 2)), pulled))
        ys: list[Any] = []
        error: Exception | None = None
        try:
            ys.extend(starmap(fn, rows) if type(x) is tuple else map(fn, rows))
        except Exception as e:
            error = e
        if error is None and next(pulled) > len(ys):  # (map ends at a StopIteration from the function)
            error = stop_iteration_error(self._stage)
        return held, largest, ys, error

    def _fill_rows(self, items: list[Any], k: int, per: int, run: Any = None) -> tuple[int, int]:
        """Up to ``k`` elements one by one: results computed ahead first, then the input's ready elements, then its
        ``__next__``."""
        nxt, fn, finish, stage, append = self._next_input, self._fn, self._finish, self._stage, items.append
        ahead = self._ahead
        ready = self._source.elements_ready
        if run is None and not ahead:
            run = ready()
        run = run or _NOTHING_READY  # the input's ready elements, pulled without a Python call each
        i = self._index
        start = len(items)
        tally = FillTally(per, scalars=finish is None)  # results appended as they are when there is no finish
        fast = None
        try:
            for _ in range(k):
                if ahead:  # a result computed ahead (``_fill_run``), or the error its function raised
                    y = ahead.popleft()
                    x = _AHEAD
                else:
                    x = next(run, _END)
                    if x is _END:  # none ready: the input's own __next__ (which may make more ready)
                        x = nxt()
                        run = ready() or _NOTHING_READY
                i += 1
                try:
                    if x is not _AHEAD:
                        y = fn(*x) if type(x) is tuple else fn(x)
                    elif type(y) is _Raised:
                        raise y.error
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
        state = {"kind": "map", "index": self._index, "input": self._source.get_state()}
        if self._ahead:  # (the input is past them: a batch gathering them keeps its own start instead)
            state["ahead"] = len(self._ahead)
        return state

    def _counters(self) -> dict[str, Any]:
        return {"index": self._index}

    def _restore_counters(self, state: dict[str, Any]) -> None:
        if state.get("ahead"):
            raise StateError(f"{self._stage}: this state was taken while {state['ahead']} results computed ahead "
                             "were held (inside a batch, whose own state restores them); restore the batch's state")
        self._ahead.clear()
        self._index = int(state["index"])
