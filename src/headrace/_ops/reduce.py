"""``Dataset.reduce`` and ``Dataset.get_single_element``: consume a dataset into one value.

``reduce(initial_state, reduce_func)``: ``state = reduce_func(state, element)`` over every element (a tuple
element is *not* unpacked: tf.data passes it as one argument), then ``state``. As tf.data, the state must
keep its structure and dtypes from step to step (``TypeError`` naming the step otherwise; shapes may change)
and the result is normalized like ``map`` results (Python ints -> int64, str -> bytes). An infinite dataset
raises ``ValueError`` instead of running forever.

``get_single_element()``: the one element; ``ValueError`` when the dataset is empty or has more than one
(tf.data raises ``InvalidArgumentError`` with the same words).

Both iterate a fresh iterator (the pipeline's memory budget and threads apply) and close it at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._engine.calls import check_state_kept, guarded_apply
from .._engine.stage_support import note_error
from .._options import INFINITE_CARDINALITY
from .._spec import spec_of
from .._structure import normalize_tensors


def reduce_dataset(dataset: Any, initial_state: Any, reduce_func: Callable[[Any, Any], Any],
                   stage: str = "reduce") -> Any:
    """See the module docstring. ``dataset`` is a ``headrace.Dataset``; ``stage`` names it in errors."""
    if not callable(reduce_func):
        raise TypeError(f"reduce(reduce_func={reduce_func!r}): reduce_func must be callable (state, element) -> "
                        "state")
    if dataset.cardinality() == INFINITE_CARDINALITY:
        raise ValueError("reduce(): the dataset is infinite (repeat() without a count); take(n) first")
    state = normalize_tensors(initial_state, "reduce(initial_state)")
    first_spec = spec_of(state)
    with iter(dataset) as it:
        for i, x in enumerate(it):
            try:
                state = normalize_tensors(guarded_apply(reduce_func, stage, state, x), "reduce(reduce_func)")
            except Exception as e:
                note_error(e, stage, i)
                raise
            check_state_kept(first_spec, state, f"{stage}: reduce_func (at element {i})")
    return state


def single_element(dataset: Any, stage: str = "get_single_element()") -> Any:
    """See the module docstring; ``stage`` names it in errors."""
    with iter(dataset) as it:
        try:
            x = next(it)
        except StopIteration:
            raise ValueError(f"{stage}: Dataset was empty; it must have exactly one element") from None
        try:
            next(it)
        except StopIteration:
            return x
    raise ValueError(f"{stage}: Dataset had more than one element; use take(1) or batch first")
