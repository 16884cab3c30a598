"""Outputs of the examples in tf.data's own documentation (tf.data.Dataset docstrings), element for element.

Where tf.data's default dtype differs (a Python int literal is int32 in TensorFlow, int64 here, as the
issue specifies), the values are compared and the dtype is checked against headrace's documented rule.
"""

from __future__ import annotations

import numpy as np
import pytest

import headrace as hr
from tests.conftest import py

D = hr.Dataset


def test_range_examples():
    assert py(list(D.range(5))) == [0, 1, 2, 3, 4]
    assert py(list(D.range(2, 5))) == [2, 3, 4]
    assert py(list(D.range(1, 5, 2))) == [1, 3]
    assert py(list(D.range(1, 5, -2))) == []
    assert py(list(D.range(5, 1))) == []
    assert py(list(D.range(5, 1, -2))) == [5, 3]
    assert all(type(x) is np.int64 for x in D.range(3))
    assert [x.dtype for x in D.range(1, 5, 2, dtype=np.int32)] == [np.int32, np.int32]


def test_from_tensor_slices_examples():
    assert py(list(D.from_tensor_slices([1, 2, 3]))) == [1, 2, 3]
    assert py(list(D.from_tensor_slices([[1, 2], [3, 4]]))) == [[1, 2], [3, 4]]
    assert py(list(D.from_tensor_slices(([1, 2], [3, 4], [5, 6])))) == [(1, 3, 5), (2, 4, 6)]
    assert py(list(D.from_tensor_slices({"a": [1, 2], "b": [3, 4]}))) == [{"a": 1, "b": 3}, {"a": 2, "b": 4}]
    features, labels = [[1, 3], [2, 1], [3, 3]], ["A", "B", "A"]
    got = list(D.from_tensor_slices((features, labels)))
    assert py(got) == [([1, 3], b"A"), ([2, 1], b"B"), ([3, 3], b"A")]
    assert got[0][0].dtype == np.int64 and type(got[0][1]) is bytes
    assert [x.dtype for x in D.from_tensor_slices([1.0, 2.0])] == [np.float32, np.float32]
    assert [x.dtype for x in D.from_tensor_slices(np.array([1.0, 2.0]))] == [np.float64, np.float64]


def test_from_tensors_example():
    got = list(D.from_tensors([1, 2, 3]))
    assert len(got) == 1 and got[0].tolist() == [1, 2, 3] and got[0].dtype == np.int64
    got = list(D.from_tensors(([1, 2, 3], "A")))
    assert py(got) == [([1, 2, 3], b"A")]


def test_map_filter_examples():
    assert py(list(D.range(1, 6).map(lambda x: x + 1))) == [2, 3, 4, 5, 6]
    elements = [(1, "foo"), (2, "bar"), (3, "baz")]
    ds = D.from_generator(lambda: elements, output_signature=(hr.TensorSpec((), "int32"), hr.TensorSpec((), "string")))
    assert py(list(ds.map(lambda x, y: x))) == [1, 2, 3]
    got = list(D.from_tensor_slices([1, 2, 3]).filter(lambda x: x < 3))
    assert py(got) == [1, 2]
    assert py(list(D.from_tensor_slices([1, 2, 3]).filter(lambda x: x % 2 == 1))) == [1, 3]


def test_batch_examples():
    assert py(list(D.range(8).batch(3))) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert py(list(D.range(8).batch(3, drop_remainder=True))) == [[0, 1, 2], [3, 4, 5]]
    assert py(list(D.range(8).batch(3, num_parallel_calls=2))) == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_padded_batch_examples():
    a = D.range(1, 5, dtype=np.int32).map(lambda x: np.full([int(x)], x))
    assert py(list(a.padded_batch(2))) == [[[1, 0], [2, 2]], [[3, 3, 3, 0], [4, 4, 4, 4]]]
    assert py(list(a.padded_batch(2, padded_shapes=5))) == [[[1, 0, 0, 0, 0], [2, 2, 0, 0, 0]],
                                                            [[3, 3, 3, 0, 0], [4, 4, 4, 4, 0]]]
    assert py(list(a.padded_batch(2, padded_shapes=5, padding_values=-1))) == [
        [[1, -1, -1, -1, -1], [2, 2, -1, -1, -1]], [[3, 3, 3, -1, -1], [4, 4, 4, 4, -1]]]
    elements = [([1, 2, 3], [10]), ([4, 5], [11, 12])]
    ds = D.from_generator(lambda: iter(elements), output_types=(np.int32, np.int32))
    got = list(ds.padded_batch(2, padded_shapes=([4], [None]), padding_values=(-1, 100)))
    assert py(got) == [([[1, 2, 3, -1], [4, 5, -1, -1]], [[10, 100], [11, 12]])]
    assert got[0][0].dtype == np.int32


def test_unbatch_example():
    elements = [[1, 2, 3], [1, 2], [1, 2, 3, 4]]
    ds = D.from_generator(lambda: elements, output_signature=hr.TensorSpec([None], np.int64))
    assert py(list(ds.unbatch())) == [1, 2, 3, 1, 2, 1, 2, 3, 4]


def test_interleave_examples():
    ds = D.range(1, 6).interleave(lambda x: D.from_tensors(x).repeat(6), cycle_length=2, block_length=4)
    expected = [1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5]
    assert py(list(ds)) == expected
    par = D.range(1, 6).interleave(lambda x: D.from_tensors(x).repeat(6), cycle_length=2, block_length=4,
                                   num_parallel_calls=hr.AUTOTUNE, deterministic=True)
    assert py(list(par)) == expected


def test_flat_map_example():
    ds = D.from_tensor_slices([[1, 2, 3], [4, 5, 6], [7, 8, 9]]).flat_map(D.from_tensor_slices)
    assert py(list(ds)) == [1, 2, 3, 4, 5, 6, 7, 8, 9]


def test_repeat_take_skip_shard_enumerate_examples():
    assert py(list(D.from_tensor_slices([1, 2, 3]).repeat(3))) == [1, 2, 3] * 3
    assert py(list(D.range(10).take(3))) == [0, 1, 2]
    assert py(list(D.range(10).skip(7))) == [7, 8, 9]
    assert py(list(D.range(10).shard(num_shards=3, index=0))) == [0, 3, 6, 9]
    assert py(list(D.range(10).shard(num_shards=3, index=1))) == [1, 4, 7]
    assert py(list(D.range(10).shard(num_shards=3, index=2))) == [2, 5, 8]
    assert py(list(D.from_tensor_slices([1, 2, 3]).enumerate(start=5))) == [(5, 1), (6, 2), (7, 3)]
    assert py(list(D.range(10).take_while(lambda x: x < 5))) == [0, 1, 2, 3, 4]


def test_zip_concatenate_examples():
    a, b = D.range(1, 4), D.range(4, 7)
    assert py(list(D.zip(a, b))) == [(1, 4), (2, 5), (3, 6)]
    assert py(list(D.zip((a, b)))) == [(1, 4), (2, 5), (3, 6)]
    c = D.range(7, 13).batch(2)
    assert py(list(D.zip((a, b), c))) == [((1, 4), [7, 8]), ((2, 5), [9, 10]), ((3, 6), [11, 12])]
    assert py(list(D.zip(a, D.range(13, 17)))) == [(1, 13), (2, 14), (3, 15)]
    assert py(list(D.range(1, 4).concatenate(D.range(4, 8)))) == [1, 2, 3, 4, 5, 6, 7]


def test_choose_from_datasets_example():
    datasets = [D.from_tensors("foo").repeat(), D.from_tensors("bar").repeat(), D.from_tensors("baz").repeat()]
    choice = D.range(3).repeat(3)
    got = list(D.choose_from_datasets(datasets, choice))
    assert got == [b"foo", b"bar", b"baz"] * 3


def test_cardinality_examples():
    assert D.range(42).cardinality() == 42
    assert D.range(42).repeat().cardinality() == hr.INFINITE_CARDINALITY
    assert D.range(42).filter(lambda x: True).cardinality() == hr.UNKNOWN_CARDINALITY
    assert D.range(42).batch(5).cardinality() == 9
    assert D.range(42).batch(5, drop_remainder=True).cardinality() == 8
    assert D.range(10).shard(3, 1).cardinality() == 3
    assert D.range(10).skip(12).cardinality() == 0
    assert D.range(10).repeat().take(7).cardinality() == 7
    assert len(D.range(10).map(lambda x: x)) == 10
    with pytest.raises(TypeError, match="infinite"):
        len(D.range(3).repeat())
