"""``executor="auto"``'s decision from measurements: threads or worker processes, and when a decision proved
wrong. Pure functions of timed calls (no clock is read here: the tests hand them synthetic measurements);
:class:`~headrace._engine.pool.auto_executor.AutoExecutor` measures and applies them. Why it measures these:
docs/design/pool.md (threads or processes).

What is measured, per call on a thread: its wall time, the CPU time of the calling thread and the time that
thread waited for a core (``run_delay_s``: other processes loading the machine). A thread that neither ran nor
waited for a core waited for something else: for a CPU-bound call (``CPU_BOUND_SHARE``), the GIL. So the
*cores the threads used* while calls ran, ``sum(cpu + run delay) / covered time``, is ~1.0 for a function
that holds the GIL however many threads run it (and however loaded the machine is), ~the thread count for
one that releases it. Per run on worker processes: its wall time and element count, so the processes' rate
while they computed (elements / covered time) is compared with one thread's (1 / a solo call's wall time).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from ..._sync import Lock

CPU_BOUND_SHARE = 0.25
"""A call below this CPU share waits (sleep, I/O: ~0.01-0.1). The share is of the time the thread could run
(``run_delay_s``: the time it waited for a core while other processes loaded the machine is left out), so a
CPU-bound call shows ~1.0 however loaded the machine is (uncorrected, it fell to 0.12 beside 3 busy
processes on 2 cores, and "auto" took a GIL-bound function for one that waits)."""
BACK_TO_BACK = 0.8
"""Some call ran this share of the measured span (the union of the calls' intervals): the function, not the
input, set the pace (an input slower than the function leaves gaps between the calls: threads keep up)."""
THREAD_CORES = 1.4
"""Threads that used (ran or waited for a core) fewer cores than this together while their calls ran were
serialized by the GIL: processes. 1.0 for a GIL-bound function, 2.0 for one that releases it on 2 threads."""
MIN_PROCESS_CALL_S = 100e-6
"""Shorter calls stay on threads: a run of elements crosses to a worker in one message (~0.1-0.3 ms a
round trip), and elements this short gain little beside the parent's own per-element work."""
WRONG_SHARE = 0.9
"""A stage whose calls went at less than this share of one thread's rate (a solo call's) was wrong."""
BUSY_WORKERS = 1.5
"""Runs on processes are judged only while this many were in flight on average (the stage, not its input
or consumer, set the pace)."""


def covered(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals (seconds)."""
    total, reach = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e > reach:
            total += e - max(s, reach)
            reach = e
    return total


@dataclass
class Solo:
    """Calls timed one at a time: ``(wall, cpu, runnable)`` each (``runnable``: wall less the time the thread
    waited for a core)."""

    calls: list[tuple[float, float, float]] = field(default_factory=list)

    def wall(self) -> float:
        """The median call's wall time (a call preempted by another process is an outlier)."""
        return statistics.median(w for w, _, _ in self.calls)

    def cpu_share(self) -> float:
        return sum(c for _, c, _ in self.calls) / max(1e-9, sum(r for _, _, r in self.calls))


class CallLog:
    """Calls timed while several threads run them: ``(start, end, cpu, run_delay)`` each. Thread-safe."""

    def __init__(self, name: str) -> None:
        self._lock = Lock(name)
        self.calls: list[tuple[float, float, float, float]] = []
        self.threads: set[int] = set()  # the threads that made them

    def add(self, start: float, end: float, cpu: float, delay: float, thread: int) -> None:
        """Note one call of thread ``thread``."""
        with self._lock:
            self.calls.append((start, end, cpu, delay))
            self.threads.add(thread)

    def take(self) -> tuple[list[tuple[float, float, float, float]], int]:
        """The calls noted so far and how many threads made them (the log starts empty again)."""
        with self._lock:
            calls, threads, self.calls, self.threads = self.calls, self.threads, [], set()
        return calls, len(threads)


def concurrency(calls: list[tuple[float, float, float, float]]) -> dict[str, float]:
    """The figures of calls that threads ran at once (``CallLog``): ``busy`` (covered / span), ``overlap``
    (sum of walls / covered: calls in flight on average), ``cores`` (sum of cpu + run delay / covered: the
    cores they used or waited for together) and ``rate`` (calls per second of covered time)."""
    t0 = min(s for s, _, _, _ in calls)
    t1 = max(e for _, e, _, _ in calls)
    cov = max(1e-9, covered([(s, e) for s, e, _, _ in calls]))
    return {"busy": cov / max(1e-9, t1 - t0), "overlap": sum(e - s for s, e, _, _ in calls) / cov,
            "cores": sum(c + d for _, _, c, d in calls) / cov, "rate": len(calls) / cov}


def first_verdict(solo: Solo, pair: list[tuple[float, float, float, float]]
                  ) -> tuple[str | None, str, dict[str, Any]]:
    """From calls timed one at a time (``solo``) and two at a time (``pair``, None while too few): ``("thread"
    | "process" | None (not yet), why, figures)``."""
    wall1, share = solo.wall(), solo.cpu_share()
    figures: dict[str, Any] = {"solo_call_ms": round(wall1 * 1e3, 3), "cpu_share": round(share, 3)}
    if share < CPU_BOUND_SHARE:
        return "thread", f"a call spends {share:.0%} of its time on the CPU (it waits: threads overlap it)", figures
    if wall1 < MIN_PROCESS_CALL_S:
        return "thread", (f"a call takes {wall1 * 1e6:.0f} us, less than a worker process's round trip is worth "
                          f"(~{MIN_PROCESS_CALL_S * 1e6:.0f} us)"), figures
    if not pair:
        return None, "", figures
    return _threads_verdict(pair, wall1, figures, "2 threads")


def _threads_verdict(calls: list[tuple[float, float, float, float]], wall1: float, figures: dict[str, Any],
                     who: str) -> tuple[str, str, dict[str, Any]]:
    c = concurrency(calls)
    seq_rate = 1.0 / max(1e-9, wall1)
    figures.update(busy=round(c["busy"], 2), overlap=round(c["overlap"], 2), thread_cores=round(c["cores"], 2),
                   thread_rate=round(c["rate"], 1), sequential_rate=round(seq_rate, 1))
    if c["busy"] < BACK_TO_BACK:
        return "thread", (f"the calls ran only {c['busy']:.0%} of the time while {who} took elements (the input "
                          "is slower than the function)"), figures
    if c["cores"] >= THREAD_CORES:
        return "thread", f"{who} used {c['cores']:.2f} cores together (it releases the GIL)", figures
    below = "below " if c["rate"] < WRONG_SHARE * seq_rate else ""
    slower = f"; {c['rate']:.0f} calls/s, {below}one thread alone {seq_rate:.0f}/s"
    return "process", (f"{who} used only {c['cores']:.2f} cores together while calls ran {c['busy']:.0%} of the "
                       f"time (it holds the GIL){slower}"), figures


def threads_wrong(calls: list[tuple[float, float, float, float]], wall1: float
                  ) -> tuple[bool, str, dict[str, Any]]:
    """A check of a stage on threads (``calls`` of all its threads over a window): ``(wrong, why, figures)``,
    wrong when they were serialized by the GIL while the function set the pace."""
    figures: dict[str, Any] = {}
    kind, why, figures = _threads_verdict(calls, wall1, figures, "the threads")
    return kind == "process", why, figures


def processes_wrong(runs: list[tuple[float, float, int]], wall1: float) -> tuple[bool, str, dict[str, Any]]:
    """A check of a stage on worker processes (``runs``: ``(start, end, elements)`` over a window):
    ``(wrong, why, figures)``, wrong when, with ``BUSY_WORKERS`` runs in flight, they computed fewer elements
    per second than one thread alone (``WRONG_SHARE`` of ``1 / wall1``)."""
    cov = max(1e-9, covered([(s, e) for s, e, _ in runs]))
    rate = sum(n for _, _, n in runs) / cov
    busy = sum(e - s for s, e, _ in runs) / cov
    seq_rate = 1.0 / max(1e-9, wall1)
    figures = {"process_rate": round(rate, 1), "runs_in_flight": round(busy, 2), "sequential_rate": round(seq_rate, 1)}
    if busy >= BUSY_WORKERS and rate < WRONG_SHARE * seq_rate:
        return True, (f"worker processes computed {rate:.0f} elements/s with {busy:.1f} runs in flight, below one "
                      f"thread alone ({seq_rate:.0f}/s)"), figures
    return False, f"worker processes computed {rate:.0f} elements/s (one thread alone {seq_rate:.0f}/s)", figures
