"""What Ray itself says about a dispatcher's workers while the dispatcher waits for them: which actors are
alive, starting or not placed (Ray's actor table: ``PENDING_CREATION`` vs ``ALIVE`` vs ``DEAD``), which nodes are
alive (``ray.nodes()``), and how many CPUs the cluster has free.

A dispatcher (``headrace.service._dispatch``) that has received nothing for :data:`PROBE_S` asks (:func:`probe`)
and acts on the answer:

- a worker whose actor is ``DEAD`` or whose node left the cluster is lost at once (its split moves to another
  worker in seconds, not when a call in flight times out);
- workers that cannot be placed (none of the dispatcher's workers is running, its actors wait in
  ``PENDING_CREATION`` and the cluster has no free CPU) first take the CPUs of idle dispatchers of this
  process (:func:`yield_idle`, through each one's :class:`Lease`: an iterator nobody has called for
  :data:`IDLE_S` gives its actors back and starts new ones when it is called again, from the counts it has,
  as for a lost worker); failing that, after ``start_timeout_s`` a :class:`ServiceError` names the cluster's
  free CPUs and the actors alive on it.

The actor table is Ray's GCS table (``ray._private.state.actors``, what ``ray list actors`` shows; the public
``ray.util.state`` needs Ray's dashboard, which ``ray start --include-dashboard=false`` and test clusters lack).
If it cannot be read, the probe knows only the nodes and the free CPUs, and ``timeout_s`` stays the last resort.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .._errors import HeadraceError
from .._sync import Lock

PROBE_S = 0.5  # a dispatcher that received nothing for this long asks Ray about its workers (then every second)
IDLE_S = 2.0  # a dispatcher not called for this long gives its actors to one of this process that cannot start
UNPLACED = ("DEPENDENCIES_UNREADY", "PENDING_CREATION")


class ServiceError(HeadraceError, RuntimeError):
    """The Ray service cannot go on: its workers cannot be placed on the cluster (no free CPU for
    ``start_timeout_s``), no worker made progress for ``timeout_s``, or too many workers were lost."""


@dataclass
class Probe:
    """Ray's answer: ``states`` (actor id hex -> state, this job's actors; empty if the table could not be
    read), ``unplaced`` (ids of this job's actors waiting for resources: ``PENDING_CREATION`` without a worker
    process; one that has its process is starting, and holds its CPU), ``nodes`` (ids of the alive nodes),
    ``free_cpus`` and ``total_cpus`` of the cluster."""

    states: dict[str, str]
    unplaced: set[str]
    nodes: set[str]
    free_cpus: float
    total_cpus: float


def actor_id(actor: Any) -> str:
    """The hex id of an actor handle (the key of Ray's actor table)."""
    return str(actor._actor_id.hex())


def _actor_table(ray: ModuleType, job_only: bool) -> dict[str, Any]:
    try:
        from ray._private import state

        if job_only:
            job = ray.JobID.from_hex(ray.get_runtime_context().get_job_id())
            return dict(state.actors(job_id=job))
        return dict(state.actors())
    except Exception:  # (a Ray without the table, Ray Client): the probe goes on with nodes and CPUs
        return {}


def probe(ray: ModuleType) -> Probe:
    """Ray's actor states of this job, its alive nodes and its free / total CPUs (a few GCS calls)."""
    table = _actor_table(ray, job_only=True)
    nodes = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    unplaced = {k for k, v in table.items() if v.get("State") in UNPLACED and not v.get("Pid")}
    return Probe({k: str(v.get("State")) for k, v in table.items()}, unplaced, nodes,
                 float(ray.available_resources().get("CPU", 0.0)), float(ray.cluster_resources().get("CPU", 0.0)))


def holders(ray: ModuleType, limit: int = 6) -> str:
    """The actors alive or starting on the cluster (what holds its CPUs), the workers of this process's
    dispatchers named as such: ``"SplitWorker pid 812 on node 3f2a91 (a distribute iterator of this process,
    not closed, idle 12 s)"``."""
    mine: dict[str, str] = {}
    now = time.monotonic()
    for d in list(_LEASES):
        for a in d.actors_held():
            mine[actor_id(a)] = f"a distribute iterator of this process, not closed, idle {now - d.last_call:.0f} s"
    alive = [v for v in _actor_table(ray, job_only=False).values()
             if v.get("State") == "ALIVE" or (v.get("State") in UNPLACED and v.get("Pid"))]
    if not alive:
        return "none listed"
    parts = []
    for v in alive[:limit]:
        where = str((v.get("Address") or {}).get("NodeID", ""))[:6]
        whose = mine.get(str(v.get("ActorID")), f"job {v.get('JobID')}")
        starting = "" if v.get("State") == "ALIVE" else ", starting"
        parts.append(f"{v.get('ActorClassName')} pid {v.get('Pid')} on node {where} ({whose}{starting})")
    more = f", and {len(alive) - limit} more" if len(alive) > limit else ""
    return "; ".join(parts) + more


def unplaced_error(ray: ModuleType, stage: str, service: str, waiting: int, answer: Probe, waited_s: float
                   ) -> ServiceError:
    """The error of a dispatcher whose ``waiting`` workers could not be placed for ``waited_s`` seconds."""
    return ServiceError(
        f"{stage}: {waiting} Ray worker(s) could not be placed for {waited_s:.0f} s: the cluster at {service!r} has "
        f"{answer.free_cpus:g} of {answer.total_cpus:g} CPUs free and each worker needs 1; actors alive or "
        "starting there: "
        f"{holders(ray)}. close() the iterators you are done with (an iterator keeps its workers until its epoch "
        "ends or it is closed), stop the other jobs, add nodes, pass a smaller num_workers, or a larger "
        "distribute(start_timeout_s=...) on an autoscaling cluster")


# ---- the dispatchers of this process, for yield_idle ----------------------------------------------------------
_LEASES: weakref.WeakSet[Lease] = weakref.WeakSet()


class Lease:
    """A dispatcher's hold on its actors as the other dispatchers of this process see it: its ``lock`` (held
    while it is called), ``last_call`` (when a call ended), and the dispatcher itself through a weak reference
    (it has ``actors_held()`` and ``give_back()``: stop its actors, their splits back in its queue)."""

    def __init__(self, owner: Any) -> None:
        self.lock = Lock("a distribute iterator's lease on its actors")
        self.last_call = time.monotonic()
        self._owner = weakref.ref(owner)
        _LEASES.add(self)

    def actors_held(self) -> list[Any]:
        owner = self._owner()
        return [] if owner is None else owner.actors_held()

    def give_back(self) -> int:
        owner = self._owner()
        return 0 if owner is None else int(owner.give_back())


def yield_idle(requester: Lease) -> int:
    """Make every other dispatcher of this process that has not been called for :data:`IDLE_S` give its actors
    back (never one that is inside a call: its lock is taken without waiting); the number of actors stopped."""
    stopped = 0
    now = time.monotonic()
    for d in list(_LEASES):
        if d is requester or now - d.last_call < IDLE_S or not d.actors_held():
            continue
        if not d.lock.acquire(timeout=0):
            continue
        try:
            stopped += d.give_back()
        finally:
            d.lock.release()
    return stopped


__all__ = ["IDLE_S", "PROBE_S", "UNPLACED", "Lease", "Probe", "ServiceError", "actor_id", "holders", "probe",
           "unplaced_error", "yield_idle"]
