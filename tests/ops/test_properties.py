"""Hypothesis properties of batch / unbatch / shard / take / skip / interleave / shuffle."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import headrace as hr

D = hr.Dataset
small = settings(max_examples=60, deadline=None)


def ints(ds):
    return [int(x) for x in ds]


@small
@given(n=st.integers(0, 60), bs=st.integers(1, 9), drop=st.booleans(), par=st.sampled_from([None, 2]))
def test_batch_then_unbatch_is_identity_up_to_the_remainder(n, bs, drop, par):
    batches = list(D.range(n).batch(bs, drop_remainder=drop, num_parallel_calls=par))
    kept = n - n % bs if drop else n
    assert [len(b) for b in batches] == [bs] * (kept // bs) + ([kept % bs] if kept % bs else [])
    assert ints(D.range(n).batch(bs, drop_remainder=drop).unbatch()) == list(range(kept))
    assert D.range(n).batch(bs, drop_remainder=drop).cardinality() == len(batches)


@small
@given(n=st.integers(0, 80), shards=st.integers(1, 7))
def test_shards_are_disjoint_and_complete(n, shards):
    parts = [ints(D.range(n).shard(shards, i)) for i in range(shards)]
    assert sorted(v for p in parts for v in p) == list(range(n))
    for i, p in enumerate(parts):
        assert len(p) == D.range(n).shard(shards, i).cardinality()


@small
@given(n=st.integers(0, 50), k=st.integers(0, 60))
def test_take_and_skip_partition_the_stream(n, k):
    assert ints(D.range(n).take(k)) + ints(D.range(n).skip(k)) == list(range(n))
    assert len(ints(D.range(n).take(k))) == D.range(n).take(k).cardinality()


@small
@given(sizes=st.lists(st.integers(0, 6), min_size=0, max_size=8), cycle=st.integers(1, 4),
       block=st.integers(1, 3), par=st.sampled_from([None, 2]))
def test_interleave_is_a_merge_that_keeps_each_inner_order(sizes, cycle, block, par):
    arr = np.array(sizes, np.int64)

    def inner(i):
        return D.range(100 * int(i), 100 * int(i) + int(arr[int(i)]))

    out = ints(D.range(len(sizes)).interleave(inner, cycle_length=cycle, block_length=block, num_parallel_calls=par))
    expected = [100 * i + j for i, s in enumerate(sizes) for j in range(s)]
    assert sorted(out) == sorted(expected)
    for i in range(len(sizes)):
        assert [v for v in out if v // 100 == i] == [100 * i + j for j in range(sizes[i])]
    if par is not None:
        sequential = ints(D.range(len(sizes)).interleave(inner, cycle_length=cycle, block_length=block))
        assert out == sequential


@small
@given(n=st.integers(0, 100), buf=st.integers(1, 120), seed=st.integers(0, 2**31))
def test_shuffle_is_a_reproducible_permutation(n, buf, seed):
    a = ints(D.range(n).shuffle(buf, seed=seed, reshuffle_each_iteration=False))
    assert sorted(a) == list(range(n))
    assert a == ints(D.range(n).shuffle(buf, seed=seed, reshuffle_each_iteration=False))
    # an element can only move ahead of its position by at most the buffer size
    assert all(pos >= v - buf for pos, v in enumerate(a)) or buf >= n


def test_shuffle_is_uniform_within_the_buffer():
    counts = np.zeros((4, 4))
    for seed in range(2000):
        first = ints(D.range(4).shuffle(4, seed=seed))[0]
        counts[0, first] += 1
    freq = counts[0] / counts[0].sum()
    assert np.all(np.abs(freq - 0.25) < 0.04), freq


def test_shuffle_reshuffles_each_iteration_and_reproduces_across_runs():
    ds = D.range(50).shuffle(50, seed=7)
    first, second = ints(ds), ints(ds)
    assert first != second and sorted(first) == sorted(second)
    again = D.range(50).shuffle(50, seed=7)
    assert ints(again) == first and ints(again) == second
