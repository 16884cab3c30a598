"""``executor="auto"``'s decision from measurements: threads or worker processes, and when a decision proved
wrong. Pure functions of timed calls (no clock is read here: the tests hand them synthetic measurements);
:class:`~headrace._engine.pool.auto_executor.AutoExecutor` measures and applies them. Why it measures these:
docs/design/pool.md (threads or processes).

What is measured, per call on a thread: its wall time, the CPU time of the calling thread and the time that
thread waited for a core (``run_delay_s``: other processes loading the machine). The *CPU the threads got
together* while calls ran, ``sum(cpu) / covered time``, over the CPU one call alone got (``cpu / wall``), is
~1.0 for a function that holds the GIL however many threads run it, ~the thread count for one that releases
it (the machine's load takes the same share of each runnable thread). The run delay tells a call that waits
(I/O) from a CPU-bound one on a loaded machine, and gaps between calls spent waiting for a core from a slow
input. Per run on worker processes: its wall time, the worker's CPU time and the time the worker
waited for a core, so the cores the workers used together while runs were in flight is compared with the
one core a thread alone computes on.
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
"""Some call ran (or a thread waited for a core between calls) this share of the measured span: the function,
not the input, set the pace (an input slower than the function leaves gaps between the calls: threads keep
up). Without the waits for a core, calls serialized by the GIL on a machine at load 11 covered 58%."""
MIN_OVERLAP = 1.3
"""Calls that overlapped this much (sum of walls / covered time) were not starved by the input, whatever the gaps
between them (calls of a GIL-bound function longer than the switch interval run in 5 ms slices, staggered)."""
GIL_WAIT_SHARE = 0.12
"""Calls that ran at once (``MIN_OVERLAP``) and spent this share of their time (more than a solo call did)
neither on the CPU nor waiting for a core waited for the GIL: processes. ~0.5 for two threads of a GIL-bound
function, ~0 for one that releases it, whatever the load: a thread that waits for a core is runnable and
counted as such. (Judged by CPU alone, the load decides: where the machine's scheduler shares a core between
a process's threads, two threads of numpy's sort got no more CPU than one, at load 12.)"""
RELEASED_CORES = 1.15
"""Threads that got together more than this many cores while calls ran at once ran the function at the same
time: it releases the GIL (the threads of one that holds it get at most one core together, however loaded the
machine: a thread waiting for the GIL sleeps). Checked first; the GIL-wait and scaling figures decide below it
(a JPEG decode beside its pipeline's Python threads waited 13% of its time for the GIL while its two threads
got 1.5 cores)."""
THREAD_SCALING = 1.4
"""Calls that ran at once on threads and got together less than this many times the CPU one call alone got
(``cpu / wall``, the median solo call's) were serialized, by the GIL or by a machine without a second core for
them now: processes (threads are chosen only where both the GIL wait and the CPU say the GIL is released).
~1.0 for a GIL-bound function whatever the load; at load 12 its threads, waking on a loaded machine, were
counted waiting for a core rather than for the GIL (a GIL wait of 6%)."""
MIN_PROCESS_CALL_S = 100e-6
"""Shorter calls stay on threads: a run of elements crosses to a worker in one message (~0.1-0.3 ms a
round trip), and elements this short gain little beside the parent's own per-element work."""
WRONG_SHARE = 0.9
"""Threads whose calls went at less than this share of one thread's rate (a solo call's) ran below
sequential: in a check, wrong whatever the figures say of the GIL."""
PROCESS_WRONG_SHARE = 0.75
"""Worker processes that computed together less than this share of what one call alone did on a thread were
wrong (with margin: at load 11, 2 workers of a 0.2 ms loop measured 0.82 of a core, which still beat threads)."""
BELOW_THREADS = 0.9
"""Worker processes whose elements per second of computing stayed below this share of what the threads did
when they were measured were wrong, however many runs were in flight: under a budget that held one worker
(the seed image pipeline's 256 MiB), a JPEG decode went at ~930/s on it, ~1,100/s on two threads."""
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
        """CPU time over the time the thread could run (wall less the time it waited for a core), of the call
        with the most: a call that waits does so every time, a CPU-bound one shows it in one call at least
        (at load 11, a regex tokenizer's 4 calls averaged 13%, with the parent's other threads holding the GIL)."""
        return max(c / max(1e-9, r) for _, c, r in self.calls)

    def cores(self) -> float:
        """The CPU one call got: cpu over wall time (the median call's: the max, taken when the load dipped,
        made two threads of numpy's sort on a loaded machine look 0.71x)."""
        return statistics.median(c / max(1e-9, w) for w, c, _ in self.calls)

    def runnable_cores(self) -> float:
        """The cores one call used or waited for: cpu + time waiting for a core, over wall time (of the call with
        the most)."""
        return max((c + w - r) / max(1e-9, w) for w, c, r in self.calls)


Call = tuple[float, float, float, float, float]
"""A call timed on a thread: ``(start, end, cpu, run_delay, gap_delay)``: the run delay inside the call, and the
run delay of its thread since its previous timed call ended (waiting for a core between calls)."""


class CallLog:
    """Calls timed while several threads run them (``Call`` each). Thread-safe."""

    def __init__(self, name: str) -> None:
        self._lock = Lock(name)
        self.calls: list[Call] = []
        self.threads: set[int] = set()  # the threads that made them
        self._last: dict[int, float] = {}  # a thread's run delay when its last timed call ended
        self._warm: list[Call] = []  # the calls but each thread's first

    def add(self, start: float, end: float, cpu: float, delay0: float, delay1: float, thread: int) -> None:
        """Note one call of thread ``thread``; ``delay0`` / ``delay1``: the thread's run delay so far at its start
        and end (``run_delay_s``)."""
        with self._lock:
            gap = max(0.0, delay0 - self._last.get(thread, delay0))
            self._last[thread] = delay1
            self.calls.append((start, end, cpu, max(0.0, min(delay1 - delay0, end - start - cpu)), gap))
            if thread in self.threads:
                self._warm.append(self.calls[-1])
            self.threads.add(thread)

    def settled(self, most: int, span_s: float) -> list[Call]:
        """The calls noted so far less each thread's first (its own start: a decoder's per-thread set-up), once
        there are ``most`` of them and they span ``span_s`` seconds; else ``[]`` (not yet)."""
        with self._lock:
            warm = self._warm
            if len(warm) < most or warm[-1][1] - warm[0][0] < span_s:
                return []
            return list(warm)

    def take(self) -> tuple[list[Call], int]:
        """The calls noted so far and how many threads made them (the log starts empty again)."""
        with self._lock:
            calls, threads, self.calls, self.threads, self._warm = self.calls, self.threads, [], set(), []
        return calls, len(threads)


def concurrency(calls: list[Call]) -> dict[str, float]:
    """The figures of calls that threads ran at once (``CallLog``): ``busy`` (covered / span; the time the
    threads waited for a core between calls counts as busy: the machine's load, not a slow input, kept them
    from the next call), ``overlap`` (sum of walls / covered: calls in flight on average), ``cores`` (sum of
    cpu / covered: the CPU the threads got together), ``wait`` (the share of the calls' time neither on the
    CPU nor waiting for a core) and ``rate`` (calls per second of covered time)."""
    t0 = min(c[0] for c in calls)
    t1 = max(c[1] for c in calls)
    cov = max(1e-9, covered([(c[0], c[1]) for c in calls]))
    gaps = sum(c[4] for c in calls)
    return {"busy": min(1.0, (cov + gaps) / max(1e-9, t1 - t0)), "overlap": sum(c[1] - c[0] for c in calls) / cov,
            "cores": sum(c[2] for c in calls) / cov, "rate": len(calls) / cov,
            "wait": 1.0 - sum(c[2] + c[3] for c in calls) / max(1e-9, sum(c[1] - c[0] for c in calls))}


def first_verdict(solo: Solo, pair: list[Call]) -> tuple[str | None, str, dict[str, Any]]:
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
    return _threads_verdict(pair, solo, figures, "2 threads")


def _threads_verdict(calls: list[Call], solo: Solo, figures: dict[str, Any],
                     who: str) -> tuple[str, str, dict[str, Any]]:
    c = concurrency(calls)
    seq_rate = 1.0 / max(1e-9, solo.wall())
    wait = max(0.0, c["wait"] - (1.0 - solo.runnable_cores()))
    scaling = c["cores"] / max(1e-9, solo.cores())
    figures.update(busy=round(c["busy"], 2), overlap=round(c["overlap"], 2), gil_wait=round(wait, 2),
                   thread_scaling=round(scaling, 2),
                   thread_cores=round(c["cores"], 2), thread_rate=round(c["rate"], 1),
                   sequential_rate=round(seq_rate, 1))
    below = "below " if c["rate"] < WRONG_SHARE * seq_rate else ""
    rates = f"{c['rate']:.0f} calls/s, {below}one thread alone {seq_rate:.0f}/s"
    if c["overlap"] >= MIN_OVERLAP:
        ran = f"{who} ran {c['overlap']:.2f} calls at once"
        if c["cores"] >= RELEASED_CORES:
            return "thread", f"{ran} and got {c['cores']:.2f} cores together (it releases the GIL)", figures
        if wait >= GIL_WAIT_SHARE:
            return "process", (f"{ran}, each waiting {wait:.0%} of its time for neither a core nor its own CPU work: "
                               f"the GIL (it holds the GIL); {rates}"), figures
        if scaling < THREAD_SCALING:
            return "process", (f"{ran} but got only {scaling:.2f}x the CPU one call alone got (it holds the GIL, or "
                               f"the machine has no second core for them now); {rates}"), figures
        return "thread", f"{ran}, got {scaling:.2f}x the CPU one call alone got (it releases the GIL)", figures
    if c["busy"] >= BACK_TO_BACK:
        return "process", (f"{who} never ran calls at once but back to back ({c['busy']:.0%} of the time): "
                           f"serialized (it holds the GIL); {rates}"), figures
    return "thread", (f"the calls ran only {c['busy']:.0%} of the time, {c['overlap']:.2f} at once, while {who} "
                      "took elements (the input is slower than the function)"), figures


def threads_wrong(calls: list[Call], solo: Solo) -> tuple[bool, str, dict[str, Any]]:
    """A check of a stage on threads (``calls`` of all its threads over a window; ``solo``: the first solo
    calls): ``(wrong, why, figures)``, wrong when they were serialized by the GIL while the function set the
    pace, or computed fewer elements per second over the window than one thread alone (``WRONG_SHARE``)."""
    kind, why, figures = _threads_verdict(calls, solo, {}, "the threads")
    span = max(1e-9, max(c[1] for c in calls) - min(c[0] for c in calls))
    rate, seq_rate = len(calls) / span, 1.0 / max(1e-9, solo.wall())
    figures["stage_rate"] = round(rate, 1)
    if kind == "thread" and rate < WRONG_SHARE * seq_rate:  # whatever the cause: below sequential is wrong
        return True, (f"the threads computed {rate:.0f} elements/s, below one thread alone ({seq_rate:.0f}/s) "
                      f"({why})"), figures
    return kind == "process", why, figures


Run = tuple[float, float, int, float, float]
"""A run on a worker process: ``(start, end, elements, cpu_s, delay_s)``: its wall interval in the parent, its
elements, the worker's CPU time for it and the time the worker waited for a core meanwhile."""


def processes_wrong(runs: list[Run], solo: Solo, threads_rate: float | None = None) -> tuple[bool, str, dict[str, Any]]:
    """A check of a stage on worker processes (``runs`` over a window; ``solo``: the first solo calls;
    ``threads_rate``: the elements per second of computing two threads reached when measured, if they were):
    ``(wrong, why, figures)``. With ``BUSY_WORKERS`` runs in flight (the stage set the pace), workers that
    computed (or waited for a core) together less than ``PROCESS_WRONG_SHARE`` of the cores one call alone used
    on a thread computed fewer elements than one thread alone would have: the round trips cost more than the
    second interpreter gained. Load-corrected, as the threads' cores are. Wrong too, whatever was in flight: a
    rate below ``BELOW_THREADS`` of the threads' (fewer workers than threads, e.g. the budget held one)."""
    wall1 = solo.wall()
    cov = max(1e-9, covered([(r[0], r[1]) for r in runs]))
    rate = sum(r[2] for r in runs) / cov
    busy = sum(r[1] - r[0] for r in runs) / cov
    cores = sum(r[3] + r[4] for r in runs) / cov
    seq_rate = 1.0 / max(1e-9, wall1)
    figures = {"process_rate": round(rate, 1), "runs_in_flight": round(busy, 2), "process_cores": round(cores, 2),
               "sequential_rate": round(seq_rate, 1)}
    one = solo.runnable_cores()
    if busy >= BUSY_WORKERS and cores < PROCESS_WRONG_SHARE * one:
        why = (f"{busy:.1f} runs in flight on worker processes computed only {cores:.2f} cores' worth ({rate:.0f} "
               f"elements/s; one call alone on a thread: {one:.2f} cores, {seq_rate:.0f}/s)")
        return True, why, figures
    if threads_rate is not None and rate < BELOW_THREADS * threads_rate:
        return True, (f"worker processes computed {rate:.0f} elements/s ({busy:.1f} runs in flight), below the "
                      f"{threads_rate:.0f}/s of two threads"), figures
    return False, f"worker processes computed {cores:.2f} cores' worth ({rate:.0f} elements/s)", figures
