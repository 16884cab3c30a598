"""tf.data's static optimizations applied for the user (``headrace._engine.tuning.static_optimizations``): map_fusion
and map_and_batch_fusion. Across generated chains of sequential maps (errors, ``StopIteration`` from the function,
``output_signature``, names, structured results) under ``batch`` / ``filter`` / ``ignore_errors``, the optimized
pipeline and the one built with ``Options(static_optimizations=False)`` give the same elements and errors, the
same state at every step, and each restores the other's states; ``explain()`` names what was applied; tf.data's
``options.experimental_optimization`` switches map onto ``static_optimizations``."""

from __future__ import annotations

import random

import numpy as np
import pytest

import headrace as hr

pytestmark = pytest.mark.filterwarnings("ignore::headrace.IgnoredErrorsWarning")

OFF = hr.Options(static_optimizations=False)


def _step(rng: random.Random, k: int):
    kind = rng.choice(["add", "pair", "dict", "pyint", "stop", "list"])
    bad = rng.choice([None, 3, 7])

    def f(*x):
        v = int(np.asarray(x[0] if isinstance(x[0], np.ndarray | np.generic | int) else next(iter(x[0].values()))
                           ).ravel()[0]) if not isinstance(x[0], dict) else int(x[0]["v"])
        if bad is not None and v % 11 == bad:
            if kind == "stop":
                raise StopIteration  # becomes a clear RuntimeError naming the map
            raise ValueError(f"step {k} refuses {v}")
        if kind == "pair":
            return np.int64(v + 1), np.float32(v)
        if kind == "dict":
            return {"v": np.int64(v + 2)}
        if kind == "pyint":
            return v + 3
        if kind == "list":
            return [np.int64(v), np.int64(v * 2)]
        return np.int64(v + k)

    sig = hr.TensorSpec((), np.int64) if kind == "add" and rng.random() < 0.3 else None
    return f, sig, rng.choice([None, f"s{k}"])


def _pipeline(seed: int, options: hr.Options | None) -> hr.Dataset:
    rng = random.Random(seed)
    ds = hr.Dataset.range(rng.choice([0, 7, 40, 90]))
    for k in range(rng.choice([1, 2, 3, 4])):
        f, sig, name = _step(rng, k)
        ds = ds.map(f, output_signature=sig, name=name)
    tail = rng.choice(["none", "batch", "filter", "ignore", "batch_drop"])
    if tail == "batch":
        ds = ds.batch(rng.choice([1, 4, 16]))
    elif tail == "batch_drop":
        ds = ds.batch(5, drop_remainder=True)
    elif tail == "filter":
        ds = ds.filter(lambda *x: True)
    elif tail == "ignore":
        ds = ds.ignore_errors()
    return ds if options is None else ds.with_options(options)


def _steps(it, limit: int = 300) -> list:
    out = []
    for _ in range(limit):
        state = it.get_state()
        try:
            x = next(it)
        except StopIteration:
            out.append(("end", state))
            return out
        except Exception as e:  # compared by type, message and notes
            out.append((("error", type(e).__name__, str(e), tuple(getattr(e, "__notes__", ()))), state))
            continue
        out.append((_plain(x), state))
    raise AssertionError("no end")


def _plain(x) -> object:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in sorted(x.items())}
    if isinstance(x, tuple | list):
        return tuple(_plain(v) for v in x)
    a = np.asarray(x)
    return (a.dtype.str, a.shape, a.tolist())


@pytest.mark.parametrize("seed", range(50))
def test_optimized_and_unoptimized_give_the_same_elements_errors_and_states(seed: int) -> None:
    fused = _steps(iter(_pipeline(seed, None)))
    plain = _steps(iter(_pipeline(seed, OFF)))
    assert [x for x, _ in fused] == [x for x, _ in plain]
    assert [s["pipeline"] for _, s in fused] == [s["pipeline"] for _, s in plain]


@pytest.mark.parametrize("seed", range(0, 50, 3))
def test_states_move_between_optimized_and_unoptimized_builds(seed: int) -> None:
    full = _steps(iter(_pipeline(seed, None)))
    for step in range(0, len(full), max(1, len(full) // 6)):
        state = full[step][1]
        for options in (None, OFF):
            restored = iter(_pipeline(seed, options))
            restored.set_state(state)
            assert [x for x, _ in _steps(restored)] == [x for x, _ in full[step:]], (seed, step, options)


def test_explain_names_the_optimizations_applied_and_none_when_off() -> None:
    ds = hr.Dataset.range(64).map(lambda x: x + 1, name="a").map(lambda x: x * 2, name="b").batch(8)
    it = iter(ds)
    next(it)
    text = str(it.explain())
    assert "map_fusion: map(a) and map(b) run as one stage" in text
    it2 = iter(hr.Dataset.range(64).map(lambda x: x + 1, name="a").batch(8))
    next(it2)
    assert "map_and_batch_fusion: map(a) runs in this stage's loop" in str(it2.explain())
    it3 = iter(ds.with_options(OFF))
    next(it3)
    assert "optimization" not in str(it3.explain())
    assert "map(a)" in str(it3.explain()) and "map(b)" in str(it3.explain())


def test_parallel_maps_are_not_fused() -> None:
    ds = hr.Dataset.range(64).map(lambda x: x + 1, name="a").map(lambda x: x * 2, num_parallel_calls=2, name="b")
    it = iter(ds)
    assert [int(v) for v in it] == [(i + 1) * 2 for i in range(64)]
    assert "map_fusion" not in str(it.explain())


def test_tf_data_optimization_options_map_onto_static_optimizations() -> None:
    o = hr.Options()
    assert o.experimental_optimization.apply_default_optimizations is True
    assert o.experimental_optimization.map_fusion is True and o.experimental_optimization.filter_fusion is False
    o.experimental_optimization.apply_default_optimizations = False
    assert o.static_optimizations is False and o.experimental_optimization.map_and_batch_fusion is False
    with pytest.raises(ValueError, match=r"map_fusion=False.*apply_default_optimizations = False"):
        hr.Options().experimental_optimization.map_fusion = False
    with pytest.raises(ValueError, match=r"filter_fusion=True: headrace does not apply filter_fusion"):
        hr.Options().experimental_optimization.filter_fusion = True
    with pytest.raises(TypeError, match=r"static_optimizations='no'"):
        hr.Options(static_optimizations="no")
    with pytest.raises(AttributeError, match=r"experimental_optimization\.bogus"):
        hr.Options().experimental_optimization.bogus = 1


def _recipe(ds: hr.Dataset, options: hr.Options | None = None):
    """What the recipe holds for ``ds``'s last node (a batch) under ``options``."""
    from headrace._engine.context import IteratorContext
    from headrace._engine.tuning.static_optimizations import batch_recipe
    from headrace._memory import budget_for

    return batch_recipe(ds._node, IteratorContext(options or hr.Options(), budget_for(None), (0,)))


def test_the_recipe_holds_map_and_batch_for_a_sequential_map_under_a_batch() -> None:
    from headrace._engine.tuning.static_optimizations import MapAndBatchNode

    mapped = hr.Dataset.range(64).map(lambda x: x + 1, name="a")
    for ds in (mapped.batch(8), mapped.padded_batch(8), mapped.ragged_batch(8), mapped.batch(8, num_parallel_calls=2),
               mapped.with_options(hr.Options()).batch(8), mapped.prefetch(0).batch(8)):
        fused = _recipe(ds)
        assert isinstance(fused, MapAndBatchNode) and fused.batch is ds._node, ds._node
        assert fused.label == ds._node.label and fused.cardinality() == ds._node.cardinality() == 8
        assert fused.static_spec() == ds._node.static_spec()
        with iter(ds) as it:
            first = next(it)
            assert "optimization: map_and_batch_fusion: map(a) runs in this stage's loop" in str(it.explain())
        assert np.asarray(first).tolist()[:3] == [1, 2, 3]
    for ds, why in ((mapped.batch(8), OFF), (mapped.map(lambda x: x, name="b").batch(8), None),
                    (hr.Dataset.range(8).map(abs, num_parallel_calls=2).batch(4), None),
                    (hr.Dataset.range(8).map(abs, executor="process").batch(4), None),
                    (mapped.prefetch(1).batch(8), None), (hr.Dataset.range(8).batch(4), None)):
        assert _recipe(ds, why) is ds._node, (ds._node, why)


def test_the_base_of_every_stage_keeps_only_what_every_stage_needs() -> None:
    """Runs of elements (``headrace._engine.runs``) and explain()'s optimization and figures are protocols of their
    own that some stages implement, not methods every stage inherits."""
    from headrace._engine import runs
    from headrace._engine.stage import Stage
    from headrace._engine.tuning.explain import Figured, Optimized

    for name in ("fill", "fill_columns", "elements_ready", "stage_figures", "optimization"):
        assert not hasattr(Stage, name), name
    with iter(hr.Dataset.range(10).map(lambda x: x + 1)) as it:
        mapped = it._root
        below = mapped._source
        assert runs.row_runs(mapped) is None and runs.column_runs(mapped) is None
        assert runs.ready_elements(mapped)() is None  # (a map has none of its own)
        assert not isinstance(mapped, Figured | Optimized)
        assert int(next(it)) == 1
        assert runs.ready_elements(below) == below.elements_ready  # (range's chunk)
