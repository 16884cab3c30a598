"""Dataset.from_random_access: index-permutation global shuffle, per-iteration orders, rank sharding, state."""

from __future__ import annotations

import functools
import json
import operator

import numpy as np
import pytest

import headrace as hr
from headrace._ops.random_access import IndexPermutation


def ints(ds: hr.Dataset) -> list[int]:
    return [int(x) for x in ds]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 16, 17, 1000, 4097])
def test_permutation_is_a_bijection(n):
    perm = IndexPermutation(n, seed=123)(np.arange(n))
    assert sorted(perm.tolist()) == list(range(n))


def test_permutation_is_roughly_uniform():
    firsts = np.bincount([IndexPermutation(5, s)(np.arange(1))[0] for s in range(3000)], minlength=5)
    assert firsts.min() > 480 and firsts.max() < 720  # expected 600 each
    big = IndexPermutation(100_000, 7)(np.arange(100_000))
    assert abs(np.corrcoef(np.arange(100_000), big)[0, 1]) < 0.02


def test_no_shuffle_is_source_order_and_sharded_like_shard():
    source = list(range(10))
    assert ints(hr.Dataset.from_random_access(source)) == source
    assert ints(hr.Dataset.from_random_access(source, num_shards=3, index=1)) == [1, 4, 7]
    assert hr.Dataset.from_random_access(source, num_shards=3, index=1).cardinality() == 3
    assert hr.Dataset.from_random_access(source, num_shards=3, index=0).cardinality() == 4


def test_seeded_shuffle_is_reproducible_and_reshuffles_each_iteration():
    source = np.arange(100)
    a = hr.Dataset.from_random_access(source, shuffle=True, seed=5)
    b = hr.Dataset.from_random_access(source, shuffle=True, seed=5)
    first, second = ints(a), ints(a)
    assert first == ints(b) and second == ints(b)
    assert first != second and sorted(first) == sorted(second) == list(range(100))
    assert first != list(range(100))
    fixed = hr.Dataset.from_random_access(source, shuffle=True, seed=5, reshuffle_each_iteration=False)
    assert ints(fixed) == ints(fixed)
    assert ints(hr.Dataset.from_random_access(source, shuffle=True, seed=6)) != first


def test_repeat_gives_a_new_order_per_epoch():
    ds = hr.Dataset.from_random_access(list(range(20)), shuffle=True, seed=1).repeat(3)
    out = ints(ds)
    epochs = [out[i * 20:(i + 1) * 20] for i in range(3)]
    assert all(sorted(e) == list(range(20)) for e in epochs)
    assert len({tuple(e) for e in epochs}) == 3


def test_shards_are_disjoint_and_cover_each_epoch():
    world = 4
    shards = [hr.Dataset.from_random_access(np.arange(103), shuffle=True, seed=9, num_shards=world, index=r)
              for r in range(world)]
    epoch = [ints(s) for s in shards]
    assert sorted(functools.reduce(operator.iadd, epoch, [])) == list(range(103))
    assert [len(e) for e in epoch] == [s.cardinality() for s in shards] == [26, 26, 26, 25]
    unsharded = ints(hr.Dataset.from_random_access(np.arange(103), shuffle=True, seed=9))
    assert epoch[1] == unsharded[1::world]  # rank r takes positions r, r + world, ... of the global order


@pytest.mark.parametrize(("start", "world"), [(0, 3), (12, 2), (12, 3), (37, 4), (103, 2)])
def test_start_skips_a_prefix_of_the_global_order_at_any_world_size(start, world):
    unsharded = ints(hr.Dataset.from_random_access(np.arange(103), shuffle=True, seed=9,
                                                   reshuffle_each_iteration=False))
    shards = [hr.Dataset.from_random_access(np.arange(103), shuffle=True, seed=9, reshuffle_each_iteration=False,
                                            num_shards=world, index=r, start=start) for r in range(world)]
    rest = [ints(s) for s in shards]
    for r in range(world):
        assert rest[r] == unsharded[start + r::world]  # positions start + r, start + r + world, ...
        assert shards[r].cardinality() == len(rest[r])
    assert sorted(functools.reduce(operator.iadd, rest, [])) == sorted(unsharded[start:])


def test_start_out_of_range_is_refused():
    with pytest.raises(ValueError, match=r"start=11\): the source has 10 elements; start must be in \[0, 10\]"):
        hr.Dataset.from_random_access(list(range(10)), start=11)
    with pytest.raises(ValueError, match=r"start\)=-1 must be >= 0"):
        hr.Dataset.from_random_access(list(range(10)), start=-1)


def test_state_restores_everywhere_including_the_epoch_seed():
    ds = hr.Dataset.from_random_access(list(range(30)), shuffle=True, seed=None)
    for k in range(0, 31, 3):
        with iter(ds) as it:  # each iterator is a new epoch with its own order
            for _ in range(k):
                next(it)
            state = json.loads(json.dumps(it.get_state()))
            rest = [int(x) for x in it]
        # another dataset object with another (random) seed: the state carries the epoch's order
        with iter(hr.Dataset.from_random_access(list(range(30)), shuffle=True)) as other:
            next(other)
            other.set_state(state)
            assert [int(x) for x in other] == rest, k
        assert len(rest) == 30 - k


def test_state_mismatch_is_refused():
    with iter(hr.Dataset.from_random_access(list(range(10)), shuffle=True, seed=1)) as it:
        state = it.get_state()
    with iter(hr.Dataset.from_random_access(list(range(11)), shuffle=True, seed=1)) as it, \
            pytest.raises(hr.StateError, match="length"):
        it.set_state(state)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"num_shards": 0}, ValueError, r"num_shards\)=0"),
    ({"num_shards": 2, "index": 2}, ValueError, "index must be in"),
    ({"shuffle": True, "num_shards": 2}, ValueError, "same seed"),
    ({"seed": "x"}, TypeError, r"seed\)='x'"),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        hr.Dataset.from_random_access(list(range(4)), **kwargs)


def test_source_without_len_is_refused():
    with pytest.raises(TypeError, match="len"):
        hr.Dataset.from_random_access(iter([1, 2]))


def test_source_error_names_the_index_and_stays_usable():
    class Flaky:
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> int:
            if i == 2:
                raise KeyError("bad record 2")
            return i

    with iter(hr.Dataset.from_random_access(Flaky())) as it:
        assert [next(it), next(it)] == [0, 1]
        with pytest.raises(KeyError) as e:
            next(it)
        assert "from_random_access at element 2" in "\n".join(e.value.__notes__)
        assert [int(x) for x in it] == [3]
    assert ints(hr.Dataset.from_random_access(Flaky()).ignore_errors()) == [0, 1, 3]


def test_over_indexed_tfrecord_shards(tmp_path):
    from headrace.io import ShardedWriter, TFRecordRandomAccess

    records = [f"rec{i}".encode() for i in range(40)]
    with ShardedWriter(tmp_path, "data", num_shards=3) as w:
        for r in records:
            w.write(r)
    source = TFRecordRandomAccess(w.paths)
    ds = hr.Dataset.from_random_access(source, shuffle=True, seed=3)
    out = list(ds)
    assert sorted(out) == sorted(records) and out != [source[i] for i in range(40)]
