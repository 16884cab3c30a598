"""Runs of elements on worker processes: a pool thread hands a run of consecutive elements to a worker in one
message each way (``ProcessExecutor.call_run``), each element keeping its sequence number, reservation, result
and error. Order across runs, an error or a worker's death in the middle of a run (naming the element; the
others computed), a state taken while runs are in flight, the budget of what is in flight."""

from __future__ import annotations

import random

import pytest

import headrace as hr
from tests.engine.pool.proc_fns import exit_at_41, ones_1mib, raise_at_37, times_three
from tests.engine.pool.test_process_memory import run_process_map

D = hr.Dataset
N = 160


def _executor(it) -> dict:
    node = it.explain()["tree"]
    while node["kind"] != "map":
        node = node["inputs"][0]
    return node["executor"]


def _ran_in_runs(it) -> dict:
    ex = _executor(it)
    assert ex["runs"] < ex["elements"], f"no element went in a run of more than one: {ex}"
    return ex


@pytest.mark.parametrize("deterministic", [True, False])
def test_results_keep_their_order_across_runs(deterministic):
    ds = D.range(N).map(times_three, num_parallel_calls=2, executor="process", deterministic=deterministic)
    with iter(ds) as it:
        out = [int(v) for v in it]
        _ran_in_runs(it)
    assert (out if deterministic else sorted(out)) == [3 * i for i in range(N)]


def _each(it) -> list:
    """Every element of ``it``, an exception in its place where ``next()`` raised one."""
    out: list = []
    while True:
        try:
            out.append(int(next(it)))
        except StopIteration:
            return out
        except Exception as e:
            out.append(e)


def test_an_exception_in_the_middle_of_a_run_is_that_elements_error_and_the_run_goes_on():
    with iter(D.range(N).map(raise_at_37, num_parallel_calls=2, executor="process")) as it:
        out = _each(it)
        _ran_in_runs(it)
    err = out[37]
    assert isinstance(err, ValueError) and "bad element 37" in str(err)
    assert any("element 37" in note for note in getattr(err, "__notes__", [])), err.__notes__
    assert isinstance(err.__cause__, hr.RemoteTraceback)
    assert out[:37] + out[38:] == [2 * i for i in range(N) if i != 37]


def test_a_worker_death_in_the_middle_of_a_run_names_the_element_and_the_others_are_computed():
    with iter(D.range(N).map(exit_at_41, num_parallel_calls=2, executor="process")) as it:
        out = _each(it)
        ex = _ran_in_runs(it)
    err = out[41]
    assert isinstance(err, hr.WorkerError) and err.index == 41 and err.exitcode == 3, err
    assert "element 41" in str(err)
    assert out[:41] + out[42:] == [2 * i for i in range(N) if i != 41]
    assert ex["crashes"] == 1


def test_a_state_taken_while_runs_are_in_flight_restores_exactly_the_rest():
    ds = D.range(N).map(times_three, num_parallel_calls=2, executor="process")
    rng = random.Random(20261129)
    cuts = sorted(rng.sample(range(1, N - 1), 3))
    states = {}
    with iter(ds) as it:
        for k in range(N):
            if k in cuts:
                states[k] = it.get_state()
            next(it)
        _ran_in_runs(it)
    for k, state in states.items():
        with iter(ds) as it:
            it.set_state(state)
            assert [int(v) for v in it] == [3 * i for i in range(k, N)], f"restored at {k}"


@pytest.mark.filterwarnings("ignore::headrace.MemoryBudgetWarning")
def test_elements_in_flight_in_runs_stay_charged_within_the_budget():
    executor, stats = run_process_map(ones_1mib, 64, 2, "160MiB")
    assert executor["runs"] < executor["elements"], f"no element went in a run of more than one: {executor}"
    assert stats["overdraft_bytes"] == 0 and stats["peak_bytes"] <= stats["limit_bytes"], stats
