"""Issue 11's "Differences observed": each class of difference from tf.data 2.21, fixed everywhere.

Expected values are tf.data 2.21's (checked by running the same pipelines; the differential suite in
``test_tfdata_differential.py`` compares them element by element where TensorFlow is installed).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import headrace as hr

D = hr.Dataset
INT_FORMS = [np.int64(3), np.int32(3), np.uint8(3), np.array(3), np.array(3, np.int16)]


def py(xs):
    return [x.tolist() if isinstance(x, np.ndarray) else (tuple(py(x)) if isinstance(x, tuple) else
                                                          (x.item() if isinstance(x, np.generic) else x))
            for x in xs]


# ---- numpy integers are integers ------------------------------------------------------------------------
@pytest.mark.parametrize("n", INT_FORMS, ids=lambda v: f"{type(v).__name__}-{getattr(v, 'dtype', '')}")
def test_every_count_size_index_and_seed_accepts_numpy_integers(n, tmp_path):
    r = D.range(10)
    built = {
        "range": D.range(n), "range3": D.range(n, 2 * n, n), "repeat": D.range(2).repeat(n),
        "take": r.take(n), "skip": r.skip(n), "batch": r.batch(n), "padded_batch": r.padded_batch(n),
        "shuffle": r.shuffle(n, seed=n), "prefetch": r.prefetch(n), "shard": r.shard(n, n - 1),
        "enumerate": r.enumerate(start=n), "interleave": r.interleave(D.from_tensors, cycle_length=n,
                                                                      block_length=n, num_parallel_calls=n),
        "map": r.map(lambda x: x, num_parallel_calls=n), "batch_par": r.batch(2, num_parallel_calls=n),
        "sample": D.sample_from_datasets([r, r], seed=n),
        "list_files": D.list_files(str(tmp_path / "*"), seed=n) if (tmp_path / "f").touch() is None else None,
        "random_access": D.from_random_access(list(range(10)), shuffle=True, seed=n),
    }
    k = int(n)
    assert py(built["range"]) == list(range(k)) and py(built["range3"]) == [k]
    assert py(built["repeat"]) == [0, 1] * k and py(built["take"]) == list(range(k))
    assert py(built["skip"]) == list(range(k, 10)) and len(next(iter(built["batch"]))) == k
    assert py(next(iter(built["enumerate"]))) == [k, 0] or next(iter(built["enumerate"]))[0] == k
    assert py(built["shard"]) == list(range(k - 1, 10, k))
    for ds in built.values():
        assert len(list(ds)) > 0


def test_the_flat_map_idiom_from_the_issue():
    ds = D.range(1, 4).flat_map(lambda x: D.from_tensors(x).repeat(x))
    assert py(ds) == [1, 2, 2, 3, 3, 3]
    assert py(D.range(3).interleave(lambda x: D.range(x).enumerate(start=x * 10), cycle_length=1)) == [
        (10, 0), (20, 0), (21, 1)]


@pytest.mark.parametrize(("make", "exc", "pattern"), [
    (lambda: D.range(3).repeat(True), TypeError, r"repeat\(count\)=True: expected an integer, got a bool"),
    (lambda: D.range(3).batch(np.float64(2)), TypeError, r"batch\(batch_size\)=.*got a float"),
    (lambda: D.range(3).batch(np.array([2])), TypeError, r"got an array of shape \(1,\)"),
    (lambda: D.range(3).shuffle(2, seed=1.5), TypeError, r"shuffle\(seed\)=1.5"),
    (lambda: D.range(3).enumerate(start=np.bool_(True)), TypeError, r"enumerate\(start\).*bool"),
    (lambda: D.range(3).shard(np.array(2.0), 0), TypeError, r"shard\(num_shards\)"),
    (lambda: D.range(3).interleave(D.from_tensors, cycle_length=False), TypeError, "cycle_length"),
    (lambda: D.range(np.int64(3), 5.0), TypeError, r"argument 1=5.0"),
    (lambda: D.range(3).prefetch(-2), ValueError, r"prefetch\(buffer_size\)=-2 must be >= 0"),
])
def test_bools_floats_and_arrays_are_refused_naming_the_argument(make, exc, pattern):
    with pytest.raises(exc, match=pattern):
        make()


# ---- tf.data's argument names and special values --------------------------------------------------------
def test_argument_names_and_special_values():
    assert D.range(3, output_type=np.int32).element_spec == hr.TensorSpec((), np.int32)
    assert [x.dtype for x in D.range(2, output_type="int32")] == [np.int32, np.int32]
    with pytest.raises(TypeError, match=r"output_type .* or dtype, not both"):
        D.range(3, output_type=np.int32, dtype=np.int64)
    assert py(D.range(3).prefetch(buffer_size=None)) == [0, 1, 2]
    assert py(D.range(2).repeat(-2).take(5)) == [0, 1, 0, 1, 0]
    assert D.range(2).repeat(-7).cardinality() == hr.INFINITE_CARDINALITY
    assert py(D.range(3).take(-5)) == [0, 1, 2] and py(D.range(3).skip(-5)) == []
    assert D.range(10).take(-5).cardinality() == 10  # tf.data 2.21 says -5 (docs/migration.md: deliberate)


def test_sample_from_datasets_follows_tf_data():
    a, b = D.range(10), D.range(100, 110)
    assert py(D.sample_from_datasets([a, b], weights=[0.0, 0.0])) == []
    assert D.sample_from_datasets([a, b], weights=[0.0, 0.0]).cardinality() == 0
    assert sorted(py(D.sample_from_datasets([a, b], weights=[0.0, 1.0], seed=0))) == list(range(100, 110))
    with pytest.raises(TypeError, match="float32 or float64"):
        D.sample_from_datasets([a, b], weights=[1, 1])
    with pytest.raises(TypeError, match="incompatible element specs"):
        D.sample_from_datasets([a, b.map(lambda x: np.float32(x))])
    assert D.sample_from_datasets([a], weights=[0.3]) is a
    weights = D.from_tensor_slices(np.array([[1.0, 0.0]] * 3 + [[0.0, 1.0]] * 3))
    assert py(D.sample_from_datasets([a, b], weights=weights, seed=1)) == [0, 1, 2, 100, 101, 102]
    inf_and_finite = [D.range(3).repeat(), D.range(3)]
    assert D.sample_from_datasets(inf_and_finite).cardinality() == hr.INFINITE_CARDINALITY  # tf.data's rule
    assert D.sample_from_datasets(inf_and_finite, stop_on_empty_dataset=True).cardinality() == \
        hr.UNKNOWN_CARDINALITY  # the finite one ends it (docs/migration.md: deliberate)
    assert D.sample_from_datasets([a, b]).cardinality() == hr.UNKNOWN_CARDINALITY
    with pytest.raises(TypeError, match="float vector of 2 weights"):
        D.sample_from_datasets([a, b], weights=D.range(3))
    # rerandomize_each_iteration: None / False repeat the draws every epoch, True draws anew
    short = [D.range(4), D.range(100, 104)]
    same = py(D.sample_from_datasets(short, seed=3).repeat(2))
    assert same[:8] == same[8:]
    epochs = py(D.sample_from_datasets(short, seed=3, rerandomize_each_iteration=True).repeat(6))
    orders = [epochs[i * 8:(i + 1) * 8] for i in range(6)]
    assert len({tuple(o) for o in orders}) > 1 and all(sorted(o) == sorted(orders[0]) for o in orders)


def test_tfrecord_buffer_size_zero_and_autotune_reads(tmp_path):
    from headrace.io import TFRecordDataset, TFRecordWriter

    path = str(tmp_path / "x.tfrecord")
    with TFRecordWriter(path) as w:
        for i in range(5):
            w.write(b"r%d" % i)
    assert list(TFRecordDataset(path, buffer_size=0)) == [b"r%d" % i for i in range(5)]
    assert list(TFRecordDataset([path, path], num_parallel_reads=hr.AUTOTUNE))[:2] in (
        [b"r0", b"r0"], [b"r0", b"r1"])


# ---- conversions: str -> bytes, None components, lists ----------------------------------------------------
def test_str_becomes_bytes_wherever_an_element_holds_it():
    ds = D.range(3).map(lambda x: np.full([int(x)], "ab"))
    assert py(ds.padded_batch(3, padding_values="z")) == [[[b"z", b"z"], [b"ab", b"z"], [b"ab", b"ab"]]]
    gen = D.from_generator(lambda: iter([["a", "bc"], ["d"]]), output_signature=hr.TensorSpec([None], "string"))
    assert py(gen) == [[b"a", b"bc"], [b"d"]] and gen.element_spec == hr.TensorSpec([None], "string")
    assert py(D.from_generator(lambda x: iter([x]), args=("s",), output_types=bytes)) == [b"s"]
    with pytest.raises(TypeError, match="string b'z' cannot pad a component of dtype int64"):
        D.range(3).map(lambda x: np.zeros(int(x), np.int64)).padded_batch(2, padding_values="z")


def test_none_is_a_component():
    ds = D.range(4).map(lambda x: (x, None))
    assert ds.element_spec == (hr.TensorSpec((), np.int64), hr.NoneTensorSpec())
    got = list(ds.batch(2))
    assert py([g[0] for g in got]) == [[0, 1], [2, 3]] and all(g[1] is None for g in got)
    assert [x[1] for x in ds.batch(2).unbatch()] == [None] * 4
    assert next(iter(D.from_tensors((np.arange(2), None))))[1] is None
    assert py([x[0] for x in D.from_tensor_slices((np.arange(2), None))]) == [0, 1]
    with pytest.raises(TypeError, match="padded_batch pads tensor components only"):
        ds.padded_batch(2)


def test_map_returning_a_list_is_a_tuple_as_in_tf_data():
    ds = D.range(2).map(lambda x: [x, x + 1])
    assert py(ds) == [(0, 1), (1, 2)]
    assert ds.element_spec == (hr.TensorSpec((), np.int64), hr.TensorSpec((), np.int64))
    inner = next(iter(D.range(1).map(lambda x: ([1, 2], "a"))))
    assert isinstance(inner[0], np.ndarray) and inner[0].dtype == np.int64  # an inner list is a tensor


# ---- silent differences --------------------------------------------------------------------------------
def test_zip_stays_in_step_after_an_error_and_zip_of_one_is_bare():
    def fail_at_2(x):
        if int(x) == 2:
            raise ValueError("bad 2")
        return x

    z = D.zip(D.range(5).map(fail_at_2), D.range(10, 15)).ignore_errors()
    with pytest.warns(hr.IgnoredErrorsWarning):
        assert py(z) == [(0, 10), (1, 11), (3, 13), (4, 14)]
    assert py(D.zip(D.range(2))) == [0, 1] and py(D.zip((D.range(2),))) == [(0,), (1,)]
    assert py(D.zip({"a": D.range(1)})) == [{"a": 0}]
    assert py(D.zip(datasets=(D.range(2), D.range(5, 7)))) == [(0, 5), (1, 6)]
    with pytest.raises(TypeError, match="not both"):
        D.zip(D.range(2), datasets=(D.range(2),))
    with pytest.raises(TypeError, match="a list of datasets is not a structure"):
        D.zip([D.range(2), D.range(2)])


def test_cardinality_rules():
    z = D.zip(D.range(5), D.range(3).filter(lambda x: True))
    assert z.cardinality() == hr.UNKNOWN_CARDINALITY
    with pytest.raises(TypeError, match="unknown"):
        len(z)
    assert D.zip(D.range(5), D.range(3).repeat()).cardinality() == 5
    inf = D.range(5).repeat()
    assert inf.interleave(D.from_tensors, num_parallel_calls=2).cardinality() == hr.INFINITE_CARDINALITY
    assert inf.interleave(D.from_tensors).cardinality() == hr.UNKNOWN_CARDINALITY  # tf.data 2.21 says so too
    assert D.range(5).interleave(D.from_tensors).cardinality() == hr.UNKNOWN_CARDINALITY
    assert D.range(8).batch(4, drop_remainder=True).unbatch().cardinality() == 8
    assert D.range(8).batch(4).unbatch().cardinality() == hr.UNKNOWN_CARDINALITY


def test_interleave_default_cycle_length_is_tf_datas_rule(monkeypatch):
    from headrace._ops import interleave

    monkeypatch.setattr(interleave, "cpu_count", lambda: 8)
    rule = interleave.cycle_length_for
    assert rule(None, None) == 8 and rule(hr.AUTOTUNE, None) == 8
    assert rule(None, 1) == 1 and rule(None, 3) == 3 and rule(None, 20) == 8
    assert rule(None, hr.AUTOTUNE) == 3 and rule(5, hr.AUTOTUNE) == 5
    # cycle_length=None, num_parallel_calls=1: one dataset at a time, as tf.data (not the CPU count)
    ds = D.range(3).interleave(lambda x: D.from_tensors(x).repeat(2), num_parallel_calls=1)
    assert py(ds) == [0, 0, 1, 1, 2, 2]


# ---- errors tf.data raises when the pipeline is built ------------------------------------------------------
def test_structure_errors_are_raised_when_built():
    with pytest.raises(TypeError, match="concatenate: incompatible element specs"):
        D.range(3).concatenate(D.range(3).map(lambda x: np.float32(x)))
    with pytest.raises(TypeError, match="concatenate: incompatible element specs"):
        D.range(3).concatenate(D.range(3).map(lambda x: (x, x)))
    both = D.range(2).map(lambda x: np.zeros(2)).concatenate(D.range(2).map(lambda x: np.zeros(3)))
    assert both.element_spec == hr.TensorSpec([None], np.float64)
    with pytest.raises(TypeError, match=r"a list is not a structure in tf\.data"):
        D.from_generator(lambda: iter([(1, 2)]), output_types=[np.int64, np.int64])
    with pytest.raises(ValueError, match="must provide the padded_shapes argument because component 0 has unknown "
                                         "rank"):
        D.from_generator(lambda: iter([[1]]), output_types=np.int64).padded_batch(2)
    with pytest.raises(ValueError, match="cannot unbatch an input with scalar components"):
        D.range(3).unbatch()
    with pytest.raises(TypeError, match="choose_from_datasets: incompatible element specs"):
        D.choose_from_datasets([D.range(2), D.range(2).map(lambda x: b"s")], D.range(2))


def test_concatenate_checks_a_spec_known_only_from_data_before_yielding_it():
    first = D.from_generator(lambda: iter([1, 2]))  # no output_signature: its spec comes from data
    it = iter(first.concatenate(D.range(2).map(lambda x: b"s")))
    assert py([next(it), next(it)]) == [1, 2]
    with pytest.raises(TypeError, match="incompatible element specs"):
        next(it)


def test_a_traced_spec_that_values_contradict_raises_instead_of_lying():
    ds = D.range(300).map(lambda x: np.zeros(3, np.int32 if x > 100 else np.float64))  # traces see float64
    assert ds.element_spec == hr.TensorSpec([3], np.float64)
    with pytest.raises(ValueError, match=r"does not match the element_spec traced .* output_signature"):
        list(ds)
    assert len(list(D.range(300).map(lambda x: np.zeros(3, np.int32 if x > 100 else np.float64)))) == 300  # unused
    ok = D.range(300).map(lambda x: np.zeros(3, np.int32 if x > 100 else np.float64),
                          output_signature=hr.TensorSpec([3], np.float64))
    assert {next(iter(ok.skip(200))).dtype} == {np.dtype(np.float64)}
    sizes = D.range(300).map(lambda x: np.zeros(7 if x > 100 else 3))  # a size the traces miss: spec says (3,)
    assert sizes.element_spec == hr.TensorSpec([3], np.float64)  # (tf.data: (None,); docs/migration.md lists this)
    assert next(iter(sizes.padded_batch(300))).shape == (300, 7)  # run time pads to the batch's largest


def test_a_second_concurrent_cache_writer_raises(tmp_path):
    from headrace._memory import process_budget

    accounts = len(process_budget()._accounts)
    ds = D.range(5).cache(str(tmp_path / "c"))
    first = iter(ds)
    assert next(first) == 0
    with pytest.raises(FileExistsError, match="another iterator is writing this cache file"):
        next(iter(ds))
    first.close()
    # the refused iterator left no account in the shared budget (one shrank every later stage's share)
    assert len(process_budget()._accounts) == accounts
    assert py(ds) == [0, 1, 2, 3, 4] and py(ds) == [0, 1, 2, 3, 4]  # filled by the second pass, then read
    assert sorted(os.listdir(tmp_path)) == ["c.hrcache"]


def test_a_stale_cache_lock_is_taken_over(tmp_path):
    (tmp_path / "c.hrcache.lock").write_text("999999999")
    assert py(D.range(3).cache(str(tmp_path / "c"))) == [0, 1, 2]


# ---- element_spec --------------------------------------------------------------------------------------
def test_element_spec_through_transformations_and_repr():
    TS = hr.TensorSpec
    ds = D.from_tensor_slices({"x": np.zeros((10, 3), np.float32), "y": np.arange(10)})
    assert ds.element_spec == {"x": TS([3], np.float32), "y": TS([], np.int64)}
    assert ds.batch(4).element_spec == {"x": TS([None, 3], np.float32), "y": TS([None], np.int64)}
    assert ds.batch(4, drop_remainder=True).element_spec["x"] == TS([4, 3], np.float32)
    assert ds.batch(4).unbatch().element_spec == ds.element_spec
    assert ds.map(lambda d: d["x"] * 2).element_spec == TS([3], np.float32)
    varlen = D.range(5).map(lambda x: np.arange(x))
    assert varlen.element_spec == TS([None], np.int64)
    assert varlen.padded_batch(2).element_spec == TS([None, None], np.int64)
    assert varlen.padded_batch(2, padded_shapes=[7], drop_remainder=True).element_spec == TS([2, 7], np.int64)
    assert "element_spec=TensorSpec(shape=(None,), dtype=int64, name=None)" in repr(varlen)
    assert D.range(3).shuffle(2).prefetch(1).take(2).element_spec == TS([], np.int64)
    sig = D.range(3).map(lambda x: [x], output_signature=TS([1], np.int32))
    assert sig.element_spec == TS([1], np.int32) and py(sig) == [[0], [1], [2]] and next(iter(sig)).dtype == np.int32
    untraceable = D.range(3).map(lambda x: np.zeros(int(x) + 1) if int(x) not in (1, 2) else 1 / 0)
    with pytest.raises(ZeroDivisionError):  # the traces raise: its spec is read from the first element
        D.range(1, 3).map(untraceable._node.fn).element_spec  # noqa: B018 - which raises too
    assert untraceable.element_spec == hr.TensorSpec([1], np.float64)  # element 0, fully defined
    assert D.from_generator(lambda: iter([np.zeros(2)])).element_spec == TS([2], np.float64)
    with pytest.raises(ValueError, match="produced no element"):
        D.from_generator(lambda: iter([])).element_spec  # noqa: B018
