"""The calling convention of user functions (``headrace._engine.calls``), checked in every op that calls one.

A user function that raises ``StopIteration`` would end the dataset silently where a stage calls it inside
``__next__``; every op raises ``RuntimeError`` naming its stage instead (``map`` did, ``scan``,
``group_by_window`` and ``rejection_resample`` ended the dataset).
"""

from __future__ import annotations

import numpy as np
import pytest

import headrace as hr

D = hr.Dataset


def stop(*args):
    raise StopIteration


USER_CODE = {
    "map": (lambda: D.range(3).map(stop), "map(stop)"),
    "map parallel": (lambda: D.range(3).map(stop, num_parallel_calls=2), "map(stop)"),
    "map AUTOTUNE": (lambda: D.range(3).map(stop, num_parallel_calls=hr.AUTOTUNE), "map(stop)"),
    "map on worker processes": (lambda: D.range(3).map(stop, num_parallel_calls=2, executor="process"),
                                "map(stop)"),
    "filter": (lambda: D.range(3).filter(stop), "filter(stop)"),
    "take_while": (lambda: D.range(3).take_while(stop), "take_while(stop)"),
    "flat_map": (lambda: D.range(3).flat_map(stop), "flat_map(stop)"),
    "interleave": (lambda: D.range(3).interleave(stop, cycle_length=2), "interleave(stop)"),
    "scan": (lambda: D.range(3).scan(np.int64(0), stop), "scan(stop)"),
    "group_by_window key_func": (lambda: D.range(3).group_by_window(stop, lambda k, w: w, window_size=2),
                                 "group_by_window(stop)"),
    "group_by_window reduce_func": (lambda: D.range(3).group_by_window(lambda x: np.int64(0), stop,
                                                                       window_size=2), "group_by_window(<lambda>)"),
    "group_by_window window_size_func": (
        lambda: D.range(3).group_by_window(lambda x: np.int64(0), lambda k, w: w, window_size_func=stop),
        "group_by_window(<lambda>)"),
    "bucket_by_sequence_length": (lambda: D.range(3).map(lambda x: np.zeros(x)).bucket_by_sequence_length(
        stop, [2], [1, 1]), "bucket_by_sequence_length"),
    "rejection_resample": (lambda: D.range(3).rejection_resample(stop, [0.5, 0.5], seed=1),
                           "rejection_resample(stop)"),
    "from_generator": (lambda: D.from_generator(stop), "from_generator(stop)"),
    "from_source": (lambda: D.from_source(stop), "from_source(stop)"),
}


@pytest.mark.parametrize("op", sorted(USER_CODE))
def test_a_user_function_raising_stop_iteration_is_an_error_naming_the_stage(op):
    make, stage = USER_CODE[op]
    with pytest.raises(RuntimeError, match="raised StopIteration") as info:
        list(make())
    assert stage in str(info.value)


def test_reduce_refuses_a_stop_iteration_of_its_function():
    with pytest.raises(RuntimeError, match=r"reduce: the function raised StopIteration") as info:
        D.range(3).reduce(np.int64(0), stop)
    assert "in reduce at element 0" in "".join(getattr(info.value, "__notes__", []))


# None is no component either: tf.data refuses map(lambda x: None) when the dataset is built (its MapDataset
# needs at least one output type); headrace yielded None elements, the one ported tf.data case that differed
EMPTY = [(), [], {}, None, (None,), {"a": None, "b": ((), None)}]
EMPTY_IDS = ["tuple", "list", "dict", "None", "tuple-of-None", "dict-of-None"]


@pytest.mark.parametrize("empty", EMPTY, ids=EMPTY_IDS)
def test_a_map_function_returning_no_component_is_refused_with_the_fix(empty):
    ds = D.range(3).map(lambda x: empty)
    with pytest.raises(ValueError, match=r"map\(<lambda>\): the function returned .* no component.*filter\(\)"):
        ds.element_spec  # noqa: B018  (the traced spec: what a stage built on it asks for)
    for parallel in (None, 2, hr.AUTOTUNE):
        with pytest.raises(ValueError, match="no component"):
            list(D.range(3).map(lambda x: empty, num_parallel_calls=parallel))
    with pytest.raises(ValueError, match="no component"):  # fused with the map before it
        list(D.range(3).map(lambda x: x + 1).map(lambda x: empty))


@pytest.mark.parametrize("empty", [(), None], ids=["tuple", "None"])
def test_a_map_function_returning_no_component_is_refused_from_a_worker_process(empty):
    with pytest.raises(ValueError, match="no component"):
        list(D.range(3).map(lambda x: empty, num_parallel_calls=1, executor="process"))


def _pair_sum(a, b):
    return a + b


def _dict_value(d):
    return d["v"] * 2


def test_a_worker_process_calls_the_function_by_the_same_convention():
    """The worker process calls the user's function as ``calls.element_caller`` does (loaded there by location):
    a tuple element unpacked into arguments, a dict one argument, ``StopIteration`` an error naming the stage."""
    pairs = D.from_tensor_slices((np.arange(4), np.arange(4) * 10))
    got = pairs.map(_pair_sum, num_parallel_calls=1, executor="process")
    assert [int(v) for v in got] == [0, 11, 22, 33]
    dicts = D.from_tensor_slices({"v": np.arange(3)}).map(_dict_value, num_parallel_calls=1, executor="process")
    assert [int(v) for v in dicts] == [0, 2, 4]
    with pytest.raises(RuntimeError, match=r"map\(stop\): the function raised StopIteration"):
        list(D.range(3).map(stop, num_parallel_calls=1, executor="process"))


def test_an_empty_structure_inside_a_result_stays_allowed_as_in_tf_data():
    ds = D.range(2).map(lambda x: (x, ()))
    assert ds.element_spec == (hr.TensorSpec([], "int64"), ())
    assert [(int(a), b) for a, b in ds] == [(0, ()), (1, ())]
    with_none = D.range(2).map(lambda x: (x, None))  # a None beside a value: tf.data's NoneTensorSpec
    assert with_none.element_spec == (hr.TensorSpec([], "int64"), hr.NoneTensorSpec())
    assert [(int(a), b) for a, b in with_none] == [(0, None), (1, None)]
