"""Connecting to the Ray cluster a ``distribute`` names, and starting and stopping its worker actors.

Only this module and the dispatcher (``headrace.service._dispatch``) import ``ray``, and only when a pipeline
is iterated: ``import headrace`` and ``headrace.service`` never do (``ray`` is the optional extra
``headrace[ray]``).
"""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

from .._deps import require

ADDRESS_FORMS = ("'local' (start a Ray on this machine: for trying)", "'auto' (the cluster RAY_ADDRESS or "
                 "`ray start` on this machine names)", "'HOST:PORT' (a head's GCS address, `ray start --head` "
                 "prints it)", "'ray://HOST:PORT' (Ray Client)")
_ADDRESS = re.compile(r"^(ray://)?[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")
# Exceptions of ray.exceptions that mean a worker (or its node) is gone, not that the pipeline failed.
LOST = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError", "NodeDiedError",
        "ObjectLostError", "OwnerDiedError", "ObjectReconstructionFailedError", "ActorUnschedulableError")


def check_address(service: Any) -> str:
    """``service`` if it is an address form Ray accepts (:data:`ADDRESS_FORMS`), else ``ValueError``."""
    if not isinstance(service, str) or not (service in ("local", "auto") or _ADDRESS.match(service)):
        raise ValueError(f"distribute(service={service!r}): expected a Ray address, one of "
                         f"{', '.join(ADDRESS_FORMS)}; e.g. service='local' to try it on one machine")
    return service


def ray_module() -> ModuleType:
    """``ray``, or ``MissingDependencyError`` (an ``ImportError``) naming ``pip install 'headrace[ray]'``."""
    return require("ray", "headrace.service.distribute")


def connect(service: str) -> ModuleType:
    """``ray``, connected to ``service`` (a connection this process has already is kept as it is)."""
    ray = ray_module()
    if not ray.is_initialized():
        if service == "local":
            # (address="local": a new Ray in this process's session, never a cluster some other program started)
            ray.init(address="local", include_dashboard=False, configure_logging=False, log_to_driver=False)
        else:
            ray.init(address=service, configure_logging=False, log_to_driver=False)
    return ray


def cluster_cpus(ray: ModuleType) -> int:
    """The CPUs of the cluster (each worker actor takes one)."""
    return int(ray.cluster_resources().get("CPU", 0))


def start_worker(ray: ModuleType, node_ref: Any, memory_budget: int | str | None, chunk: tuple[int, int, float]) -> Any:
    """A new worker actor (one CPU, spread over the nodes, never restarted by Ray: the dispatcher re-assigns
    a lost worker's split itself); returns its handle at once (it starts in the background)."""
    from ._worker import SplitWorker

    cls = ray.remote(SplitWorker)
    options = cls.options(num_cpus=1, scheduling_strategy="SPREAD", max_restarts=0, max_concurrency=1)
    return options.remote(node_ref, memory_budget, *chunk)


class JobCoordinator:
    """The named actor the ranks of one ``distribute(job_name=...)`` job meet at (``headrace-job-<name>`` in Ray
    namespace ``headrace``, no CPU): the first rank to arrive fixes the job's world size and how its source is
    cut; a rank that disagrees is refused, naming both, before it reads anything."""

    def __init__(self) -> None:
        self.job: dict[str, Any] | None = None
        self.ranks: set[int] = set()

    def join(self, rank: int, world_size: int, source: str) -> str | None:
        """None, or why this rank cannot join the job."""
        if self.job is None:
            self.job = {"world_size": world_size, "source": source}
        if (world_size, source) != (self.job["world_size"], self.job["source"]):
            return (f"rank {rank} has world size {world_size} and source {source!r}, the job "
                    f"{self.job['world_size']} and {self.job['source']!r}")
        self.ranks.add(rank)
        return None


_JOBS: dict[str, Any] = {}


def join_job(ray: ModuleType, job_name: str, rank: int, world_size: int, source: str, timeout_s: float,
             retry: bool = True) -> Any:
    """The job's coordinator (made by the first rank), joined by this rank; ``ValueError`` if it disagrees. A
    coordinator of an earlier Ray session (``ray.shutdown()``, ``ray.init()``) is made again once."""
    coordinator = _JOBS.get(job_name)
    if coordinator is None:  # (the handle is kept: Ray ends an actor no handle refers to; it ends with this process)
        coordinator = _JOBS[job_name] = ray.remote(JobCoordinator).options(
            name=f"headrace-job-{job_name}", namespace="headrace", get_if_exists=True, num_cpus=0).remote()
    try:
        why = ray.get(coordinator.join.remote(rank, world_size, source), timeout=timeout_s)
    except Exception as e:
        if not is_lost(e) or not retry:
            raise
        del _JOBS[job_name]
        return join_job(ray, job_name, rank, world_size, source, timeout_s, retry=False)
    if why is not None:
        raise ValueError(f"distribute(job_name={job_name!r}): {why}; every rank of a job runs the same pipeline "
                         "with the same WORLD_SIZE (or give this run another job_name)")
    return coordinator


def is_lost(error: BaseException) -> bool:
    """Whether ``error`` (raised by ``ray.get``) means the worker or its node is gone (not that the actor could
    not be made: its ``__init__`` raised, e.g. the pipeline could not be unpickled there)."""
    if getattr(error, "actor_init_failed", False):
        return False
    return any(k.__name__ in LOST for k in type(error).__mro__)


def stop_workers(ray: ModuleType, actors: list[Any]) -> None:
    """Kill ``actors`` (never blocks: Ray stops them in the background; already dead ones are skipped). After
    ``ray.shutdown()`` there is nothing to kill (and ``ray.kill`` would start a new local Ray)."""
    if not ray.is_initialized():
        return
    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:
            pass


__all__ = ["ADDRESS_FORMS", "JobCoordinator", "check_address", "cluster_cpus", "connect", "is_lost", "join_job",
           "ray_module", "start_worker", "stop_workers"]
