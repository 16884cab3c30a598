"""The parallel stage (``headrace._engine.pool``: the pool and its parts): a restore while a worker is stuck
in the input, the input's state read per snapshot, not per element."""

from __future__ import annotations

import threading
import time

import headrace as hr

D = hr.Dataset


def test_set_state_on_a_running_parallel_stage_loses_nothing():
    # A worker stuck inside the input past the join deadline used to pull from the restored input and drop
    # that element (rewind to "after 3" gave [5, 6, 7, 8, 10, 11]).
    gate = threading.Event()

    def slow_on_4(x):
        if int(x) == 4 and not gate.is_set():
            gate.wait(3)
        return x

    ds = D.range(12).map(slow_on_4).prefetch(8).map(lambda x: x, num_parallel_calls=2)
    with iter(ds) as it:
        got = [int(next(it)) for _ in range(4)]
        state = it.get_state()          # after 3
        time.sleep(0.3)                 # a worker is now inside the input, stuck on element 4
        threading.Timer(1.5, gate.set).start()  # longer than the 1 s join deadline of set_state
        it.set_state(state)
        rest = [int(x) for x in it]
    assert got == [0, 1, 2, 3] and rest == list(range(4, 12))


def test_parallel_stages_do_not_ask_for_their_inputs_state_per_element():
    gets = {"n": 0}

    class Counting(hr.DatasetIterator):
        def __init__(self):
            super().__init__()
            self.i = 0

        def __next__(self):
            if self.i >= 1000:
                raise StopIteration
            self.i += 1
            return self.i

        def get_state(self):
            gets["n"] += 1
            return {"i": self.i}

        def set_state(self, state):
            self.i = state["i"]

    ds = D.from_source(Counting).map(lambda x: x, num_parallel_calls=2)
    assert len(list(ds)) == 1000
    assert gets["n"] < 1000 / 8, f"get_state() called {gets['n']} times for 1000 elements"
