"""``shuffle`` (``headrace._ops.shuffle``): a restore adopts or checks the seed, never changes the
dataset (issue 15, engine review); content-hash keys (xxh3, and BLAKE2b states of earlier releases)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import headrace as hr

D = hr.Dataset


def test_restoring_never_changes_the_dataset():
    ds = D.range(20).shuffle(10, seed=7)
    seven = [int(x) for x in ds.shuffle(1, seed=0)]  # noqa: F841 - a second pipeline over the same node
    first = [int(x) for x in iter(D.range(20).shuffle(10, seed=7))]
    other = iter(D.range(20).shuffle(10, seed=5))
    next(other)
    state = other.get_state()
    with pytest.raises(hr.StateError, match="seed=5 in the state but seed=7"):
        iter(ds).set_state(state)
    assert [int(x) for x in D.range(20).shuffle(10, seed=7)] == first   # seed 7 still gives seed 7's order
    unseeded = D.range(20).shuffle(10)
    it = iter(unseeded)
    it.set_state(state)                  # seed=None adopts the saved seed, in this iterator only
    assert [int(x) for x in it] == [int(x) for x in D.range(20).shuffle(10, seed=5)][1:]
    node_seed = unseeded._node.seed
    list(iter(unseeded))
    assert unseeded._node.seed == node_seed


def _nondeterministic_images() -> D:
    # float32 images below a deterministic=False map: the shuffle keys its buffer by content hash
    return (D.range(120).map(lambda x: np.full((8, 8, 3), x, np.float32), num_parallel_calls=2, deterministic=False)
            .shuffle(40, seed=0))


def _taken_and_state() -> tuple[list[int], dict]:
    with iter(_nondeterministic_images()) as it:
        got = [int(next(it)[0, 0, 0]) for _ in range(30)]
        return got, json.loads(json.dumps(it.get_state()))


def _rest(state: dict) -> list[int]:
    with iter(_nondeterministic_images()) as it:
        it.set_state(state)
        return [int(x[0, 0, 0]) for x in it]


def test_hash_keys_are_xxh3_and_restore_exactly():
    got, state = _taken_and_state()
    assert state["pipeline"]["keys_by"] == "hash" and state["pipeline"]["hash"] == "xxh3_64"
    keys = state["pipeline"]["keys"]
    assert keys and all(len(k) == 16 for k in keys)
    assert sorted(got + _rest(state)) == list(range(120))


def test_a_state_of_an_earlier_release_keyed_by_blake2b_restores_exactly():
    """States saved before the hash was named used BLAKE2b-64 keys (no ``"hash"`` field): they still restore."""
    from headrace._ops.shuffle import content_hash

    got, state = _taken_and_state()
    shuffle = state["pipeline"]
    by_xxh3 = {content_hash(np.full((8, 8, 3), x, np.float32)): x for x in range(120)}
    shuffle["keys"] = [content_hash(np.full((8, 8, 3), by_xxh3[k], np.float32), "blake2b") for k in shuffle["keys"]]
    del shuffle["hash"]
    assert sorted(got + _rest(state)) == list(range(120))


def test_an_unknown_hash_in_the_state_is_refused_naming_it():
    _, state = _taken_and_state()
    state["pipeline"]["hash"] = "md5"
    with pytest.raises(hr.StateError, match=r"hash='md5'.*xxh3_64, blake2b"):
        _rest(state)
