"""``shuffle`` (``headrace._ops.shuffle``): a restore adopts or checks the seed, never changes the
dataset (issue 15, engine review)."""

from __future__ import annotations

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
