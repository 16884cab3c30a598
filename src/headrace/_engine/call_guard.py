"""The rule of calling a user's function on an element, with nothing but the standard library.

- Tuple unpacking (tf.data's rule): an exact ``tuple`` element is passed as positional arguments
  (``fn(*x)``), any other element (dict, namedtuple, array) as one argument.
- ``StopIteration`` raised by a user function becomes ``RuntimeError`` naming the stage (it would otherwise
  end the dataset silently where a stage calls the function inside ``__next__``).

:mod:`headrace._engine.calls` builds the rest of the convention on this (normalized results, runs of elements);
a worker process of ``map(executor="process")`` loads this file alone, by its location
(``headrace._engine.pool.process_child``), so it imports nothing from headrace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def stop_iteration_error(stage: str) -> RuntimeError:
    """What a user function's ``StopIteration`` becomes (it would otherwise end the dataset silently)."""
    return RuntimeError(f"{stage}: the function raised StopIteration; return a value or raise another "
                        "exception (StopIteration would silently end the dataset)")


def call_with_element(fn: Callable[..., Any], x: Any) -> Any:
    """tf.data's calling convention without the guard: for tracing an element spec (where any exception
    means "cannot trace") and counting."""
    return fn(*x) if type(x) is tuple else fn(x)


def guarded_call(fn: Callable[..., Any], x: Any, stage: str) -> Any:
    """``fn`` on element ``x`` (tuple unpacked), ``StopIteration`` raised as ``RuntimeError``."""
    try:
        return fn(*x) if type(x) is tuple else fn(x)
    except StopIteration as e:
        raise stop_iteration_error(stage) from e


def guarded_apply(fn: Callable[..., Any], stage: str, *args: Any) -> Any:
    """``fn(*args)`` for functions of fixed arity (no unpacking), ``StopIteration`` raised as ``RuntimeError``."""
    try:
        return fn(*args)
    except StopIteration as e:
        raise stop_iteration_error(stage) from e


def element_call(fn: Callable[..., Any], stage: str) -> Callable[[Any], Any]:
    """:func:`guarded_call` of ``fn`` as one function of the element, made once per stage (one frame per
    element): what a worker process calls, and ``calls.element_caller`` without ``normalize_result``."""
    def call(x: Any) -> Any:
        try:
            return fn(*x) if type(x) is tuple else fn(x)
        except StopIteration as e:
            raise stop_iteration_error(stage) from e
    return call
