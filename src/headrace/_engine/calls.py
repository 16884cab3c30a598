"""How headrace calls a user's function: the one convention of every op that runs user code.

- Tuple unpacking (tf.data's rule): a function of *one element* (``map``, ``filter``, ``take_while``,
  ``flat_map`` / ``interleave``, ``group_by_window``'s ``key_func``, ``rejection_resample``'s
  ``class_func``) gets an exact ``tuple`` element as positional arguments (``fn(*x)``) and any other
  element (dict, namedtuple, array) as one argument. Functions of fixed arity (``scan_func(state, x)``,
  ``reduce_func(state, x)``, ``reduce_func(key, window)``, ``window_size_func(key)``) get their arguments
  as they are.
- ``StopIteration``: raised by a user function it would end the dataset silently where the stage calls it
  inside ``__next__``; every call here turns it into ``RuntimeError`` naming the stage
  (:func:`stop_iteration_error`).
- One fast copy: the convention is written out only here, in the callables :func:`element_caller` makes once
  per stage (one element a call: ``map`` in the consumer's thread, each map of a fused chain, a parallel map's
  workers, a worker process) and :func:`run_caller` (a run of elements a call: ``map_and_batch_fusion``, one
  call per batch, no Python call per element), and in :func:`call_over_run` (the function called by ``map()``
  over a reader's run, no Python loop around it: results left to the caller to normalize, see
  ``docs/design/rows.md``); the stages add the element's index to an error's note.
- Results: ``map``'s are normalized (:func:`element_caller` with ``normalize_result``) and must have a
  component: ``None``, ``()``, ``[]``, ``{}`` or containers of only those raise ``ValueError``
  (:func:`refuse_empty`), when the traced spec
  says so (the spec is asked for: ``element_spec``, a stage built on it), else at the first result, where
  tf.data refuses the function when ``map()`` traces it. A result must fit
  the spec the pipeline was built with (:func:`traced_guard`); a running state (``scan``, ``reduce``) must
  keep its structure and dtypes (:func:`check_state_kept`).

The rule itself (unpacking, ``StopIteration``) is :mod:`headrace._engine.call_guard`, which needs nothing but the
standard library: a worker process of ``map(executor="process")`` loads that file alone, by its location
(``headrace._engine.pool.process_child``), and the parent applies the rest of this convention to the results
the workers send back.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from itertools import chain, count, islice, starmap
from operator import itemgetter
from typing import Any, Protocol

from .._spec import NoneTensorSpec, conformance, most_specific_compatible, spec_of
from .._structure import SCALAR_TYPES, describe, normalize, normalize_sized
from .call_guard import call_with_element as call_with_element
from .call_guard import element_call, stop_iteration_error
from .call_guard import guarded_apply as guarded_apply
from .call_guard import guarded_call as guarded_call
from .runs import FillTally
from .stage_support import note_error

_END = object()
_AHEAD = object()  # (in place of an input element: its result was computed ahead)
_NOTHING_READY: Any = iter(())


def element_caller(fn: Callable[..., Any], stage: str, *, normalize_result: bool = False,
                   finish: Callable[[Any], Any] | None = None) -> Callable[[Any], Any]:
    """:func:`guarded_call` of ``fn`` as one function of the element, made once per stage (one frame per
    element); with ``normalize_result`` the result is normalized as ``map``'s results are (scalars of the
    common types pass as they are), then given to ``finish`` (a map's ``output_signature`` conversion or
    traced-spec check) where there is one."""
    if not normalize_result:
        return element_call(fn, stage)

    def call_normalized(x: Any) -> Any:
        try:
            y = fn(*x) if type(x) is tuple else fn(x)
        except StopIteration as e:
            raise stop_iteration_error(stage) from e
        if type(y) not in SCALAR_TYPES:
            y = normalize(refuse_empty(y, stage), stage)
        return y if finish is None else finish(y)
    return call_normalized


class Raised:
    """The exception a function raised on an element whose result was computed ahead (:func:`call_over_run`):
    raised when that element's turn comes (``Counted.ahead``)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class Counted(Protocol):
    """What :func:`run_caller`'s loop counts the elements it calls ``fn`` on in (a map's stage: the index of
    its error notes and its state), and where it finds results computed ahead (``ahead``: results of ``fn`` not
    yet normalized nor counted, or a :class:`Raised` last), handed out before any input element."""

    index: int
    ahead: deque[Any]


RunCall = Callable[[Counted, Callable[[], Any], Callable[[], Any], list[Any], int, int], tuple[int, int]]


def run_caller(fn: Callable[..., Any], stage: str, finish: Callable[[Any], Any] | None = None) -> RunCall:
    """:func:`element_caller` with ``normalize_result`` over a run of elements in one call:
    ``fill(counted, pull, ready, items, k, per)`` appends the results of ``fn`` on up to ``k`` elements to
    ``items`` (``runs.RowRuns.fill``'s contract: stops after a result of more than ``per`` bytes, returns the
    bytes appended and the largest), taking the elements from the iterator ``ready()`` gives (the input's
    ``runs.ReadyElements``, C-level where it can be) and, when it has none, from ``pull()`` (the input's
    ``__next__``), after the results ``counted.ahead`` holds; ``counted.index`` counts the elements called, and an
    error's note names the element's index (``in <stage> at element <i>``). ``map_and_batch_fusion``'s loop
    (``headrace._engine.tuning.static_optimizations.MapAndBatch``): no Python call per element of its own, and a
    plain ``dict`` or ``tuple`` result (without ``finish``) normalized and sized in one pass over its values."""

    def fill(counted: Counted, pull: Callable[[], Any], ready: Callable[[], Any], items: list[Any], k: int,
             per: int) -> tuple[int, int]:
        append = items.append
        ahead = counted.ahead
        run = _NOTHING_READY if ahead else ready() or _NOTHING_READY
        i = counted.index
        start = len(items)
        tally = FillTally(per, scalars=finish is None)  # results appended as they are when there is no finish
        fast = y = None
        try:
            for _ in range(k):
                if ahead:  # a result computed ahead (call_over_run), or the error its function raised
                    y = ahead.popleft()
                    x = _AHEAD
                else:
                    x = next(run, _END)
                    if x is _END:  # none ready: the input's own __next__ (which may make more ready)
                        x = pull()
                        run = ready() or _NOTHING_READY
                i += 1
                try:
                    if x is not _AHEAD:
                        y = fn(*x) if type(x) is tuple else fn(x)
                    elif type(y) is Raised:
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
            counted.index = i
        return tally.result(len(items) - start)
    return fill


def call_over_run(fn: Callable[..., Any], stage: str, run: Iterator[Any], k: int) -> tuple[list[Any], Exception | None]:
    """``fn`` on up to ``k`` elements of ``run`` (tuples unpacked, as the first one is) by ``map()``: no Python loop
    around the function, results as it returns them (not normalized). ``(the results, the exception it raised on
    the element after them or None)``; a ``StopIteration`` from ``fn`` (which ends ``map()``) is told from the run's
    end by counting the elements taken, and is :func:`stop_iteration_error`."""
    x = next(run, _END)
    if x is _END:
        return [], None
    pulled = count()  # the elements taken from the run (the one that raised included)
    elements = map(itemgetter(0), zip(chain((x,), islice(run, k - 1)), pulled))
    ys: list[Any] = []
    error: Exception | None = None
    try:
        ys.extend(starmap(fn, elements) if type(x) is tuple else map(fn, elements))
    except Exception as e:
        error = e
    if error is None and next(pulled) > len(ys):  # (map ends at a StopIteration from the function)
        error = stop_iteration_error(stage)
    return ys, error


_CONTAINERS = (tuple, list, dict)


def no_component(y: Any) -> bool:
    """True for an element with no tensor component: ``None`` (or its spec, ``NoneTensorSpec``), ``()``,
    ``[]``, ``{}``, or containers of only those (``(None,)``, ``{"a": None}``). tf.data has no element without
    a component (its dataset ops need at least one output type) and refuses a map that returns one when it
    traces the function. Stops at the first component: one check of the first leaf for most elements."""
    if y is None or type(y) is NoneTensorSpec:
        return True
    if type(y) not in _CONTAINERS:
        return False
    return all(no_component(v) for v in (y.values() if type(y) is dict else y))


def empty_element_error(stage: str, what: str) -> ValueError:
    """The refusal of a map whose function returns an element with no component (``what``: how it shows)."""
    return ValueError(f"{stage}: the function returned {what}, an element with no component (None is no value; "
                      "tf.data refuses such a map when the dataset is built); return at least one value, e.g. "
                      "the input or np.int64(0), or drop elements with filter()")


def refuse_empty(y: Any, stage: str) -> Any:
    """``y``, unless it is an element with no component (:func:`no_component`): ``ValueError`` then."""
    if y is None or (type(y) in _CONTAINERS and no_component(y)):
        raise empty_element_error(stage, repr(y))
    return y


def traced_guard(spec: Any, stage: str) -> Callable[[Any], Any] | None:
    """For a spec traced from the function and used (``spec`` not None): a check of every result's
    structure, dtypes and ranks against it, returning the result or raising ``ValueError`` (the function's
    output kind depends on values in a way the trace did not see, so what was built on the spec is wrong)."""
    if spec is None:
        return None
    fits = conformance(spec)

    def guard(y: Any) -> Any:
        if fits(y):
            return y
        raise ValueError(f"{stage}: the result {describe(y)} does not match the element_spec traced from the "
                         f"function ({spec!r}) that this pipeline was built with; its structure, dtypes or ranks "
                         "depend on values: declare them with map(..., output_signature=hr.TensorSpec(...))")

    return guard


def check_state_kept(expected: Any, state: Any, where: str) -> None:
    """A running state (``scan``, ``reduce``) keeps the structure and dtypes of its initial value (spec
    ``expected``; shapes may change); ``TypeError`` naming ``where`` (the stage and function) otherwise."""
    got = spec_of(state)
    if most_specific_compatible(expected, got) is None:
        raise TypeError(f"{where} changed the state from {expected!r} to {got!r}; the state must "
                        "keep its structure and dtypes (cast it)")
