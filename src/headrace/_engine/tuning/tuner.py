"""AUTOTUNE that measures: one tuner thread per iterator adjusts the stages' settings inside the budgets.

Only arguments given as ``AUTOTUNE`` are tuned: a ``map`` / ``batch``'s ``workers`` (0 = inline) and
``window``, a ``prefetch``'s ``buffer``, an ``interleave``'s ``parallel_slots`` and ``read_ahead``, on the
knobs of ``headrace._engine.tuning.knobs``. The tuner hill-climbs the output rate one knob at a time (a
trial measures, changes one knob, lets it settle, measures again, and keeps the change only if the rate rose
by ``ACCEPT``), converges once every candidate was tried and searches again when the rate drifts by
``DRIFT``; no trial takes the pipeline past the memory budget or ``Options(cpu_budget)``. The candidates,
their order and the budgets' rules, with a picture: docs/design/tuner.md.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..._memory import WAIT_SLICE_S
from ..._sync import Condition
from ..pool.executor import CPU_BOUND_SHARE, ExecutorKind
from ..stage_support import start_thread
from .knobs import Knob, KnobKind, StageStats, StageTuning, workers_start_reason

if TYPE_CHECKING:
    from ..context import IteratorContext

MIN_WINDOW_S = 0.2
MIN_ELEMENTS = 8
MAX_WINDOW_S = 2.0
SETTLE_S = 0.05
ACCEPT = 1.05
CONFIRM = 1.2
DRIFT = 0.25
WATCH_S = 2.0
CONSUMER_WAITS_SHARE = 0.5
"""A prefetch buffer whose consumer waits this share of the time or more is empty: trying no buffer (no
thread, the consumer's thread produces) is a candidate."""
MAX_REOPEN = 4
"""Kept changes per search after which the other stages' rejected changes are not tried again."""
BUSY_SHARE = 0.9
"""Workers computing this share of their time or more: fewer of them is no candidate for the only tuned
compute stage."""
SHARE_DECAY = 0.8
"""Per measured window, how much of a stage's largest CPU share so far still counts (see ``_update_weights``)."""
HISTORY = 32
"""Trials kept for ``report()["history"]`` (``Iterator.explain()``)."""
CHEAP_CALL_S = 100e-6
"""A call shorter than this costs less than handing the element to a thread: inline is a candidate."""
MEMORY_BOUND_SHARE = 0.2
"""A stage whose workers waited this share of their time or more for the memory budget gets no more workers:
they would only wait longer (and worker processes need memory themselves)."""


# ---- candidates: per knob kind, the moves worth a trial ------------------------------------------------
@dataclass(slots=True)
class _Load:
    """What one stage's last window says, for its knobs' moves (``Tuner._load``)."""

    util: float            # share of the workers' time inside the function
    per_call: float        # seconds per call
    per_pull: float        # seconds per element pulled from the input (an interleave's slots: reading it)
    wait_in: float         # share of the workers' time waiting on the input
    room: float            # share of the workers' time waiting for room (the consumer is slower)
    consumer_waits: float  # share of the time the consumer waited on the stage
    io_bound: bool         # a worker uses less than half a core (it waits on I/O)
    memory_bound: bool     # the workers wait for the memory budget (or a worker process was refused)
    compute_stages: int    # tuned compute stages with live iterators


Move = tuple[float, int]
"""A candidate value of a knob and its score (higher: tried first)."""


def _workers_moves(k: Knob, t: StageTuning, load: _Load) -> list[Move]:
    v = k.value
    moves: list[Move] = []
    if not load.memory_bound:
        moves.append((2.0 + load.util, v * 2 if load.io_bound and v >= 2 else v + 1))
    if v > 0 and (load.util < BUSY_SHARE or load.compute_stages > 1):
        # fewer workers help another stage get the CPU, or a stage that waits; never the only compute stage
        # while its workers are busy (a trial that costs a window at half rate)
        moves.append((0.5 + (1 - load.util), v - 1))
    if v > 1 and load.per_call < CHEAP_CALL_S:
        moves.append((1.5, 0))
    return moves


def _window_moves(k: Knob, t: StageTuning, load: _Load) -> list[Move]:
    """``window`` and ``read_ahead``: the elements a stage may hold ahead."""
    v = k.value
    if k.kind is KnobKind.WINDOW and t.value(KnobKind.WORKERS, 1) == 0:
        return []  # inline: nothing is in flight, the window has no effect
    return [(1.0 + load.room, v * 2)] + ([(0.3, max(1, v // 2))] if v > 1 else [])


def _buffer_moves(k: Knob, t: StageTuning, load: _Load) -> list[Move]:
    v = k.value
    moves: list[Move] = [(1.0 + load.wait_in, max(1, v * 2))]
    if v > 0:
        moves.append((0.8, v // 2))
    if v > 1 and load.consumer_waits >= CONSUMER_WAITS_SHARE:
        # the consumer waits on the buffer anyway (it is empty): its thread only adds a hand-off per element;
        # without it the consumer's thread produces (kept only if faster)
        moves.append((1.6, 0))
    return moves


def _slots_moves(k: Knob, t: StageTuning, load: _Load) -> list[Move]:
    v = k.value
    moves = [(1.2, v + 1)] + ([(0.8, v - 1)] if v > 0 else [])
    if v > 0 and load.per_pull < CHEAP_CALL_S:
        # reading an element (a small record from a local file) costs less than handing it over from a
        # thread: every slot read in the consumer's thread (TFRecord shards of 44 KB JPEGs under a parallel
        # map, 1 slot: 15-20% more images/s inline; docs/design/tuner.md)
        moves.append((2.0, 0))
    return moves


MOVES: dict[KnobKind, Callable[[Knob, StageTuning, _Load], list[Move]]] = {
    KnobKind.WORKERS: _workers_moves, KnobKind.WINDOW: _window_moves, KnobKind.READ_AHEAD: _window_moves,
    KnobKind.BUFFER: _buffer_moves, KnobKind.PARALLEL_SLOTS: _slots_moves,
}
"""The moves the tuner tries per knob kind (module docstring: "Candidates")."""


# ---- the tuner ----------------------------------------------------------------------------------------
class _Trial:
    """One candidate change: ``knob`` of ``stage`` to ``new``; more workers bring a proportionally larger
    window (the window bounds the elements in flight, so more workers alone would wait for room). ``donor``
    (a stage and its workers knob): the worker comes from that stage (one fewer there), where ``cpu_budget``
    has no core left for one more."""

    def __init__(self, stage: StageTuning, knob: Knob, new: int,
                 donor: tuple[StageTuning, Knob] | None = None) -> None:
        self.stage = stage
        self.knob = knob
        self.old = knob.value
        self.new = new
        self.changes: list[tuple[StageTuning, KnobKind, int, int, str]] = [(stage, knob.kind, knob.value, new,
                                                                            knob.why)]
        window = stage.knobs.get(KnobKind.WINDOW)
        if knob.kind is KnobKind.WORKERS and window is not None and new > max(1, knob.value):
            scaled = min(window.hi, -(-window.value * new // max(1, knob.value)))
            if scaled > window.value:
                self.changes.append((stage, KnobKind.WINDOW, window.value, scaled, window.why))
        if donor is not None:
            d, dk = donor
            self.changes.append((d, dk.kind, dk.value, dk.value - 1, dk.why))

    def apply(self, why: str) -> None:
        for stage, kind, _old, new, _why in self.changes:
            stage.set(kind, new, why)

    def undo(self) -> None:
        for stage, kind, old, _new, why in reversed(self.changes):
            stage.set(kind, old, why)

    def describe(self) -> str:
        return ", ".join(f"{kind} {old}->{new}" + (f" ({stage.stage})" if stage is not self.stage else "")
                         for stage, kind, old, new, _ in self.changes)


class Tuner:
    """The tuner thread of one iterator (module docstring). ``rate()`` and ``report()`` for ``explain()``."""

    def __init__(self, ctx: IteratorContext, delivered: Callable[[], tuple[int, float] | None]) -> None:
        self.ctx = ctx
        self._delivered = delivered  # () -> (elements handed out, perf_counter of the last) | None: gone
        self.cpu_budget = ctx.cpu_budget
        self.state = "warming up"
        self.trials = 0
        self.accepted: list[str] = []
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY)  # the last trials: stage, change, kept, gain
        self.converged_after_s: float | None = None
        self.last_rate = 0.0
        self.cpu_granted = 0.0
        self._t0 = time.monotonic()
        self._cv = Condition("tuner")
        self._tried: set[tuple[str, KnobKind, int]] = set()  # (stage, knob, value) tried in this search
        self._reopened = 0
        self._weights: dict[str, float] = {}
        self._shares: dict[str, float] = {}  # per stage the largest recent CPU share of its calls (decaying)
        self._prev: dict[str, StageStats] = {}    # per stage its stats at the end of the last window
        self._recent: dict[str, StageStats] = {}  # per stage the change over the last window
        self._thread: threading.Thread | None = None

    # ---- life cycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self._split_cpu()
        self._thread = start_thread("tuner", self._run, None)

    def _split_cpu(self) -> None:
        """Before the first element: ``cpu_budget`` split evenly over the tuned compute stages (each made
        stage took what the ones made before it left, so the innermost had it all); the inner stages get
        the remainder. Workers are counted as 1 core each until measured."""
        stages = [(t, k) for t in list(self.ctx.tree.tunings.values()) if (k := t.compute_workers()) is not None]
        if len(stages) < 2:
            return
        share, extra = divmod(self.cpu_budget, len(stages))
        for i, (t, k) in enumerate(stages):
            value = min(k.hi, share + (1 if i < extra else 0))
            if value != k.value:
                t.set(KnobKind.WORKERS, value, workers_start_reason(
                    value, self.cpu_budget, self.ctx.options.cpu_budget is not None, split_over=len(stages)))

    def threads(self) -> list[threading.Thread]:
        t = self._thread
        return [t] if t is not None else []

    def wake(self) -> None:
        if self._cv.lock.acquire(timeout=0.1):
            try:
                self._cv.notify_all()
            finally:
                self._cv.lock.release()

    def _sleep(self, seconds: float) -> bool:
        """Sleep (timed waits) unless the iterator closes; False when it did."""
        end = time.monotonic() + seconds
        stop = self.ctx.tree.stop
        while not stop.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return True
            with self._cv:
                self._cv.wait(min(WAIT_SLICE_S, left))
        return False

    # ---- measuring ---------------------------------------------------------------------------------
    def _measure(self) -> float | None:
        """The output rate over at least ``MIN_WINDOW_S`` and ``MIN_ELEMENTS`` (None: closed): elements
        between the first and the last delivery of the window over the time between them (no rounding
        to whole elements)."""
        first = self._delivered()
        if first is None:
            return None
        n0, at0 = first
        t0 = time.monotonic()
        if not self._sleep(MIN_WINDOW_S):
            return None
        while True:
            last = self._delivered()
            if last is None:  # the iterator was collected
                return None
            if last[0] - n0 >= MIN_ELEMENTS or time.monotonic() - t0 >= MAX_WINDOW_S:
                break
            if not self._sleep(WAIT_SLICE_S):
                return None
        n1, at1 = last
        rate = (n1 - n0) / (at1 - at0) if n1 > n0 and at1 > at0 else 0.0
        self.last_rate = rate
        self._update_weights()
        return rate

    def _update_weights(self) -> None:
        """Per stage, the counters' change over the last window (``_recent``); per tuned compute stage the
        cores one worker uses (the CPU share of its calls; a process 1)."""
        granted = 0.0
        for t in list(self.ctx.tree.tunings.values()):
            now = t.stats()
            recent = self._recent[t.stage] = now.since(self._prev.get(t.stage, StageStats()))
            self._prev[t.stage] = now
            k = t.compute_workers()
            if k is None:
                continue
            busy, cpu = recent.busy_s, recent.cpu_s
            if t.executor is not None and t.executor.kind == ExecutorKind.PROCESS:
                w = 1.0
            elif busy > 0.01 and not t.busy():
                share = cpu / busy
                # CPU work counts a whole core: on a loaded machine a CPU-bound call is preempted and its share
                # looks small, but it would use the core if it could. The largest share of the recent windows
                # counts (SHARE_DECAY per window: a window in which other processes took the cores must not make
                # CPU work look cheap, while a one-off burst such as a first call's imports fades); while its
                # executor measures the function, calls wait for their turn inside it: not measured at all.
                share = max(share, self._shares.get(t.stage, 0.0) * SHARE_DECAY)
                self._shares[t.stage] = share
                w = 1.0 if share >= CPU_BOUND_SHARE else max(0.02, share)
            else:
                w = self._weights.get(t.stage, 1.0)
            self._weights[t.stage] = w
            granted += w * k.value
        self.cpu_granted = granted
        self._enforce_cpu()

    def _cost(self, stage: StageTuning, knob: Knob, value: int) -> float:
        """The CPU granted if ``knob`` of ``stage`` took ``value``."""
        if not knob.compute:
            return self.cpu_granted
        w = self._weights.get(stage.stage, 1.0)
        return self.cpu_granted + w * (value - knob.value)

    # ---- candidates --------------------------------------------------------------------------------
    def _load(self, t: StageTuning, compute_stages: int) -> _Load:
        recent = self._recent.get(t.stage)
        st = StageStats.of(recent) if recent else t.stats()
        per_call = st.busy_s / st.calls if st.calls else 0.0
        span = max(1e-9, st.worker_time_s)
        ex = t.executor
        return _Load(util=st.busy_s / span, per_call=per_call,
                     per_pull=st.input_s / st.calls if st.calls else float("inf"),
                     wait_in=st.input_s / span, room=st.room_s / span,
                     consumer_waits=st.consumer_wait_s / max(1e-9, st.elapsed_s),
                     io_bound=self._weights.get(t.stage, 1.0) < 0.5,
                     memory_bound=(st.budget_s / span >= MEMORY_BOUND_SHARE
                                   or (ex is not None and ex.memory_limited(MAX_WINDOW_S))),
                     compute_stages=compute_stages)

    def _candidates(self) -> list[tuple[StageTuning, Knob, int, tuple[StageTuning, Knob] | None]]:
        out: list[tuple[float, StageTuning, Knob, int, tuple[StageTuning, Knob] | None]] = []
        compute_stages = self._compute_stages()
        tunings = [t for t in list(self.ctx.tree.tunings.values()) if not t.busy() and t.members()]
        loads = {t.stage: self._load(t, compute_stages) for t in tunings}
        for t in tunings:
            load = loads[t.stage]
            for k in t.knobs.values():
                v = k.value
                for score, move in MOVES[k.kind](k, t, load):
                    new = max(k.lo, min(k.hi, move))
                    if new == v or (t.stage, k.kind, new) in self._tried:
                        continue
                    donor = None
                    if new > v and self._cost(t, k, new) > self.cpu_budget + 1e-9:
                        donor = self._donor(t, k, new, tunings, loads)
                        if donor is None:
                            continue
                    out.append((score, t, k, new, donor))
        out.sort(key=lambda c: -c[0])
        return [(t, k, new, donor) for _s, t, k, new, donor in out]

    def _donor(self, t: StageTuning, k: Knob, new: int, tunings: list[StageTuning],
               loads: dict[str, _Load]) -> tuple[StageTuning, Knob] | None:
        """Where ``cpu_budget`` has no core left for one more worker of ``t`` (its workers busier than another
        tuned compute stage's): the least busy other stage whose one worker frees enough, or None. The tuner
        then moves a worker to the slower stage instead of adding one (a cheap map after a decoding one, both
        started with half the cores, left the decoding one a single worker)."""
        if k.kind is not KnobKind.WORKERS or new != k.value + 1:
            return None
        need = self._cost(t, k, new) - self.cpu_budget
        best: tuple[float, StageTuning, Knob] | None = None
        for d in tunings:
            dk = d.compute_workers()
            if d is t or dk is None or dk.value <= dk.lo:
                continue
            util = loads[d.stage].util
            if util >= loads[t.stage].util or self._weights.get(d.stage, 1.0) < need - 1e-9:
                continue
            if best is None or util < best[0]:
                best = (util, d, dk)
        return None if best is None else (best[1], best[2])

    def _compute_stages(self) -> int:
        return sum(1 for t in list(self.ctx.tree.tunings.values()) if t.compute_workers() is not None and t.members())

    def _enforce_cpu(self) -> None:
        """Take workers away while measured use exceeds the CPU budget (a stage's calls turned more CPU-bound):
        one worker at a time from the stage whose one worker covers the excess at the least cost (else the
        stage whose workers weigh most), down to 0 (inline: the consumer's thread, not a worker)."""
        while self.cpu_granted > self.cpu_budget + 1e-9:
            excess = self.cpu_granted - self.cpu_budget
            options = []
            for t in list(self.ctx.tree.tunings.values()):
                k = t.compute_workers()
                if k is not None and k.value > k.lo:
                    options.append((self._weights.get(t.stage, 1.0), t, k))
            if not options:
                return
            covering = [o for o in options if o[0] >= excess - 1e-9]
            w, t, k = min(covering, key=lambda o: o[0]) if covering else max(options, key=lambda o: o[0])
            t.set(KnobKind.WORKERS, k.value - 1, f"reduced to stay inside cpu_budget={self.cpu_budget}")
            self.cpu_granted -= w

    # ---- the loop ----------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        except Exception as e:  # the tuner must never take the pipeline down: report and stop tuning
            self.state = f"stopped after an error: {type(e).__name__}: {e}"

    def _loop(self) -> None:
        base = self._measure()
        settling = False
        while base is not None:
            candidates = self._candidates()
            if any(t.busy() for t in list(self.ctx.tree.tunings.values())):
                # a map's executor is measuring the function or starting processes: its stage is not tuned
                # meanwhile, and the rate of the window that spans the change is no base for the others
                settling = True
                if not candidates:
                    self.state = "waiting for a map's executor to settle (measuring the function, starting processes)"
                    if not self._sleep(MIN_WINDOW_S):
                        return
                    base = self._measure()
                    continue
            elif settling:
                settling = False
                base = self._measure()
                continue
            if not candidates:
                if self.converged_after_s is None:
                    self.converged_after_s = round(time.monotonic() - self._t0, 2)
                self.state = "converged: no change made it faster"
                if not self._sleep(WATCH_S):
                    return
                rate = self._measure()
                if rate is None:
                    return
                if base > 0 and abs(rate - base) / base > DRIFT:
                    self._tried.clear()  # the conditions changed: search again
                    self._reopened = 0
                    self.converged_after_s = None
                base = rate
                continue
            t, k, new, donor = candidates[0]
            trial = _Trial(t, k, new, donor)
            self.state = f"trying {t.stage} {trial.describe()}"
            trial.apply("trial")
            self.trials += 1
            if not self._sleep(SETTLE_S):
                return
            rate = self._measure()
            if rate is None:
                return
            self._tried.add((t.stage, k.kind, new))
            if base * ACCEPT <= rate < base * CONFIRM:  # a small gain: measure once more before keeping it
                again = self._measure()
                if again is None:
                    return
                rate = (rate + again) / 2
            kept = base > 0 and rate >= base * ACCEPT
            self.history.append({"at_s": round(time.monotonic() - self._t0, 2), "stage": t.stage,
                                 "change": trial.describe(), "kept": kept,
                                 "gain": round(rate / base, 2) if base > 0 else None})
            if kept:
                trial.apply(f"tuned: {trial.describe()} raised the rate {rate / max(base, 1e-9):.2f}x "
                            f"({base:.0f} -> {rate:.0f} elements/s)")
                self.accepted.append(f"{t.stage}: {trial.describe()}")
                # Each setting is tried once per search (a search ends when nothing is left to try; a drift
                # starts a new one): the number of trials is bounded and the tuner converges even where
                # noise makes some changes look good. Going straight back is not tried.
                self._tried.add((t.stage, k.kind, trial.old))
                if self._reopened < MAX_REOPEN:
                    # the other stages' rejected changes were measured against the old bottleneck (a prefetch
                    # buffer cannot help while the map below it is slow): try them again, a bounded number of times
                    self._reopened += 1
                    self._tried = {e for e in self._tried if e[0] == t.stage}
                base = rate
            else:
                trial.undo()
                if not self._sleep(SETTLE_S):
                    return
                again = self._measure()
                if again is None:
                    return
                base = again

    def report(self) -> dict[str, Any]:
        return {"state": self.state, "trials": self.trials, "accepted": list(self.accepted),
                "converged_after_s": self.converged_after_s, "rate_per_s": round(self.last_rate, 1),
                "cpu_budget": self.cpu_budget, "cpu_granted": round(self.cpu_granted, 2),
                "history": [dict(h) for h in list(self.history)]}  # (list() in C: the tuner thread appends)
