"""``repeat`` (``headrace._ops.repeat``): the cost of a restore does not grow with the position
(issue 15, engine review)."""

from __future__ import annotations

import json

import headrace as hr

D = hr.Dataset


def test_restore_cost_does_not_grow_with_the_position_after_repeat():
    calls = {"n": 0}

    def count(x):
        calls["n"] += 1
        return x

    def restore_calls(position: int) -> int:
        ds = D.range(100).repeat().map(count).shuffle(50, seed=0)
        with iter(ds) as it:
            for _ in range(position):
                next(it)
            state = json.loads(json.dumps(it.get_state()))
        calls["n"] = 0
        with iter(ds) as it:
            it.set_state(state)
            next(it)
        return calls["n"]

    early, late = restore_calls(300), restore_calls(30_000)
    assert late < 2_000, f"restoring at element 30,000 re-ran the map {late} times"
    assert late < 3 * max(early, 200)
