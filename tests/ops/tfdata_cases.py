"""Pipelines run through both tf.data and headrace by ``test_tfdata_differential.py``.

This module imports neither TensorFlow nor headrace: the TensorFlow side (``tfdata_runner.py``, run in a
separate virtual environment) and the headrace side evaluate the same ``code`` strings, with ``D`` bound to
their ``Dataset``, ``S(shape, dtype)`` to their ``TensorSpec``, and ``ops`` to a few tensor functions
(``ops.fill`` is ``tf.fill`` there, ``np.full`` here). Most cases are ported from TensorFlow's tf.data kernel
tests (``tensorflow/python/data/kernel_tests/<name>_test.py``; the case name starts with that file's name),
the rest from issue 11's observed differences.

A case is ``(name, code, options)``; options: ``order="sorted"`` compares elements as a multiset (random
orders differ by design), ``spec=False`` / ``card=False`` skip the element_spec / cardinality comparison,
``values=False`` compares only the number of elements and their structure, dtypes and shapes,
``python_ints=True`` marks a case whose Python ``int`` literals become int32 in tf.data and int64 in headrace
(docs/migration.md's deliberate difference: integers are 64-bit everywhere); int32 there equals int64 here.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np

Case = tuple[str, str, dict[str, Any]]


# ---- encoding (identical on both sides) ---------------------------------------------------------------------
def encode(x: Any) -> Any:
    """An element as JSON: structure, dtype name, shape and values (strings as base64, NaN as a string)."""
    if isinstance(x, dict):
        return {"dict": [[k, encode(x[k])] for k in sorted(x)]}
    if isinstance(x, tuple | list) and not isinstance(x, np.ndarray):
        return {"tuple": [encode(v) for v in x]}
    if x is None:
        return {"none": 0}
    arr = np.asarray(x)
    if arr.dtype == object and arr.size and not isinstance(arr.reshape(-1)[0], bytes | np.bytes_ | str):
        return {"ragged": [encode(v) for v in arr]}  # rows of a ragged batch
    if arr.dtype == object or arr.dtype.kind in "SU":
        flat = [v.encode() if isinstance(v, str) else bytes(v) for v in arr.reshape(-1).tolist()]
        return {"tensor": ["string", list(arr.shape), [base64.b64encode(v).decode() for v in flat]]}
    vals = arr.reshape(-1).tolist()
    if arr.dtype.kind == "f":
        vals = [v if math.isfinite(v) else repr(v) for v in vals]
    return {"tensor": [arr.dtype.name, list(arr.shape), vals]}


def encode_spec(spec: Any) -> Any:
    """An element_spec as JSON, from tf.data's or headrace's spec classes (matched by class name)."""
    if isinstance(spec, dict):
        return {"dict": [[k, encode_spec(spec[k])] for k in sorted(spec)]}
    if isinstance(spec, tuple | list):
        return {"tuple": [encode_spec(v) for v in spec]}
    kind = type(spec).__name__
    if kind == "NoneTensorSpec":
        return {"none": 0}
    if kind == "DatasetSpec":
        return {"dataset": encode_spec(spec.element_spec)}
    shape = None if spec.shape.rank is None else list(spec.shape.as_list())
    dtype = getattr(spec.dtype, "name", str(spec.dtype))
    return {kind: ["string" if dtype == "object" else dtype, shape]}


def run_case(code: str, namespace: dict[str, Any], limit: int = 2000) -> dict[str, Any]:
    """Build and iterate one pipeline: its element_spec, cardinality and elements, or where it raised."""
    try:
        ds = eval(code, dict(namespace))
    except Exception as e:
        return {"error": "build", "type": type(e).__name__, "message": str(e)[:300]}
    out: dict[str, Any] = {"spec": encode_spec(ds.element_spec), "card": int(ds.cardinality())}
    elements = []
    try:
        for x in ds.as_numpy_iterator():
            elements.append(encode(x))
            if len(elements) >= limit:
                break
    except Exception as e:
        out.update(error="iterate", type=type(e).__name__, message=str(e)[:300])
    out["elements"] = elements
    return out


# ---- the cases ------------------------------------------------------------------------------------------
SEQ_LENS = np.random.RandomState(11).randint(20, size=34).astype(np.int32).tolist()
INTERLEAVE_PARAMS = [  # interleave_test.testInterleaveDataset: input values, cycle, block, num_parallel_calls
    ([4, 5, 6], 1, 3, None), ([4, 5, 6], 1, 3, 1), ([4, 5, 6], 2, 1, None), ([4, 5, 6], 2, 1, 1),
    ([4, 5, 6], 2, 1, 2), ([4, 5, 6], 2, 3, None), ([4, 5, 6], 2, 3, 1), ([4, 5, 6], 2, 3, 2),
    ([4, 5, 6], 7, 2, None), ([4, 5, 6], 7, 2, 1), ([4, 5, 6], 7, 2, 3), ([4, 5, 6], 7, 2, 5),
    ([4, 5, 6], 7, 2, 7), ([], 2, 3, None), ([0, 0, 0], 2, 3, None), ([4, 0, 6], 2, 3, None),
    ([4, 0, 6], 2, 3, 1), ([4, 0, 6], 2, 3, 2),
]
COMPONENTS = ("(np.arange(7), np.array([[1, 2, 3]]) * np.arange(7)[:, None], np.array(37.0) * np.arange(7))")


def _cases() -> list[Case]:
    c: list[Case] = []

    def add(name: str, code: str, **opts: Any) -> None:
        c.append((name, code, opts))

    # range_test
    for args in ["5", "2, 5", "2, 5, 2", "5, 2, -1", "0", "5, 2", "-3, 3, 2", "np.int64(4)"]:
        add(f"range_test({args})", f"D.range({args})")
    add("range_test(output_type)", "D.range(1, 4, output_type='int32')")
    # from_tensors_test / from_tensor_slices_test
    add("from_tensors_test.tuple", "D.from_tensors((np.array(1), np.array([1, 2, 3]), np.array(37.0)))")
    add("from_tensors_test.dict", "D.from_tensors({'a': np.array([1.5, 2.5], np.float32), 'b': b'x'})")
    add("from_tensors_test.nested", "D.from_tensors(((np.array(1), (np.array([2, 3]),)), {'k': np.array(4)}))")
    add("from_tensors_test.list_is_tensor", "D.from_tensors([1, 2, 3])", python_ints=True)
    add("from_tensors_test.strings", "D.from_tensors(('a', ['b', 'cd']))")
    add("from_tensors_test.none", "D.from_tensors((np.array([1, 2]), None))")
    add("from_tensor_slices_test.basic", f"D.from_tensor_slices({COMPONENTS})")
    add("from_tensor_slices_test.dict", "D.from_tensor_slices({'a': [1, 2, 3], 'b': [[1.0], [2.0], [3.0]]})",
        python_ints=True)
    add("from_tensor_slices_test.strings", "D.from_tensor_slices((['a', 'b'], [[1, 2], [3, 4]]))", python_ints=True)
    add("from_tensor_slices_test.floats", "D.from_tensor_slices([1.5, 2.5, 3.5])")
    add("from_tensor_slices_test.empty", "D.from_tensor_slices(np.zeros((0, 3), np.float32))")
    # batch_test.testBasic (count x batch_size x drop_remainder x num_parallel_calls)
    for count in (0, 28):
        for bs in (14, 15):
            for drop in (True, False):
                for npc in (None, 1, 2, 4):
                    add(f"batch_test.testBasic({count},{bs},{drop},{npc})",
                        f"D.from_tensor_slices({COMPONENTS}).map(lambda x, y, z: (ops.square(x), ops.square(y), "
                        f"ops.square(z))).repeat({count}).batch({bs}, {drop}, {npc})")
    add("batch_test.testNoneComponent", "D.range(10).map(lambda x: (x, None)).batch(10).map(lambda x, y: x)")
    add("batch_test.none_kept", "D.range(5).map(lambda x: (x, None)).batch(2)")
    add("batch_test.testShapeError", "D.from_generator(lambda: iter([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], "
        "[7.0, 8.0, 9.0, 10.0]]), 'float32', output_shapes=[None]).batch(3)")
    add("batch_test.strings", "D.from_tensor_slices(['a', 'bb', 'ccc']).batch(2)")
    add("batch_test.dict", "D.range(5).map(lambda x: {'a': x, 'b': ops.fill([2], x)}).batch(2)")
    add("batch_test.nested_batch", "D.range(12).batch(3).batch(2)")
    # padded_batch_test
    for count in (32, 34):
        for shapes in ("[None]", "[25]"):
            for drop in (True, False):
                add(f"padded_batch_test.testPaddedBatchDataset({count},{shapes},{drop})",
                    f"D.from_tensor_slices(np.array({SEQ_LENS[:count]}, np.int32)).map(lambda x: ops.fill([x], x))"
                    f".padded_batch(4, padded_shapes={shapes}, drop_remainder={drop})")
    add("padded_batch_test.testPaddedBatchShortPadding",
        "D.from_tensor_slices(np.array([6, 5, 5, 5, 5], np.int32)).map(lambda x: ops.fill([x], x))"
        ".padded_batch(4, padded_shapes=[5])")
    add("padded_batch_test.testPaddedBatchEmptyTensors",
        "D.from_tensor_slices(np.array([0, 0, 0, 0], np.int32)).map(lambda x: ops.fill([x], x))"
        ".padded_batch(4, padded_shapes=[-1])")
    add("padded_batch_test.testDefaultPaddedShapes",
        "D.from_tensor_slices(np.array([1, 2, 3, 4], np.int32)).map(lambda x: ops.fill([x], x)).padded_batch(2)")
    add("padded_batch_test.testNestedDefaultPaddedShapes",
        "D.from_tensor_slices(np.array([1, 2, 3, 4], np.int32)).map(lambda x: (x, ops.fill([x], x)))"
        ".padded_batch(2)")
    for pv in ("(-1, '<end>', {'structure': ''})", "(-1, '<end>', None)"):
        add(f"padded_batch_test.testPaddedBatchDatasetNonDefaultPadding({pv})",
            f"D.from_tensor_slices(np.array({SEQ_LENS[:32]}, np.int32)).map(lambda x: (ops.fill([x], x), "
            "ops.as_string(ops.fill([x], x)), {'structure': ops.as_string(ops.fill([x], x))}))"
            f".padded_batch(4, padded_shapes=([-1], [-1], {{'structure': [-1]}}), padding_values={pv})")
    add("padded_batch_test.testPaddedBatchDatasetUnicode",
        "D.from_generator(lambda: iter([(['Простой', 'тест', 'юникода'], [0, 1, 2, 3]), "
        "(['никогда', 'не', 'бывает', 'простым'], [0, 1, 2, 3])]), ('string', 'int32'), ([None], [None]))"
        ".padded_batch(2, padded_shapes=([None], [None]), padding_values=('', 0))")
    add("padded_batch_test.testPaddedBatchShapeErrorWrongRank", "D.range(10).padded_batch(5, padded_shapes=[1])")
    add("padded_batch_test.testPaddedBatchShapeErrorTooSmall",
        "D.from_tensors([1, 2, 3]).padded_batch(5, padded_shapes=[1])")
    add("padded_batch_test.testPaddedBatchShapeErrorDefaultShapeWithUnknownRank",
        "D.from_generator(lambda: iter([1, 2, 3]), output_types='int32').padded_batch(2)")
    add("padded_batch_test.testDefaultPaddedValueShapes",
        "D.zip((D.from_tensor_slices(np.array([1, 2, 3, 4], np.int32)).map(lambda x: ops.fill([x], x)), "
        "D.from_tensor_slices(np.array([1, 2, 3, 4], np.int32)).map(lambda x: ops.fill([x], x))))"
        ".padded_batch(batch_size=2, padding_values=-1)")
    add("padded_batch_test.scalars", "D.range(5).padded_batch(2)")
    add("padded_batch_test.2d", "D.range(1, 5).map(lambda x: ops.fill([x, 2], x)).padded_batch(3, "
        "padded_shapes=[None, 3], padding_values=np.int64(-1))")
    # interleave_test.testInterleaveDataset
    for vals, cycle, block, npc in INTERLEAVE_PARAMS:
        add(f"interleave_test.testInterleaveDataset({vals},{cycle},{block},{npc})",
            f"D.from_tensor_slices(np.array({vals}, np.int64)).repeat(2).interleave(lambda x: "
            f"D.from_tensors(x).repeat(x), {cycle}, {block}, {npc})")
    for npc in (None, 1, 2):
        add(f"interleave_test.testInterleaveDatasetError({npc})",
            "D.from_tensor_slices(np.array([1.0, np.nan, 2.0, np.nan, 3.0], np.float32))"
            f".map(lambda x: ops.check_numerics(x)).interleave(D.from_tensors, 2, 1, {npc})")
    for npc in (None, 2):  # an error inside a slot: the parallel interleave's turn passes, the sequential's not
        for block in (1, 2):
            add(f"interleave.error_in_a_slot_then_ignore_errors({npc},{block})",
                "D.from_tensor_slices(np.array([[1.0, np.nan, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]], np.float32))"
                f".interleave(lambda row: D.from_tensor_slices(row).map(lambda x: ops.check_numerics(x)), 2, {block}, "
                f"{npc}).ignore_errors()")
    add("interleave_test.cycle_none_npc_1", "D.range(4).interleave(lambda x: D.from_tensors(x).repeat(2), "
        "num_parallel_calls=1)")
    add("interleave_test.infinite_parallel", "D.range(5).repeat().interleave(lambda x: D.from_tensors(x), "
        "cycle_length=2, num_parallel_calls=2).take(7)")
    add("flat_map_test.testFlatMapDataset", "D.from_tensor_slices(np.array([0, 1, 2, 3], np.int64)).flat_map("
        "lambda x: D.from_tensors(x).repeat(x))")
    add("flat_map_test.repeat_from_element", "D.range(1, 4).flat_map(lambda x: D.from_tensors(x).repeat(x))")
    add("flat_map_test.enumerate_from_element", "D.range(3).flat_map(lambda x: D.range(x).enumerate(start=x))")
    add("flat_map_test.nested", "D.range(3).flat_map(lambda x: D.range(x).flat_map(lambda y: "
        "D.from_tensors((x, y))))")
    add("flat_map_test.slices", "D.from_tensors(np.arange(12).reshape(3, 4)).flat_map(D.from_tensor_slices)")
    # map_test
    add("map_test.tuple_unpacked", "D.from_tensor_slices(([1, 2], [3, 4])).map(lambda a, b: a * 10 + b)",
        python_ints=True)
    add("map_test.dict", "D.from_tensor_slices({'a': [1, 2], 'b': [3, 4]}).map(lambda d: d['a'] + d['b'])",
        python_ints=True)
    add("map_test.returns_list", "D.range(3).map(lambda x: [x, x + 1])")
    add("map_test.returns_none", "D.range(3).map(lambda x: (x, None))")
    add("map_test.returns_dict", "D.range(3).map(lambda x: {'x': x, 'y': ops.cast(x, 'float32') * 0.5})")
    add("map_test.python_constant", "D.range(3).map(lambda x: (x, 1.5, 'a', True))")
    add("map_test.parallel", "D.range(50).map(lambda x: x * x, num_parallel_calls=4)")
    add("map_test.parallel_autotune", "D.range(50).map(lambda x: x * 2, num_parallel_calls=AUTOTUNE, "
        "deterministic=False)", order="sorted")
    add("map_test.cast", "D.range(4).map(lambda x: ops.cast(x, 'float64') / 2)")
    add("map_test.string", "D.range(3).map(lambda x: ops.as_string(x))")
    add("map_test.error_stops", "D.from_tensor_slices(np.array([1.0, 2.0, np.nan, 4.0], np.float32))"
        ".map(lambda x: ops.check_numerics(x))")
    # filter_test
    add("filter_test.even", "D.range(10).filter(lambda x: x % 2 == 0)")
    add("filter_test.tuple", "D.from_tensor_slices(([1, 2, 3, 4], [5, 6, 7, 8])).filter(lambda a, b: a > 2)",
        python_ints=True)
    add("filter_test.dict", "D.range(6).map(lambda x: {'v': x}).filter(lambda d: d['v'] < 3)")
    add("filter_test.none_pass", "D.range(5).filter(lambda x: x > 10)")
    # zip_test
    add("zip_test.tuple", "D.zip((D.range(3), D.range(10, 15)))")
    add("zip_test.args", "D.zip(D.range(3), D.from_tensor_slices(['a', 'b', 'c', 'd']))")
    add("zip_test.dict", "D.zip({'a': D.range(3), 'b': D.range(3).map(lambda x: ops.cast(x, 'float32'))})")
    add("zip_test.nested", "D.zip((D.range(2), (D.range(3), D.range(4))))")
    add("zip_test.one", "D.zip(D.range(3))")
    add("zip_test.one_tuple", "D.zip((D.range(3),))")
    add("zip_test.unknown_card", "D.zip((D.range(5), D.range(3).filter(lambda x: x >= 0)))")
    add("zip_test.infinite", "D.zip((D.range(5), D.range(3).repeat()))")
    add("zip_test.error_in_step", "D.zip((D.from_tensor_slices(np.array([1.0, np.nan, 3.0], np.float32))"
        ".map(lambda x: ops.check_numerics(x)), D.range(10, 13))).ignore_errors()")
    # concatenate_test
    add("concatenate_test.basic", "D.range(3).concatenate(D.range(10, 12))")
    add("concatenate_test.different_shapes", "D.from_tensor_slices(np.zeros((2, 3))).concatenate("
        "D.from_tensor_slices(np.ones((2, 4))))")
    add("concatenate_test.dtypes_differ", "D.range(3).concatenate(D.range(3).map(lambda x: ops.cast(x, 'float32')))")
    add("concatenate_test.structure_differs", "D.range(3).concatenate(D.range(3).map(lambda x: (x, x)))")
    add("concatenate_test.tuples", "D.from_tensor_slices(([1], ['a'])).concatenate(D.from_tensor_slices(([2, 3], "
        "['bb', 'c'])))", python_ints=True)
    add("concatenate_test.infinite", "D.range(2).concatenate(D.range(3).repeat()).take(6)")
    # repeat_test / take_test / skip_test
    for count in (0, 1, 3, -1, -2, None):
        add(f"repeat_test({count})", f"D.range(3).repeat({count}).take(10)")
    add("repeat_test.numpy_count", "D.range(2).repeat(np.int64(3))")
    add("repeat_test.empty_forever", "D.range(0).repeat()")
    for count in (-1, -5, 0, 2, 5, 20):
        # take(-5).cardinality() is -5 in tf.data 2.21 (its count, not a cardinality); headrace says 10
        add(f"take_test({count})", f"D.range(10).take({count})", card=count >= -1)
        add(f"skip_test({count})", f"D.range(10).skip({count})")
    add("take_test.infinite", "D.range(3).repeat().take(7)")
    add("skip_test.infinite", "D.range(3).repeat().skip(2).take(4)")
    # shard_test
    for n, i in ((5, 2), (2, 0), (10, 9), (1, 0), (7, 3)):
        add(f"shard_test({n},{i})", f"D.range(10).shard({n}, {i})")
    add("shard_test.infinite", "D.range(10).repeat().shard(3, 1).take(5)")
    # enumerate_test
    add("enumerate_test.basic", "D.from_tensor_slices((['a', 'b'], [[1, 2], [3, 4]])).enumerate(start=7)",
        python_ints=True)
    add("enumerate_test.numpy_start", "D.range(3).enumerate(start=np.int64(20))")
    # unbatch_test
    add("unbatch_test.basic", "D.range(10).batch(3).unbatch()")
    add("unbatch_test.drop", "D.range(10).batch(3, drop_remainder=True).unbatch()")
    add("unbatch_test.tuple", "D.from_tensor_slices((np.arange(12).reshape(4, 3), np.arange(4))).batch(2).unbatch()")
    add("unbatch_test.strings", "D.from_tensors(['a', 'b', 'c']).unbatch()")
    add("unbatch_test.empty_rows", "D.from_tensors(np.zeros((0, 3))).unbatch()")
    add("unbatch_test.scalar_error", "D.range(3).unbatch()")
    add("unbatch_test.varlen", "D.from_generator(lambda: iter([[1, 2, 3], [1, 2], [1, 2, 3, 4]]), "
        "output_signature=S([None], 'int64')).unbatch()")
    # take_while_test
    add("take_while_test.basic", "D.range(10).take_while(lambda x: x < 4)")
    add("take_while_test.tuple", "D.from_tensor_slices(([1, 2, 3], [4, 5, 6])).take_while(lambda a, b: a + b < 8)",
        python_ints=True)
    add("take_while_test.never", "D.range(10).take_while(lambda x: x > 4)")
    # shuffle_test (orders differ by design: multisets, specs and cardinalities compared)
    add("shuffle_test.basic", "D.range(20).shuffle(5, seed=1)", order="sorted")
    add("shuffle_test.repeat", "D.range(5).shuffle(5, seed=2).repeat(3)", order="sorted")
    add("shuffle_test.batch", "D.range(8).shuffle(8, seed=3).batch(4, drop_remainder=True)", values=False)
    # prefetch_test / cache_test
    for bs in (0, 1, 5, "AUTOTUNE", None):
        add(f"prefetch_test({bs})", f"D.range(7).prefetch({bs})")
    add("cache_test.memory", "D.range(5).map(lambda x: x * 3).cache().repeat(2)")
    # sample_from_datasets_test / choose_from_datasets_test
    add("sample_from_datasets_test.zero_weights", "D.sample_from_datasets([D.range(3), D.range(3)], "
        "weights=[0.0, 0.0])")
    add("sample_from_datasets_test.one_dataset", "D.sample_from_datasets([D.range(3)], weights=[0.5])")
    add("sample_from_datasets_test.int_weights", "D.sample_from_datasets([D.range(3), D.range(3)], weights=[1, 1])")
    add("sample_from_datasets_test.int_and_float", "D.sample_from_datasets([D.range(3), "
        "D.range(3).map(lambda x: ops.cast(x, 'float32'))])")
    add("sample_from_datasets_test.multiset", "D.sample_from_datasets([D.range(10), D.range(100, 110)], seed=5)",
        order="sorted", card=False)
    add("sample_from_datasets_test.weight_one_side", "D.sample_from_datasets([D.range(5), D.range(100, 105)], "
        "weights=[1.0, 0.0], seed=1)", card=False)
    add("choose_from_datasets_test.basic", "D.choose_from_datasets([D.from_tensors('foo').repeat(), "
        "D.from_tensors('bar').repeat(), D.from_tensors('baz').repeat()], D.range(3).repeat(3))")
    add("choose_from_datasets_test.exhausted", "D.choose_from_datasets([D.range(2), D.range(10, 12)], "
        "D.from_tensor_slices(np.array([0, 0, 0, 1, 1], np.int64)))")
    # generator
    add("from_generator_test.signature", "D.from_generator(lambda: iter([(1, 'a'), (2, 'bb')]), "
        "output_signature=(S([], 'int32'), S([], 'string')))")
    add("from_generator_test.string_vectors", "D.from_generator(lambda: iter([['a', 'bc'], ['d']]), "
        "output_signature=S([None], 'string'))")
    add("from_generator_test.legacy_tuple", "D.from_generator(lambda: iter([(1, [2.0]), (3, [4.0, 5.0])]), "
        "output_types=('int64', 'float32'), output_shapes=([], [None]))")
    add("from_generator_test.legacy_list_types", "D.from_generator(lambda: iter([(1, 2)]), "
        "output_types=['int64', 'int64'])")
    add("from_generator_test.args", "D.from_generator(lambda n: iter(range(n)), args=(3,), "
        "output_signature=S([], 'int64'))")
    # cardinality_test
    add("cardinality_test.filter", "D.range(5).filter(lambda x: x > 1)")
    add("cardinality_test.batch_drop", "D.range(10).batch(3, drop_remainder=True)")
    add("cardinality_test.repeat_infinite_take", "D.range(3).repeat().take(5)")
    add("cardinality_test.flat_map", "D.range(3).flat_map(lambda x: D.from_tensors(x))")
    add("cardinality_test.interleave_infinite", "D.range(5).repeat().interleave(lambda x: D.from_tensors(x)).take(3)")
    add("cardinality_test.empty_repeat", "D.range(0).repeat(5)")
    add("cardinality_test.skip_past", "D.range(5).skip(10)")
    # window_test (windows compared through flat_map, as the kernel tests do)
    for size, shift, stride, drop in ((3, None, 1, False), (3, 2, 1, False), (3, 1, 2, True), (2, 5, 1, False),
                                      (2, 5, 1, True), (4, 1, 1, True), (5, 3, 2, False), (1, 1, 1, False)):
        add(f"window_test({size},{shift},{stride},{drop})",
            f"D.range(11).window({size}, {shift}, {stride}, {drop}).flat_map(lambda w: w.batch({size}))",
            card=False)
        add(f"window_test.card({size},{shift},{stride},{drop})",
            f"D.range(11).window({size}, {shift}, {stride}, {drop}).map(lambda w: np.int64(0))", spec=False)
    add("window_test.structure", "D.zip((D.range(5), D.from_tensor_slices(['a', 'b', 'c', 'd', 'e']))).window(2)"
        ".flat_map(lambda a, b: D.zip((a.batch(2), b.batch(2))))", card=False)
    add("window_test.empty", "D.range(0).window(3).flat_map(lambda w: w.batch(3))", card=False)
    # group_by_window_test / bucket_by_sequence_length_test
    add("group_by_window_test.simple", "D.range(10).group_by_window(lambda x: x % 2, lambda k, w: w.batch(3), "
        "window_size=3)")
    add("group_by_window_test.window_size_func", "D.range(12).group_by_window(lambda x: x % 3, "
        "lambda k, w: w.batch(5), window_size_func=lambda k: k + 1)")
    add("group_by_window_test.key_output", "D.range(6).group_by_window(lambda x: x // 2, "
        "lambda k, w: D.from_tensors(k), window_size=2)")
    add("group_by_window_test.empty", "D.range(0).group_by_window(lambda x: x, lambda k, w: w.batch(2), "
        "window_size=2)")
    for pad, drop in ((False, False), (True, False), (False, True)):
        add(f"bucket_by_sequence_length_test({pad},{drop})",
            "D.range(1, 5).repeat(3).map(lambda x: ops.fill([x], x)).bucket_by_sequence_length("
            f"lambda x: ops.shape0(x), [3, 5], [2, 2, 2], pad_to_bucket_boundary={pad}, drop_remainder={drop})")
    add("bucket_by_sequence_length_test.tuple", "D.range(1, 7).map(lambda x: (ops.fill([x], x), x))"
        ".bucket_by_sequence_length(lambda x, y: ops.shape0(x), [2, 4], [3, 2, 1])")
    # scan_test / reduce_test / get_single_element_test (terminal results wrapped in from_tensors)
    add("scan_test.running_sum", "D.range(6).scan(np.int64(0), lambda s, x: (s + x, s * 2))")
    add("scan_test.tuple_state", "D.range(5).scan((np.int64(0), np.int64(1)), lambda s, x: ((s[1], s[0] + s[1]), "
        "s[0]))")
    add("scan_test.tuple_element_is_one_argument", "D.from_tensor_slices((np.arange(4), np.arange(4) * 10))"
        ".scan(np.int64(0), lambda s, ab: (s + ab[0], s + ab[1]))")
    add("reduce_test.sum", "D.from_tensors(D.range(10).reduce(np.int64(0), lambda s, x: s + x))")
    add("reduce_test.empty", "D.from_tensors(D.range(0).reduce(np.int64(5), lambda s, x: s + x))")
    add("reduce_test.tuple", "D.from_tensors(D.range(5).reduce((np.int64(0), np.int64(1)), "
        "lambda s, x: (s[0] + x, s[1] * (x + 1))))")
    add("get_single_element_test.one", "D.from_tensors(D.range(3, 4).get_single_element())")
    add("get_single_element_test.empty", "D.from_tensors(D.range(0).get_single_element())")
    add("get_single_element_test.two", "D.from_tensors(D.range(2).get_single_element())")
    # unique_test / rebatch_test / ragged_batch_test / counter_test / random_test
    add("unique_test.int32", "D.from_tensor_slices(np.array([1, 3, 1, 2, 3, 5], np.int32)).unique()")
    add("unique_test.int64", "D.from_tensor_slices(np.array([7, 7, 7, 1], np.int64)).unique()")
    add("unique_test.strings", "D.from_tensor_slices(['a', 'b', 'a', 'c', 'b']).unique()")
    add("unique_test.float_error", "D.from_tensor_slices(np.array([1.0], np.float32)).unique()")
    add("rebatch_test.basic", "D.range(8).batch(4).rebatch(3)")
    add("rebatch_test.drop", "D.range(8).batch(4, drop_remainder=True).rebatch(3, drop_remainder=True)", card=False)
    add("ragged_batch_test.ragged", "D.range(1, 6).map(lambda x: ops.fill([x, 2], x)).ragged_batch(2)")
    add("ragged_batch_test.dense", "D.range(4).map(lambda x: ops.fill([2], x)).ragged_batch(3)")
    add("ragged_batch_test.mixed", "D.range(1, 4).map(lambda x: (x, ops.range(x))).ragged_batch(2)")
    add("ragged_batch_test.scalars_drop", "D.range(5).ragged_batch(2, drop_remainder=True)")
    add("counter_test.basic", "D.counter(3, 2).take(4)")
    add("counter_test.negative", "D.counter(0, -3).take(3)")
    add("counter_test.card", "D.counter().skip(5)")  # infinite: the first 2000 elements compared
    add("random_test.spec_and_card", "D.random(seed=4).map(lambda x: np.int64(0)).take(3)")
    return c


CASES: list[Case] = _cases()
