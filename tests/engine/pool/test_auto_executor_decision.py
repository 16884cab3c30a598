"""``executor="auto"``'s decision from given measurements (``headrace._engine.pool.executor_choice``, applied by
``AutoExecutor``), on synthetic calls (fake clocks): never on real timing.

Two threads' calls that ran at once wait for the GIL (neither on the CPU nor waiting for a core) about half
their time when the function holds it, not at all when it releases it, however loaded the machine is; calls
that never ran at once but back to back were serialized by it. A 1.4 ms pure-Python loop (shorter than the
5 ms switch interval: two threads run its calls back to back) was kept on threads by the former GIL probe and
ran below sequential.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import headrace as hr
from headrace._engine.context import IteratorContext
from headrace._engine.pool import auto_executor
from headrace._engine.pool.auto_executor import MAX_SWITCHES, PAIR_CALLS, SOLO_CALLS, AutoExecutor
from headrace._engine.pool.executor import ExecutorKind, run_delay_s
from headrace._engine.pool.executor_choice import (
    Call,
    CallLog,
    Run,
    Solo,
    concurrency,
    covered,
    first_verdict,
    processes_wrong,
    threads_wrong,
)
from headrace._memory import budget_for

CALL_S = 0.0014  # the 1.4 ms arithmetic loop of bench/gil_family.py


def _solo(cpu: float = CALL_S, wall: float = CALL_S, runnable: float = CALL_S) -> Solo:
    return Solo([(wall, cpu, runnable)] * SOLO_CALLS)


def _serialized(n: int = PAIR_CALLS, gap_s: float = 20e-6, gap_delay_s: float = 0.0) -> list[Call]:
    """Two threads' calls of a GIL-bound function shorter than the switch interval: back to back, each at full
    CPU, ``gap_s`` apart, ``gap_delay_s`` of each gap waiting for a core."""
    out, t = [], 0.0
    for _ in range(n):
        out.append((t, t + CALL_S, CALL_S, 0.0, gap_delay_s))
        t += CALL_S + gap_s
    return out


def _overlapping(n: int = PAIR_CALLS, cpu_share: float = 0.5, delay_share: float = 0.0) -> list[Call]:
    """Pairs of calls that ran at once, each ``2 * CALL_S`` long; ``cpu_share`` of it on the CPU and
    ``delay_share`` waiting for a core (the rest: waiting for the GIL)."""
    out = []
    for i in range(n // 2):
        s = i * 2 * CALL_S
        for _ in range(2):
            out.append((s, s + 2 * CALL_S, 2 * CALL_S * cpu_share, 2 * CALL_S * delay_share, 0.0))
    return out


def test_calls_run_back_to_back_by_two_threads_use_one_core_and_go_to_processes():
    kind, why, figures = first_verdict(_solo(), _serialized())
    assert kind == "process", why
    assert "holds the GIL" in why and "back to back" in why and figures["thread_cores"] == pytest.approx(1.0, abs=0.05)
    assert figures["busy"] > 0.95


def test_overlapping_calls_that_wait_for_the_gil_half_the_time_go_to_processes():
    kind, why, figures = first_verdict(_solo(), _overlapping(cpu_share=0.5))
    assert kind == "process" and figures["gil_wait"] == pytest.approx(0.5), why
    assert "below one thread alone" not in why  # 2 calls per 2 * CALL_S: as fast as one thread, not slower


def test_a_function_that_releases_the_gil_stays_on_threads():
    kind, why, figures = first_verdict(_solo(), _overlapping(cpu_share=1.0))
    assert kind == "thread" and "releases the GIL" in why and figures["gil_wait"] == pytest.approx(0.0), why


def test_calls_at_once_that_got_no_more_cpu_than_one_go_to_processes_even_without_a_gil_wait():
    # two GIL-bound calls at once on a loaded machine: counted as waiting for a core, not for the GIL
    kind, why, figures = first_verdict(_solo(), _overlapping(cpu_share=0.5, delay_share=0.5))
    assert figures["gil_wait"] == pytest.approx(0.0) and figures["thread_scaling"] == pytest.approx(1.0)
    assert kind == "process" and "only 1.00x the CPU" in why, why


def test_time_waiting_for_a_core_is_the_load_not_the_gil():
    # other processes took half of each call's time, alone and two at once: threads that release the GIL
    solo = _solo(cpu=CALL_S, wall=2 * CALL_S, runnable=CALL_S)
    kind, why, figures = first_verdict(solo, _overlapping(cpu_share=0.5, delay_share=0.5))
    assert kind == "thread" and figures["gil_wait"] == pytest.approx(0.0), why
    # a GIL-bound function there: one thread on the CPU at a time, the other waiting for the GIL or a core
    kind, why, figures = first_verdict(solo, _overlapping(cpu_share=0.25, delay_share=0.5))
    assert kind == "process" and figures["gil_wait"] == pytest.approx(0.25), why


def test_the_wait_of_two_threads_is_judged_against_that_of_one_call_alone():
    # the parent's other threads held the GIL 40% of the time: one call alone waited 40% too
    solo = Solo([(CALL_S, 0.6 * CALL_S, CALL_S)] * SOLO_CALLS)
    pair = [(s, e, 0.6 * c, d, g) for s, e, c, d, g in _serialized()]
    kind, why, figures = first_verdict(solo, pair)
    assert kind == "process" and "back to back" in why, why
    # two threads at once that each waited no more than that: it releases the GIL
    kind, why, figures = first_verdict(solo, _overlapping(cpu_share=0.6))
    assert kind == "thread" and figures["gil_wait"] == pytest.approx(0.0), why


def test_calls_with_gaps_between_them_wait_for_a_slow_input():
    kind, why, _ = first_verdict(_solo(), _serialized(gap_s=CALL_S))
    assert kind == "thread" and "input is slower" in why, why


def test_overlapping_calls_with_gaps_between_the_pairs_are_not_starved_by_the_input():
    # calls longer than the switch interval, staggered in slices: two at once, a gap after each pair
    pairs = [(3 * i * CALL_S, (3 * i + 2) * CALL_S, CALL_S, 0.0, 0.0) for i in range(PAIR_CALLS // 2) for _ in (0, 1)]
    kind, why, figures = first_verdict(_solo(), pairs)
    assert figures["busy"] < 0.8 and figures["overlap"] == pytest.approx(2.0)
    assert kind == "process" and "holds the GIL" in why, why


def test_gaps_spent_waiting_for_a_core_are_the_machines_load_not_a_slow_input():
    # serialized calls on a loaded machine: between calls the threads waited for a core (busy 58% uncorrected)
    kind, why, figures = first_verdict(_solo(), _serialized(gap_s=CALL_S, gap_delay_s=0.9 * CALL_S))
    assert kind == "process" and figures["busy"] >= 0.9, why


def test_waiting_or_short_calls_stay_on_threads_before_any_pair_is_timed():
    kind, why, _ = first_verdict(_solo(cpu=CALL_S / 20), [])
    assert kind == "thread" and "CPU" in why, why
    kind, why, _ = first_verdict(_solo(cpu=50e-6, wall=50e-6, runnable=50e-6), [])
    assert kind == "thread" and "50 us" in why, why
    assert first_verdict(_solo(), [])[0] is None  # a CPU-bound call: the pair phase decides


def test_the_cpu_share_leaves_out_the_time_spent_waiting_for_a_core():
    solo = _solo(cpu=CALL_S, wall=8 * CALL_S, runnable=CALL_S)  # preempted 7/8 of the time by other processes
    assert solo.cpu_share() == pytest.approx(1.0)
    assert first_verdict(solo, [])[0] is None  # not "it waits": the pair phase comes next


def test_the_call_log_splits_a_threads_waits_for_a_core_into_inside_and_between_calls():
    log = CallLog("test")
    log.add(0.0, 1.0, 0.5, 10.0, 10.25, thread=1)  # its first call: no gap before it
    log.add(1.5, 2.0, 0.5, 10.5, 10.5, thread=1)   # waited 0.25 s for a core between the calls
    log.add(0.0, 1.0, 0.9, 3.0, 3.5, thread=2)     # a delay longer than wall - cpu is capped at it
    calls, threads = log.take()
    assert threads == 2 and calls == [(0.0, 1.0, 0.5, 0.25, 0.0), (1.5, 2.0, 0.5, 0.0, 0.25),
                                      (0.0, 1.0, 0.9, pytest.approx(0.1), 0.0)]
    assert log.take() == ([], 0)


def test_concurrency_figures_of_two_serialized_threads():
    c = concurrency(_serialized(n=4, gap_s=0.0))
    assert c["busy"] == pytest.approx(1.0) and c["overlap"] == pytest.approx(1.0)
    assert c["cores"] == pytest.approx(1.0) and c["rate"] == pytest.approx(1 / CALL_S)


def test_a_check_on_threads_finds_them_serialized_or_scaling():
    wrong, why, figures = threads_wrong(_serialized(n=16), _solo())
    assert wrong and "holds the GIL" in why and figures["thread_cores"] < 1.1, why
    wrong, why, _ = threads_wrong(_overlapping(n=16, cpu_share=1.0), _solo())
    assert not wrong, why


def test_threads_checked_below_one_threads_rate_are_wrong_whatever_the_cause():
    # gaps (taken for a slow input) and only 1 call per 3 CALL_S: a third of one thread's rate
    wrong, why, figures = threads_wrong(_serialized(n=16, gap_s=2 * CALL_S), _solo())
    assert wrong and "below one thread alone" in why
    assert figures["stage_rate"] == pytest.approx(1 / (3 * CALL_S), rel=0.05)


def _runs(n: int, run_s: float, in_flight: int, cpu_s: float, delay_s: float = 0.0) -> list[Run]:
    """``n`` runs of 8 elements each taking ``run_s`` (the worker computing ``cpu_s`` of it and waiting
    ``delay_s`` for a core), ``in_flight`` at a time."""
    return [((i // in_flight) * run_s, (i // in_flight + 1) * run_s, 8, cpu_s, delay_s) for i in range(n)]


def test_processes_that_computed_less_than_one_core_together_were_wrong():
    # 2 runs at once, the workers computing 18 of every 20 ms: 1.8 cores' worth
    wrong, why, figures = processes_wrong(_runs(10, 0.020, 2, cpu_s=0.018), _solo())
    assert not wrong and figures["process_cores"] == pytest.approx(1.8), why
    # the round trips took most of each run: 0.4 cores' worth, less than one thread computes
    wrong, why, figures = processes_wrong(_runs(10, 0.040, 2, cpu_s=0.008), _solo())
    assert wrong and "0.40 cores" in why and figures["process_rate"] == pytest.approx(400.0), why
    # the same runs on a loaded machine, the workers waiting 30 ms for a core: the load, not processes
    wrong, why, _ = processes_wrong(_runs(10, 0.040, 2, cpu_s=0.008, delay_s=0.030), _solo())
    assert not wrong, why
    # one run at a time (the consumer or the input set the pace): not judged
    wrong, why, _ = processes_wrong(_runs(10, 0.040, 1, cpu_s=0.008), _solo())
    assert not wrong, why


def test_two_threads_on_more_than_one_core_together_release_the_gil_whatever_they_waited():
    # the JPEG decode of the seed image pipeline beside its Python threads: 1.5 cores, a GIL wait of 13%
    pair = [(s, e, 0.75 * (e - s), 0.0, 0.0) for s, e, _c, _d, _g in _overlapping(n=16, cpu_share=1.0)]
    kind, why, figures = first_verdict(_solo(), pair)
    assert figures["thread_cores"] == pytest.approx(1.5) and figures["gil_wait"] == pytest.approx(0.25)
    assert kind == "thread" and "1.50 cores together" in why, why


def test_processes_below_the_threads_measured_rate_were_wrong_with_one_run_in_flight():
    # one worker (the budget held one): 8 elements per 10 ms, 800/s, where two threads reached 1,100/s
    runs = _runs(10, 0.010, 1, cpu_s=0.0095)
    wrong, why, figures = processes_wrong(runs, _solo(), threads_rate=1100.0)
    assert wrong and "below the 1100/s of two threads" in why and figures["process_rate"] == pytest.approx(800.0)
    assert not processes_wrong(runs, _solo(), threads_rate=850.0)[0]  # within BELOW_THREADS of it
    assert not processes_wrong(runs, _solo())[0]  # never measured on threads: one run at a time is not judged


def test_the_first_verdict_waits_for_calls_that_span_the_settling_time_less_each_threads_first():
    log = CallLog("pair")
    for i in range(10):
        t = i * 0.05
        log.add(t, t + 0.04, 0.04, 0.0, 0.0, thread=i % 2)
    assert log.settled(8, 0.4) == []  # 8 calls after the two firsts, from 0.1 s to 0.49 s
    assert log.settled(9, 0.3) == []
    calls = log.settled(8, 0.35)
    assert len(calls) == 8 and calls[0][0] == pytest.approx(0.1)  # the calls of t=0.0 and 0.05 are left out


# ---- AutoExecutor applying them --------------------------------------------------------------------------
def _auto(monkeypatch, started: list[str]) -> AutoExecutor:
    ex = AutoExecutor(lambda x: x, lambda x: x, "map(f)", IteratorContext(hr.Options(), budget_for(None)), 2, 2)
    monkeypatch.setattr(ex, "_make_processes", started.append)  # decide, start nothing
    monkeypatch.setattr(auto_executor, "PAIR_MIN_S", 0.0)  # the synthetic pairs below span milliseconds
    return ex


def _decide(ex: AutoExecutor, pair: list[Call]) -> None:
    ex._solo.calls[:] = _solo().calls
    ex._pair.calls[:] = pair
    ex._pair._warm[:] = pair
    with ex._cv:
        ex._maybe_decide()


def test_the_auto_executor_moves_a_serialized_function_to_processes_and_explains_it(monkeypatch):
    started: list[str] = []
    ex = _auto(monkeypatch, started)
    _decide(ex, _serialized())
    assert ex.kind is ExecutorKind.PROCESS and started == [ex.why]
    report = ex.report()
    assert "back to back" in report["why"] and report["measured"]["thread_cores"] == pytest.approx(1.0, abs=0.05)
    assert report["measured"]["sequential_rate"] == pytest.approx(1 / CALL_S, rel=0.01)


def test_threads_for_a_call_that_waits_or_is_short_are_final_and_never_checked(monkeypatch):
    ex = _auto(monkeypatch, [])
    ex._solo.calls[:] = _solo(cpu=50e-6, wall=50e-6, runnable=50e-6).calls
    with ex._cv:
        ex._maybe_decide()
    assert ex.kind is ExecutorKind.THREAD and ex.final and ex._check_from == float("inf")


def test_a_thread_decision_proved_wrong_by_a_check_moves_to_processes_once_and_says_so(monkeypatch):
    started: list[str] = []
    ex = _auto(monkeypatch, started)
    _decide(ex, _overlapping(cpu_share=1.0))
    assert ex.kind is ExecutorKind.THREAD and not ex.final  # checked while the stage runs
    with ex._cv:
        ex._judge_threads(_serialized(n=16), threads=1)  # one thread (the inline path): nothing to judge
    assert ex.kind is ExecutorKind.THREAD
    with ex._cv:
        ex._judge_threads(_serialized(n=16), threads=2)
    assert ex.kind is ExecutorKind.PROCESS and len(started) == 1
    assert ex.why.startswith("moved to processes") and ex.report()["moves"] == [
        m for m in ex.moves if "moved to processes" in m]
    assert ex.report()["measured"]["last_check"]["thread_cores"] == pytest.approx(1.0, abs=0.05)


def test_processes_proved_slower_than_one_thread_go_back_and_the_moves_stop(monkeypatch):
    started: list[str] = []
    ex = _auto(monkeypatch, started)
    _decide(ex, _serialized())
    assert ex.kind is ExecutorKind.PROCESS

    class Runs:  # a process executor's run log (what _maybe_check reads)
        recording = False
        runs = _runs(10, 0.040, 2, cpu_s=0.008)

        def take(self):
            return list(self.runs)

    class Procs:
        runs = Runs()
        drained = False

        def drain(self):
            self.drained = True

    procs = Procs()
    ex._procs = procs  # type: ignore[assignment]
    monkeypatch.setattr(auto_executor, "CHECK_S", 0.0)
    ex._check_from = 0.0
    ex._maybe_check(procs)  # opens the window
    assert procs.runs.recording
    procs.runs.runs = _runs(10, 0.040, 2, cpu_s=0.008)
    ex._maybe_check(procs)  # judges it
    assert ex.kind is ExecutorKind.THREAD and procs.drained and "moved back to threads" in ex.why
    assert len(ex.moves) == 1 and not ex.final
    ex._judge_threads(_serialized(n=16), threads=2)  # the second move
    assert len(ex.moves) == MAX_SWITCHES == 2 and ex.kind is ExecutorKind.PROCESS
    assert ex._check_from == float("inf")  # no more checks: no flapping


def test_covered_is_the_length_of_a_union_of_intervals():
    assert covered([]) == 0.0
    assert covered([(0, 2), (1, 3), (5, 6)]) == pytest.approx(4.0)
    assert covered([(1, 4), (0, 2), (2, 3)]) == pytest.approx(4.0)


@pytest.mark.alone  # holds CPU-share bounds: under pytest-xdist it runs while the other worker waits
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the run-queue delay is read from Linux's /proc")
def test_run_delay_grows_while_other_processes_keep_the_cores_busy():
    spin = [sys.executable, "-S", "-c", "while True: pass"]
    busy = [subprocess.Popen(spin) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        time.sleep(0.2)
        d0, w0, c0 = run_delay_s(), time.perf_counter(), time.thread_time()
        while time.perf_counter() - w0 < 0.3:
            pass
        waited, wall, cpu = run_delay_s() - d0, time.perf_counter() - w0, time.thread_time() - c0
    finally:
        for p in busy:
            p.kill()
            p.wait(timeout=10)
    assert waited > 0.05, f"waited {waited:.3f} s for a core in {wall:.3f} s (cpu {cpu:.3f} s)"
    assert cpu + waited == pytest.approx(wall, abs=0.05)  # a spinning thread either runs or waits for a core
