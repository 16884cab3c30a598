"""``headrace.service``: run a pipeline's heavy stages on a Ray cluster, exactly once and inside budgets.

``ds.apply(distribute("distributed_epoch", "auto"))`` works as tf.data's
``tf.data.experimental.service.distribute``: everything upstream of it runs on Ray worker actors, everything
downstream (usually ``batch`` and ``prefetch``) in the trainer. ``ray`` is the optional extra
``headrace[ray]``; ``import headrace`` never imports it.

- ``processing_mode="distributed_epoch"``: the source is cut into splits (index ranges of ``range`` /
  ``from_tensor_slices``, shares of the files of a file source: ``headrace.service._splits``) and workers take
  one when they have none (dynamic sharding). Each element is delivered exactly once per epoch, also when a
  worker or a whole Ray node dies mid-epoch (its split goes to another worker from the count the trainer has
  received) and across ``get_state()`` / ``set_state()`` of the trainer's iterator (per split: the count
  delivered; small JSON).
- ``processing_mode="parallel_epochs"``: every worker runs the whole dataset (``num_workers`` copies of each
  element, in no fixed order).
- Workers live for one epoch: its end stops them (a new ``iter()`` or a restore starts new ones); a dropped
  iterator's are stopped; workers that cannot be placed take an idle iterator's actors or say so within
  ``start_timeout_s``; a lost node or actor is seen from Ray's node and actor tables within seconds.
- ``job_name``: the ranks of a data-parallel job share one job: disjoint, equal shares of an index source (the
  same element and batch counts on every rank), checked at a named coordinator actor.

See docs/how-to/ray-service.md for starting Ray (locally, ``ray start``, KubeRay) and the measured throughput.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .._args import count_arg
from .._budget.sizes import parse_bytes
from .._dataset import Dataset
from ._cluster import ADDRESS_FORMS, check_address, ray_module
from ._dispatch import ServiceConfig, ServiceError, ServiceIterator, ServiceNode

PROCESSING_MODES = ("distributed_epoch", "parallel_epochs")
_JOB_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")


def distribute(processing_mode: str, service: str, *, num_workers: int | None = None, job_name: str | None = None,
               memory_budget: int | str | None = None, timeout_s: float = 300.0,
               chunk_bytes: int = 4 << 20, start_timeout_s: float = 10.0) -> Callable[[Dataset], Dataset]:
    """A transformation for ``ds.apply``: ``ds`` runs on Ray worker actors, what follows in this process.

    Args:
        processing_mode: ``"distributed_epoch"`` (the source is split among the workers, each element once per
            epoch) or ``"parallel_epochs"`` (every worker runs the whole dataset).
        service: the Ray cluster: ``"local"`` (start Ray here, for trying), ``"auto"`` (the cluster
            ``RAY_ADDRESS`` or ``ray start`` names), ``"HOST:PORT"`` (a head's GCS address) or
            ``"ray://HOST:PORT"`` (Ray Client). A Ray this process is connected to already is used as it is.
        num_workers: worker actors (one CPU each); default: the cluster's CPUs. At most the cluster's CPUs.
        job_name: several trainers (ranks) share one job: every rank of ``WORLD_SIZE`` (``RANK`` /
            ``WORLD_SIZE`` or the torch process group: ``headrace.distribute.process_info``) passes the same name
            and gets its own equal share of an index source (``range`` / ``from_tensor_slices``): disjoint, the
            same number of elements and batches on every rank (no DDP hang at an epoch's end), the
            ``n % world_size`` elements past the equal shares left out (``drop_remainder``'s rule). The ranks
            meet at a named actor that refuses a rank with another world size or source. A rank's state
            restores in the same rank of a job of the same size (``StateError`` otherwise, naming both).
        memory_budget: each worker's own hard byte budget (an int of bytes or ``"512MiB"``); default: the
            process budget headrace gives any process (half of the node's available memory).
        timeout_s: seconds without any worker making progress before ``ServiceError`` (every wait is timed): the
            last resort; a lost node or actor is seen from Ray's node and actor tables within seconds.
        chunk_bytes: the most bytes one worker call returns (elements travel in chunks, one Ray call each); at
            most a quarter of the trainer's budget shared among the calls in flight.
        start_timeout_s: seconds the workers may wait to be placed (Ray's ``PENDING_CREATION``, no free CPU on
            the cluster, none of them running) before ``ServiceError`` names the free CPUs and the actors alive;
            first they take the actors of this process's idle ``distribute`` iterators (not called for 2 s).
            Raise it on an autoscaling cluster that adds nodes on demand.

    Returns:
        A function ``Dataset -> Dataset`` whose result yields the upstream elements (same structure, shapes
        and dtypes; numpy arrays come read-only, out of Ray's object store). Its cardinality is the
        upstream's (``parallel_epochs``: times ``num_workers``, unknown without ``num_workers``).

    Raises:
        MissingDependencyError: (an ``ImportError``) ray is not installed: ``pip install 'headrace[ray]'``.
        ValueError: an unknown ``processing_mode`` or ``service`` form (the message lists the allowed ones),
            ``num_workers < 1``, a bad ``memory_budget``; when applied: ``distributed_epoch`` over a source
            that cannot be split (the message names the op and the fixes). When iterated: ``num_workers``
            over the cluster's CPUs. ``ServiceError`` when no worker makes progress for ``timeout_s``, or the
            workers cannot be placed for ``start_timeout_s``.
    """
    if processing_mode not in PROCESSING_MODES:
        raise ValueError(f"distribute(processing_mode={processing_mode!r}): expected one of {PROCESSING_MODES} "
                         "('distributed_epoch': each element once per epoch, split among the workers; "
                         "'parallel_epochs': every worker runs the whole dataset)")
    check_address(service)
    if num_workers is not None:
        num_workers = count_arg(num_workers, "distribute(num_workers)", minimum=1,
                                fix="pass the number of Ray worker actors (>= 1), or None for the cluster's CPUs")
    if job_name is not None and (not isinstance(job_name, str) or not _JOB_NAME.match(job_name)):
        raise ValueError(f"distribute(job_name={job_name!r}): expected a str of letters, digits, '-', '_' or '.' "
                         "(the same on every rank of the job), or None")
    if memory_budget is not None:
        parse_bytes(memory_budget, "distribute(memory_budget)")
    for name, value in (("timeout_s", timeout_s), ("start_timeout_s", start_timeout_s)):
        if isinstance(value, bool) or not (isinstance(value, int | float) and value > 0):
            raise ValueError(f"distribute({name}={value!r}): expected seconds > 0")
    chunk_bytes = count_arg(chunk_bytes, "distribute(chunk_bytes)", minimum=1,
                            fix="pass the most bytes one worker call returns (e.g. 4 MiB)")
    ray_module()  # MissingDependencyError naming pip install 'headrace[ray]' now, not at the first next()
    config = ServiceConfig(processing_mode, service, num_workers, job_name, memory_budget, timeout_s=float(timeout_s),
                           chunk_bytes=chunk_bytes, start_timeout_s=float(start_timeout_s))

    def apply(ds: Dataset) -> Dataset:
        return Dataset(ServiceNode(ds._node, config))

    return apply


def service_report(iterator: Any) -> list[dict[str, Any]]:
    """The report of every ``distribute`` stage in ``iterator`` (a ``headrace.Iterator``): live ``workers``,
    ``lost``, ``splits``, ``delivered``, ``throughput_per_s``, ``worker_reports`` (each worker's RSS, peak RSS,
    budget, elements made, busy seconds). Raises ``ValueError`` if the iterator has no ``distribute`` stage."""
    found: list[dict[str, Any]] = []

    def walk(stage: Any) -> None:
        if isinstance(stage, ServiceIterator):
            found.append(stage.report())
        for child in stage._children():
            if child is not None:
                walk(child)

    root = getattr(iterator, "_root", None)
    if root is None:
        raise ValueError(f"service_report({type(iterator).__name__}): pass a started headrace.Iterator (iter(ds))")
    walk(root)
    if not found:
        raise ValueError("service_report: the pipeline has no distribute() stage")
    return found


__all__ = ["ADDRESS_FORMS", "PROCESSING_MODES", "ServiceError", "distribute", "service_report"]
