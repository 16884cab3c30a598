"""One generic save/restore test over every transformation: restore at many points, compare the rest.

For each pipeline: iterate once fully (the reference); then for positions k = 0..n, take k elements from
a fresh iterator, save ``get_state()`` (which must survive ``json.dumps``), restore it into a *new*
iterator of a *freshly built* identical pipeline, and require the rest to equal the reference from k on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import numpy as np
import pytest

import headrace as hr
from tests.conftest import assert_same
from tests.engine.pool.proc_fns import times_three as _times_three

D = hr.Dataset


def _sub(x):
    return D.range(int(x) * 10, int(x) * 10 + int(x) % 3 + 1)


def _fail_on_multiples_of_4(x):
    if x % 4 == 0:
        raise ValueError(f"bad element {x}")
    return x


class _Squares(hr.DatasetIterator):
    """A source written by a user (the public protocol): squares of 0..n-1, position in the state."""

    def __init__(self, n: int = 8) -> None:
        super().__init__()
        self.n, self.i = n, 0

    def __next__(self):
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return (self.i - 1) ** 2

    def get_state(self):
        return {"i": self.i, "n": self.n}

    def set_state(self, state):
        if state["n"] != self.n:
            raise hr.StateError(f"squares: n={state['n']} in the state, {self.n} here")
        self.i = state["i"]


def _files(tmp_path_factory):
    d = tmp_path_factory.mktemp("files")
    for i in range(4):
        (d / f"f{i}.txt").write_text(str(i))
    return str(d / "*.txt")


def _saved(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("saved") / "ds")
    D.range(9).map(lambda x: (x, np.full([int(x) % 3], "s"))).save(path, shard_func=lambda x, s: x % 2)
    return path


PIPELINES: dict[str, Callable[[object], hr.Dataset]] = {
    "range": lambda _: D.range(3, 20, 2),
    "from_tensor_slices": lambda _: D.from_tensor_slices({"a": np.arange(7), "b": np.arange(14).reshape(7, 2)}),
    "from_tensors": lambda _: D.from_tensors((1, "x")),
    "from_generator": lambda _: D.from_generator(lambda: (i * i for i in range(9))),
    "map": lambda _: D.range(9).map(lambda x: (x, x * 2)),
    "map_parallel": lambda _: D.range(20).map(lambda x: x * 3, num_parallel_calls=3),
    "map_parallel_nondeterministic": lambda _: D.range(20).map(lambda x: x * 3, num_parallel_calls=3,
                                                               deterministic=False),
    "map_process": lambda _: D.range(4).map(_times_three, num_parallel_calls=2, executor="process"),
    "filter": lambda _: D.range(20).filter(lambda x: x % 3 == 0),
    "flat_map": lambda _: D.range(5).flat_map(_sub),
    "interleave": lambda _: D.range(7).interleave(_sub, cycle_length=3, block_length=2),
    "interleave_parallel": lambda _: D.range(7).interleave(_sub, cycle_length=3, block_length=2,
                                                           num_parallel_calls=2),
    "shuffle": lambda _: D.range(25).shuffle(6, seed=3),
    "shuffle_repeat": lambda _: D.range(6).shuffle(4, seed=1).repeat(3),
    "batch": lambda _: D.range(11).batch(3),
    "batch_parallel": lambda _: D.range(11).batch(3, num_parallel_calls=2),
    "padded_batch": lambda _: D.range(7).map(lambda x: np.arange(x)).padded_batch(3),
    "unbatch": lambda _: D.range(11).batch(4).unbatch(),
    "prefetch": lambda _: D.range(15).prefetch(3),
    "repeat": lambda _: D.range(4).repeat(3),
    "take": lambda _: D.range(10).take(6),
    "skip": lambda _: D.range(10).skip(4),
    "shard": lambda _: D.range(20).shard(3, 1),
    "enumerate": lambda _: D.range(5, 10).enumerate(2),
    "take_while": lambda _: D.range(10).take_while(lambda x: x < 6),
    "concatenate": lambda _: D.range(4).concatenate(D.range(10, 13)),
    "zip": lambda _: D.zip({"a": D.range(5), "b": D.range(10, 20).batch(2)}),
    "sample_from_datasets": lambda _: D.sample_from_datasets([D.range(6), D.range(100, 104)], [0.3, 0.7], seed=5),
    "choose_from_datasets": lambda _: D.choose_from_datasets([D.range(5), D.range(10, 15)],
                                                             D.from_tensor_slices([0, 1, 1, 0, 1, 0])),
    "cache_memory": lambda _: D.range(6).map(lambda x: x + 1).cache().repeat(2),
    "cache_file": lambda path: D.range(6).map(lambda x: x + 1).cache(path).repeat(2),
    "ignore_errors": lambda _: D.range(10).map(_fail_on_multiples_of_4).ignore_errors(),
    "list_files": lambda pattern: D.list_files(pattern, seed=2),
    "from_source": lambda _: D.from_source(_Squares, cardinality=8, name="squares").shuffle(3, seed=4).repeat(2),
    "with_options": lambda _: D.range(5).prefetch(2).with_options(hr.Options(memory_budget="1MiB")),
    "sample_weights_dataset": lambda _: D.sample_from_datasets(
        [D.range(6), D.range(100, 106)], D.from_tensor_slices(np.array([[0.5, 0.5], [1.0, 0.0]] * 8)), seed=2),
    "counter": lambda _: D.counter(5, 3).take(7),
    "random": lambda _: D.random(seed=3).take(6),
    "scan": lambda _: D.range(8).scan(np.int64(0), lambda s, x: (s + x, s * 10)),
    "unique": lambda _: D.from_tensor_slices(np.array([3, 1, 3, 2, 1, 5, 2, 7])).unique(),
    "window": lambda _: D.range(9).window(3, 2).flat_map(lambda w: w.batch(3)),
    "window_stride": lambda _: D.range(10).window(2, 3, 2, drop_remainder=True).flat_map(lambda w: w.batch(2)),
    "group_by_window": lambda _: D.range(13).group_by_window(lambda x: x % 3, lambda k, w: w.batch(2),
                                                             window_size=2),
    "bucket_by_sequence_length": lambda _: (D.range(1, 12).map(lambda x: np.full([int(x) % 5 + 1], x))
                                            .bucket_by_sequence_length(len, [2, 4], [2, 3, 2])),
    "ragged_batch": lambda _: (D.range(9).map(lambda x: np.arange(x)).ragged_batch(2)  # rows -> comparable arrays
                               .map(lambda b: (np.array([len(r) for r in b]), np.concatenate(list(b))))),
    "rebatch": lambda _: D.range(11).batch(4).rebatch(3),
    "load": lambda path: D.load(path),
    "rejection_resample": lambda _: D.range(30).rejection_resample(lambda x: x % 3, [0.6, 0.2, 0.2], seed=1),
    "seed_pipeline": lambda _: (D.from_tensor_slices((np.arange(40.0).reshape(20, 2), np.arange(20)))
                                .map(lambda x, y: (x * 2, y), num_parallel_calls=2)
                                .shuffle(8, seed=0).batch(4).prefetch(2)),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_restore_at_every_position(name, tmp_path, tmp_path_factory):
    arg = os.path.join(tmp_path, "cache") if name == "cache_file" else None
    if name == "list_files":
        arg = _files(tmp_path_factory)
    if name == "load":
        arg = _saved(tmp_path_factory)

    def build() -> hr.Dataset:
        return PIPELINES[name](arg)

    reference = list(build())
    assert reference, "the pipeline must produce elements"
    for k in range(len(reference) + 1):
        ds = build()
        with iter(ds) as it:
            for _ in range(k):
                next(it)
            state = json.loads(json.dumps(it.get_state()))
        with iter(build()) as restored:
            restored.set_state(state)
            rest = list(restored)
        assert len(rest) == len(reference) - k, f"{name}: restored at {k}"
        for a, b in zip(rest, reference[k:]):
            assert_same(a, b)


def test_mismatched_settings_fail_loudly():
    it = iter(D.range(10).shuffle(5, seed=1).batch(2))
    next(it)
    state = it.get_state()
    with pytest.raises(hr.StateError, match="batch_size"):
        iter(D.range(10).shuffle(5, seed=1).batch(3)).set_state(state)
    with pytest.raises(hr.StateError, match="buffer_size"):
        iter(D.range(10).shuffle(6, seed=1).batch(2)).set_state(state)
    with pytest.raises(hr.StateError, match="map"):
        iter(D.range(10).map(lambda x: x).batch(2)).set_state(state)
    with pytest.raises(hr.StateError, match="not a headrace iterator state"):
        iter(D.range(3)).set_state({"pipeline": {}})
    with pytest.raises(hr.StateError, match="version"):
        iter(D.range(3)).set_state({**state, "version": 99})


def test_state_does_not_grow_with_the_buffered_data():
    # A shuffle buffer of 5,000 elements is described by one small int per element (its pull number after
    # a checkpoint), never by the elements: the state is the same size for 400-byte and 40 KB elements.
    def state_size(floats: int) -> int:
        ds = D.range(100_000).map(lambda x: np.zeros(floats, np.float32)).shuffle(5_000, seed=0).prefetch(4)
        with iter(ds) as it:
            for _ in range(6_000):
                next(it)
            return len(json.dumps(it.get_state()))

    small, large = state_size(100), state_size(10_000)
    assert abs(small - large) < 200, (small, large)
    assert small < 8 * 5_000, f"state of {small} bytes for 5,000 buffered elements"
