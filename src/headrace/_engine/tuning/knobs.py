"""AUTOTUNE's vocabulary: the kinds of knob a stage exposes, a knob, the typed counters a tunable stage
reports, and the per-stage record (:class:`StageTuning`) that the tuner (``headrace._engine.tuning.tuner``) moves and
``Iterator.explain()`` (``headrace._engine.tuning.explain``) reads.

A tunable stage (:class:`Tunable`: a parallel ``map`` / ``batch`` / ``prefetch``, an ``interleave``)
registers its knobs with :func:`stage_tuning` while it is built, is told a knob's new value by
``apply_knob(kind, value)`` and reports :class:`StageStats` from ``tuning_stats()``: counters (summed
over the stage's iterators, the closed ones included) and the settings it runs with now.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from ..._sync import Lock as TimedLock

if TYPE_CHECKING:
    from ..context import IteratorContext
    from ..pool.executor import Executor

MAX_WORKERS = 64
MAX_WINDOW = 512
MAX_BUFFER = 64


class KnobKind(StrEnum):
    """What a knob sets (a ``str``: ``explain()`` and the tuner's history print it as its value)."""

    WORKERS = "workers"
    """Threads computing a ``map`` / ``batch`` stage's calls (0: inline, in the consumer's thread)."""
    WINDOW = "window"
    """Elements in flight in a ``map`` / ``batch`` stage."""
    BUFFER = "buffer"
    """A ``prefetch`` buffer (0: no thread, the consumer's thread produces)."""
    PARALLEL_SLOTS = "parallel_slots"
    """``interleave`` slots read by a thread of their own."""
    READ_AHEAD = "read_ahead"
    """Elements each ``interleave`` slot reads ahead."""


class Knob:
    """One tunable setting of a stage: its value, range, and why it has that value."""

    __slots__ = ("compute", "hi", "kind", "lo", "value", "why")

    def __init__(self, kind: KnobKind, value: int, lo: int, hi: int, why: str, compute: bool = False) -> None:
        self.kind = kind
        self.value = int(value)
        self.lo = lo
        self.hi = hi
        self.why = why
        self.compute = compute  # counted against the CPU budget (map / batch workers)

    @property
    def name(self) -> KnobKind:
        return self.kind


@dataclass(slots=True)
class StageStats:
    """What a tunable stage measured (``ParallelApplier``'s :class:`PoolStats` summed over its workers and
    its inline calls). ``workers``, ``threads`` and ``window`` are the settings it runs with *now* (an
    ``interleave``: its slots read by their own thread, and the elements each reads ahead); the other
    fields are counters, which a stage made again per ``repeat`` epoch keeps summing over its iterators."""

    workers: int = 0
    threads: int = 0
    window: int = 0
    worker_time_s: float = 0.0
    """The time the workers existed and were not parked (the denominator of the shares)."""
    calls: int = 0
    busy_s: float = 0.0
    cpu_s: float = 0.0
    input_s: float = 0.0
    room_s: float = 0.0
    budget_s: float = 0.0
    consumer_wait_s: float = 0.0
    delivered: int = 0
    delivered_bytes: int = 0
    elapsed_s: float = 0.0

    def __add__(self, other: StageStats) -> StageStats:
        return StageStats(*(a + b for a, b in zip(_values(self), _values(other), strict=True)))

    def counters(self) -> StageStats:
        """The counters alone (the settings 0): what a closed iterator leaves in its stage's sums."""
        return dataclasses.replace(self, workers=0, threads=0, window=0)

    def since(self, earlier: StageStats) -> StageStats:
        """The counters' change since ``earlier``, with the settings of now."""
        diff = StageStats(*(a - b for a, b in zip(_values(self), _values(earlier), strict=True)))
        return dataclasses.replace(diff, workers=self.workers, threads=self.threads, window=self.window)

    @classmethod
    def of(cls, value: StageStats | Mapping[str, Any]) -> StageStats:
        """``value`` as a record: a mapping with these keys (what ``ParallelApplier.stats()`` returns until it
        returns a record) is read by name; unknown keys are left out, missing ones are 0."""
        if isinstance(value, StageStats):
            return value
        return cls(**{f: value[f] for f in _FIELDS if f in value})


_FIELDS = tuple(f.name for f in dataclasses.fields(StageStats))


def _values(s: StageStats) -> tuple[Any, ...]:
    return tuple(getattr(s, f) for f in _FIELDS)


class Tunable(Protocol):
    """A stage the tuner moves: a member of a :class:`StageTuning`."""

    def apply_knob(self, kind: KnobKind, value: int, *, start: bool = False) -> None:
        """Set ``kind`` to ``value`` (the tuner thread; ``start``: its starting value, while building)."""

    def tuning_stats(self) -> StageStats:
        """The stage's counters and current settings."""


class StageTuning:
    """The tuned settings of one stage for one iteration, shared by the stage's iterators (a stage made
    again for each ``repeat`` epoch, the slots of an interleave) and applied to every live one."""

    def __init__(self, stage: str, kind: str) -> None:
        self.stage = stage
        self.kind = kind
        self.knobs: dict[KnobKind, Knob] = {}
        self._members: weakref.WeakSet[Any] = weakref.WeakSet()
        self._retired = StageStats()  # counters of the members closed so far (earlier epochs)
        self._lock = TimedLock(f"{stage} tuning")
        self.executor: Executor | None = None  # a map's executor, read by the tuner

    def knob(self, kind: KnobKind | str, value: int, lo: int, hi: int, why: str, compute: bool = False) -> Knob:
        """The knob ``kind`` (made with these settings the first time)."""
        kind = KnobKind(kind)
        with self._lock:
            k = self.knobs.get(kind)
            if k is None:
                k = self.knobs[kind] = Knob(kind, value, lo, hi, why, compute)
            return k

    def value(self, kind: KnobKind, default: int) -> int:
        k = self.knobs.get(kind)
        return default if k is None else k.value

    def start(self, member: Tunable) -> None:
        """Add ``member`` (a stage being built) and give it every knob's starting value."""
        self.add(member)
        for kind, k in self.knobs.items():
            member.apply_knob(kind, k.value, start=True)

    def add(self, member: Tunable) -> None:
        with self._lock:
            self._members.add(member)

    def remove(self, member: Tunable) -> None:
        """``member`` closes (a ``repeat`` epoch ended): its counters stay in the stage's sums."""
        with self._lock:
            if member not in self._members:
                return
            self._members.discard(member)
        final = StageStats.of(member.tuning_stats()).counters()
        with self._lock:
            self._retired = self._retired + final

    def members(self) -> list[Any]:
        with self._lock:
            return list(self._members)

    def set(self, kind: KnobKind, value: int, why: str) -> None:
        k = self.knobs[kind]
        k.value = max(k.lo, min(k.hi, int(value)))
        k.why = why
        for m in self.members():
            m.apply_knob(k.kind, k.value)

    def stats(self) -> StageStats:
        """The counters summed over the stage's iterators in this iteration, the closed ones included (a
        stage made again per ``repeat`` epoch); the settings: the live ones'."""
        with self._lock:
            total = self._retired
        for m in self.members():
            total = total + StageStats.of(m.tuning_stats())
        return total

    def busy(self) -> bool:
        """Whether the stage may not be tuned now (its executor is still measuring the function or starting
        its worker processes: rates measured meanwhile say nothing about a setting)."""
        ex = self.executor
        return ex is not None and bool(ex.settling)

    def compute_workers(self) -> Knob | None:
        """The ``workers`` knob when it is charged to the CPU budget (a ``map`` / ``batch`` stage)."""
        k = self.knobs.get(KnobKind.WORKERS)
        return k if k is not None and k.compute else None


def workers_start_reason(workers: int, cpu_budget: int, budget_set: bool, *, taken: int = 0,
                         split_over: int = 0) -> str:
    """Why an AUTOTUNE stage starts with ``workers`` workers, for ``explain()``: the cores the pipeline may
    keep busy (``cpu_budget``, set by ``Options(cpu_budget=...)`` when ``budget_set``, else the CPU count),
    and either the ``taken`` of them the stages built before this one started with, or the number of tuned
    stages they were split evenly over (``split_over``)."""
    source = "Options(cpu_budget=...)" if budget_set else "the CPU count; Options(cpu_budget=...) changes it"
    text = f"AUTOTUNE starts with {workers} worker(s): the pipeline may keep {cpu_budget} core(s) busy ({source})"
    if split_over:
        text += f", split evenly over its {split_over} tuned stages"
    elif taken:
        text += (f", and the stages built before this one started with {min(taken, cpu_budget)} of them, "
                 f"which left {max(0, cpu_budget - taken)}")
    return text + "; the tuner then moves workers to whichever stage is slowest"


def stage_tuning(ctx: IteratorContext, stage: str, kind: str) -> StageTuning:
    """The :class:`StageTuning` of ``stage`` in this iteration (``ctx.tree.tunings``; made the first time)."""
    with ctx.tree.lock:
        t = ctx.tree.tunings.get(stage)
        if t is None:
            t = ctx.tree.tunings[stage] = StageTuning(stage, kind)
        return t
