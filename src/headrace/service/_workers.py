"""The worker actors of one dispatcher (``headrace.service._dispatch``): started, watched (:class:`Watch`),
stopped.

:class:`Workers` starts actors (``_cluster.start_worker``) up to the count the dispatcher asks for, drops one
(its calls cancelled, its actor killed, its split handed back to the dispatcher), tells from Ray's answer
(``_watch.Probe``) which are gone (actor ``DEAD``, node gone from ``ray.nodes()``) and which cannot be placed,
and stops every actor it still holds when its dispatcher is collected (a ``weakref.finalize`` that only sends
``ray.kill``: a message to Ray, nothing waited on, so it cannot deadlock wherever the collector runs).
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._budget.account import Reservation
from . import _cluster
from ._watch import PROBE_S, Lease, Probe, actor_id, probe, unplaced_error, yield_idle


class Worker:
    """The dispatcher's view of one worker actor."""

    __slots__ = ("actor", "calls", "dead", "node_id", "ready", "split")

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        # Splits go only to a worker that has answered (a replacement that cannot be placed, e.g. on a cluster
        # that lost the node with the free CPU, must not sit on a split the live workers could run).
        self.ready = actor.node_id.remote()
        self.node_id: str | None = None
        self.split: int | None = None
        self.calls: collections.deque[tuple[Any, int, Reservation | None]] = collections.deque()  # (ref, split, r)
        self.dead = False


class Workers:
    """The worker actors of ``owner`` (a dispatcher): ``all`` (this epoch's, lost ones too, until they are
    given back), ``started`` (every actor ever started). ``start()`` makes one actor."""

    def __init__(self, owner: Any, ray: ModuleType, start: Callable[[], Any]) -> None:
        self.all: list[Worker] = []
        self.started: list[Any] = []
        self._held: list[Any] = []  # started and not stopped: what the finalizer stops
        self._ray, self._start = ray, start
        self._finalizer = weakref.finalize(owner, _cluster.stop_workers, ray, self._held)

    def live(self) -> list[Worker]:
        return [w for w in self.all if not w.dead]

    def held(self) -> list[Any]:
        """The actors started and not stopped."""
        return list(self._held)

    def top_up(self, n: int) -> None:
        """Start actors until ``n`` are live (they start in the background)."""
        for _ in range(n - len(self.live())):
            actor = self._start()
            self._held.append(actor)
            self.started.append(actor)
            self.all.append(Worker(actor))

    def drop(self, w: Worker) -> int | None:
        """``w`` runs nothing more: its calls are cancelled, its actor is killed; returns its split (None if it
        had none) for the dispatcher to hand out again."""
        w.dead = True
        for _, _, r in w.calls:
            if r is not None:
                r.cancel()
        w.calls.clear()
        split, w.split = w.split, None
        _cluster.stop_workers(self._ray, [w.actor])
        if w.actor in self._held:
            self._held.remove(w.actor)
        return split

    def forget(self) -> None:
        """The epoch's workers are all dropped: start the next epoch's list empty."""
        self.all = []

    def gone(self, answer: Probe) -> list[Worker]:
        """The live, started workers Ray says are gone: actor ``DEAD``, or node no longer alive. (One still
        starting that died says why through its ready call: a pipeline its ``__init__`` could not load.)"""
        def gone(w: Worker) -> bool:
            node_left = bool(answer.nodes) and w.node_id not in answer.nodes
            return node_left or answer.states.get(actor_id(w.actor)) == "DEAD"

        return [w for w in self.live() if w.node_id is not None and gone(w)]

    def unplaced(self, answer: Probe) -> list[Worker]:
        """The live workers waiting for resources (every one not started when Ray's actor table is unreadable)."""
        return [w for w in self.live() if w.node_id is None
                and (actor_id(w.actor) in answer.unplaced or not answer.states)]

    def running(self) -> int:
        return sum(w.node_id is not None for w in self.live())

    def close(self) -> None:
        """Stop every actor still held (the dispatcher closes)."""
        self._finalizer()


class Watch:
    """When a dispatcher that receives nothing asks Ray about its workers (:data:`_watch.PROBE_S` after the last
    progress, then about once a second), and what it does with the answer: a worker Ray says is gone is lost
    now (``lose``: its split moves); when none of its workers can be placed, they take the actors of an idle
    dispatcher of this process (``_watch.yield_idle``), or raise ``ServiceError`` after ``cfg.start_timeout_s``
    naming the free CPUs and the actors holding them. ``cfg``: the dispatcher's ``ServiceConfig``."""

    def __init__(self, ray: ModuleType, stage: str, cfg: Any, lease: Lease) -> None:
        self._ray, self._stage, self._cfg, self._lease = ray, stage, cfg, lease
        self._probe_at = 0.0
        self._unplaced_since: float | None = None

    def progress(self, now: float) -> float:
        """Something came at ``now`` (or a wait starts): the next probe is :data:`PROBE_S` away; returns the
        deadline of ``cfg.timeout_s`` without progress."""
        self._probe_at, self._unplaced_since = now + PROBE_S, None
        return now + float(self._cfg.timeout_s)

    def check(self, now: float, pool: Workers, lose: Callable[[Worker], None]) -> None:
        if now < self._probe_at:
            return
        self._probe_at = now + 2 * PROBE_S
        answer = probe(self._ray)
        for w in pool.gone(answer):
            lose(w)
        unplaced = pool.unplaced(answer)
        if len(unplaced) < len(pool.live()) or not unplaced or answer.free_cpus >= 1 or yield_idle(self._lease):
            # (a worker placed: running, or starting however slowly; or an idle dispatcher's CPUs come free)
            self._unplaced_since = None
            return
        self._unplaced_since = self._unplaced_since or now
        if now - self._unplaced_since >= self._cfg.start_timeout_s:
            raise unplaced_error(self._ray, self._stage, self._cfg.service, len(unplaced), answer,
                                 now - self._unplaced_since)


__all__ = ["Watch", "Worker", "Workers"]
