"""``executor="auto"``'s decision (``headrace._engine.pool.executor.AutoExecutor._maybe_decide``) from given
measurements, and the load correction of its CPU share.

A GIL-bound function whose calls are shorter than the switch interval holds the GIL from a call's start to its
end: two threads never run calls at once, they run them back to back. Read as "the input is slower than the
function", that kept such a map on threads (``bench/autotune.py``'s gil_map in 2 runs of 4 on both sides of the
#23 refactor). And a CPU-bound call on a machine loaded by other processes showed a CPU share of 0.12-0.45
(cpu / wall), below ``CPU_BOUND_SHARE``: "it waits".
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import headrace as hr
from headrace._engine.context import IteratorContext
from headrace._engine.pool.executor import BACK_TO_BACK, SOLO_CALLS, AutoExecutor, ExecutorKind, covered, run_delay_s
from headrace._memory import budget_for

# Holds time, CPU-share or scaling bounds: under pytest-xdist it runs while the other worker waits.
pytestmark = pytest.mark.alone

CALL_S = 0.0013  # a pure-Python call of bench/python_map.py's size, shorter than the 5 ms switch interval


def _auto(monkeypatch) -> AutoExecutor:
    ex = AutoExecutor(lambda x: x, lambda x: x, "map(f)", IteratorContext(hr.Options(), budget_for(None)), 2, 2)
    monkeypatch.setattr(ex, "_make_processes", lambda why: True)  # decide, start nothing
    return ex


def _solo(ex: AutoExecutor, cpu: float = CALL_S, wall: float = CALL_S, runnable: float = CALL_S) -> None:
    ex._solo[:] = [(wall, cpu, runnable)] * SOLO_CALLS


def _pairs(gap_s: float, overlap: bool, n: int = 8) -> list[tuple[float, float, float]]:
    """``n`` pair-phase calls of ``CALL_S``: two at once (``overlap``) or one after the other, ``gap_s`` apart."""
    out, t = [], 0.0
    for i in range(n):
        s = t if not overlap or i % 2 == 0 else t - CALL_S
        out.append((s, s + (2 * CALL_S if overlap else CALL_S), CALL_S))
        t = s + (2 * CALL_S if overlap else CALL_S) + gap_s
    return out


def _decided(monkeypatch, pairs: list[tuple[float, float, float]], probe_late_s: float | None = None) -> AutoExecutor:
    """An executor that measured 4 solo calls of ``CALL_S`` at full CPU, then ``pairs`` (and the probe
    ``probe_late_s`` late 8 times), and decided."""
    ex = _auto(monkeypatch)
    _solo(ex)
    ex._pair[:] = pairs
    if probe_late_s is not None:
        ex._probe_late[:] = [probe_late_s] * 8
    ex._maybe_decide()
    return ex


def test_calls_that_never_ran_at_once_but_back_to_back_are_gil_bound_not_a_slow_input(monkeypatch):
    ex = _decided(monkeypatch, _pairs(gap_s=0.00005, overlap=False))
    assert ex.kind is ExecutorKind.PROCESS, ex.why
    assert "back to back" in ex.why and "holds the GIL" in ex.why
    assert ex.measured["busy"] >= BACK_TO_BACK and ex.measured["overlap"] < 1.3


def test_calls_with_gaps_between_them_wait_for_a_slow_input(monkeypatch):
    ex = _decided(monkeypatch, _pairs(gap_s=CALL_S, overlap=False))
    assert ex.kind is ExecutorKind.THREAD and "input is slower" in ex.why, ex.why


def test_the_probe_still_decides_that_serialized_calls_release_the_gil(monkeypatch):
    # the probe woke at once while calls ran: they release the GIL
    ex = _decided(monkeypatch, _pairs(gap_s=0.00005, overlap=False), probe_late_s=0.0001)
    assert ex.kind is ExecutorKind.THREAD and "releases the GIL" in ex.why, ex.why


def test_overlapping_calls_that_hold_the_gil_still_go_to_processes(monkeypatch):
    ex = _decided(monkeypatch, _pairs(gap_s=0.0, overlap=True), probe_late_s=0.004)
    assert ex.kind is ExecutorKind.PROCESS and "waited 4.0 ms" in ex.why, ex.why


def test_the_cpu_share_leaves_out_the_time_spent_waiting_for_a_core(monkeypatch):
    ex = _auto(monkeypatch)
    _solo(ex, cpu=CALL_S, wall=8 * CALL_S, runnable=CALL_S)  # preempted 7/8 of the time by other processes
    ex._maybe_decide()
    assert ex.measured["cpu_share"] == pytest.approx(1.0)
    assert ex.kind is ExecutorKind.MEASURING  # not decided "it waits": the pair phase comes next
    _solo(ex, cpu=CALL_S / 20, wall=CALL_S, runnable=CALL_S)  # it sleeps: 5% CPU of the time it could run
    ex._maybe_decide()
    assert ex.kind is ExecutorKind.THREAD and "CPU" in ex.why, ex.why


def test_covered_is_the_length_of_a_union_of_intervals():
    assert covered([]) == 0.0
    assert covered([(0, 2), (1, 3), (5, 6)]) == pytest.approx(4.0)
    assert covered([(1, 4), (0, 2), (2, 3)]) == pytest.approx(4.0)


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
