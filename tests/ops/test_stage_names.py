"""``name=`` (tf.data's argument of every ``Dataset`` method) names the stage: in errors, ``explain()``,
``memory_stats()`` and ``repr`` (``DatasetNode.named``, ``IteratorContext.stage_name``). It was accepted
and dropped by about 25 methods."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import headrace as hr

D = hr.Dataset
R = D.range(8)
NAMED = {  # method -> a dataset built by it with name="nm" (the outermost stage)
    "with_options": lambda: R.with_options(hr.Options(), name="nm"),
    "range": lambda: D.range(4, name="nm"),
    "from_tensors": lambda: D.from_tensors(1, name="nm"),
    "from_tensor_slices": lambda: D.from_tensor_slices([1, 2], name="nm"),
    "from_generator": lambda: D.from_generator(lambda: iter([1, 2]), name="nm"),
    "list_files": lambda: D.list_files(__file__, shuffle=False, name="nm"),
    "zip": lambda: D.zip(R, R, name="nm"),
    "counter": lambda: D.counter(name="nm"),
    "random": lambda: D.random(seed=1, name="nm"),
    "from_source": lambda: D.from_source(lambda: iter(D.range(2)), name="nm"),
    "map": lambda: R.map(lambda x: x, name="nm"),
    "filter": lambda: R.filter(lambda x: x > 0, name="nm"),
    "flat_map": lambda: R.flat_map(D.from_tensors, name="nm"),
    "interleave": lambda: R.interleave(D.from_tensors, cycle_length=2, name="nm"),
    "shuffle": lambda: R.shuffle(4, seed=1, name="nm"),
    "batch": lambda: R.batch(2, name="nm"),
    "padded_batch": lambda: R.padded_batch(2, name="nm"),
    "unbatch": lambda: R.batch(2).unbatch(name="nm"),
    "prefetch": lambda: R.prefetch(2, name="nm"),
    "repeat": lambda: R.repeat(2, name="nm"),
    "take": lambda: R.take(2, name="nm"),
    "skip": lambda: R.skip(2, name="nm"),
    "shard": lambda: R.shard(2, 0, name="nm"),
    "enumerate": lambda: R.enumerate(name="nm"),
    "take_while": lambda: R.take_while(lambda x: x < 3, name="nm"),
    "concatenate": lambda: R.concatenate(R, name="nm"),
    "cache": lambda: R.cache(name="nm"),
    "scan": lambda: R.scan(np.int64(0), lambda s, x: (s + x, s), name="nm"),
    "window": lambda: R.window(2, name="nm"),
    "group_by_window": lambda: R.group_by_window(lambda x: x % 2, lambda k, w: w.batch(2), window_size=2,
                                                 name="nm"),
    "bucket_by_sequence_length": lambda: R.map(lambda x: np.zeros(x % 3)).bucket_by_sequence_length(
        lambda x: np.int64(x.shape[0]), [2], [2, 2], name="nm"),
    "ragged_batch": lambda: R.ragged_batch(2, name="nm"),
    "rebatch": lambda: R.batch(2).rebatch(4, name="nm"),
    "unique": lambda: R.unique(name="nm"),
    "rejection_resample": lambda: R.rejection_resample(lambda x: x % 2, [0.5, 0.5], seed=1, name="nm"),
    "ignore_errors": lambda: R.ignore_errors(name="nm"),
    "pack": lambda: R.map(lambda x: np.arange(x % 3 + 1)).pack(4, name="nm"),
    "concat_then_split": lambda: R.map(lambda x: np.arange(x % 3 + 1)).concat_then_split(4, name="nm"),
}
NOT_A_DATASET = {"reduce", "get_single_element", "save"}  # tested below


def _stages(node):
    yield node["stage"]
    for child in node.get("inputs", []):
        yield from _stages(child)


def test_every_method_that_accepts_name_is_checked_here():
    accepting = {n for n, f in inspect.getmembers(D, callable) if not n.startswith("_")
                 and "name" in inspect.signature(f).parameters}
    assert accepting == set(NAMED) | NOT_A_DATASET


@pytest.mark.parametrize("method", sorted(NAMED))
def test_name_names_the_stage_in_repr_and_explain(method):
    ds = NAMED[method]()
    assert "(nm)>" in repr(ds).split(" element_spec")[0] + ">"
    with iter(ds) as it:
        next(it)
        stages = list(_stages(it.explain()["tree"]))
    assert stages[0].endswith("(nm)"), stages


def test_name_names_the_stage_in_errors_and_memory_stats():
    def bad(x):
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom") as info:
        list(R.filter(bad, name="keep"))
    assert "in filter(keep) at element 0" in info.value.__notes__
    with iter(R.shuffle(4, name="mix").batch(2, name="pairs")) as it:
        next(it)
        assert {"shuffle(mix)", "batch(pairs) assembly"} <= set(it.memory_stats()["stages"])


def test_name_names_reduce_get_single_element_and_save(tmp_path):
    def stop(*args):
        raise StopIteration

    with pytest.raises(RuntimeError, match=r"reduce\(total\): the function raised StopIteration"):
        R.reduce(np.int64(0), stop, name="total")
    with pytest.raises(ValueError, match=r"get_single_element\(one\): Dataset had more than one"):
        R.get_single_element(name="one")
    with pytest.raises(RuntimeError, match=r"save\(out\): the function raised StopIteration"):
        R.save(str(tmp_path / "s"), shard_func=stop, name="out")


@pytest.mark.parametrize("bad", [3, ""])
def test_a_name_that_is_not_a_non_empty_str_is_refused(bad):
    with pytest.raises(TypeError, match=r"batch\(name=.*\): name must be a non-empty str"):
        R.batch(2, name=bad)
