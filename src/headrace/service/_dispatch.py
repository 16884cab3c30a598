"""The trainer's side of ``headrace.service``: :class:`ServiceNode` (the recipe node ``distribute`` puts in the
pipeline) and its stage, the dispatcher of one trainer.

The dispatcher starts ``num_workers`` worker actors (``headrace.service._worker``), hands each a split when it
has none (dynamic sharding: fast workers take more splits), keeps ``prefetch`` calls outstanding per worker (a
chunk each: back-pressure) and yields the elements of the chunks in the order they arrive. It counts, per split,
the elements it has received and those it has delivered (``next()`` returned them):

- a worker that dies (its actor, its process or its node: ``ray.exceptions.RayActorError`` and kin) gives its
  split back; the next worker that asks opens it and skips the elements the dispatcher has received (they are in
  its buffer and will be delivered), and a replacement actor is started in the background. Ray's own signals
  say so within about a second of a wait with nothing received (``headrace.service._watch``: the actor table's
  ``DEAD``, a node gone from ``ray.nodes()``), not only a call that fails;
- the workers live for one epoch: when its last element is delivered they are stopped (their CPUs go back to
  the cluster at once, not when the iterator is closed or collected); a restore of the ended iterator, or the
  next epoch (a new ``iter()``, a ``repeat`` epoch), starts new ones. A dropped iterator's are stopped by its
  finalizer (``ray.kill``: a message to Ray, nothing waited on). Workers that cannot be placed (no free CPU)
  take those of an idle iterator of this process, which starts new ones when it is called again, or raise
  ``ServiceError`` after ``start_timeout_s`` naming the free CPUs and the actors holding them;
- ``get_state()`` is ``{"kind": "service", "epoch", "splits": <how the source was cut>, "delivered": {split:
  count}, "complete": [split, ...], "seeds": [...], "iteration": [...]}``: positions only, small JSON.
  ``set_state`` in a fresh pipeline re-opens every split not complete at its delivered count: the rest of the
  epoch exactly once (elements already in flight when the state was taken are made again).

A split re-run from a count must make the same elements in the same order: a worker runs a split's pipeline with
every parallel stage in order (``_splits.InOrderNode``, as below a ``shard``), and a ``seed=None`` shuffle
upstream adopts the seed saved in the state (``_splits.with_seeds``), and the split's pipeline runs in the
trainer's iteration path (which ``iter()`` of the dataset, which ``repeat`` epoch; the state's after a restore), so a
``reshuffle_each_iteration`` shuffle upstream draws another order each epoch, as it does locally. A user function
that is itself random (unseeded ``np.random`` in a ``map``) makes other values on a re-run, as it would in any
restore.

The receive buffer (chunks received and not yet delivered, and the chunks asked for) is charged to the trainer's
memory budget (an account of this stage, ``headrace._budget``). Every wait is a timed ``ray.wait`` slice that
re-checks the close flag; no progress for ``timeout_s`` (the last resort) raises :class:`ServiceError`.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Any

from .._budget.account import Reservation
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage
from .._engine.stage_support import check_state
from .._errors import StateError
from .._options import UNKNOWN_CARDINALITY
from .._structure import nbytes
from ..distribute import process_info
from . import _cluster
from ._splits import pipeline_seeds, plan_rank_splits, plan_splits, source_of, split_node, with_seeds
from ._watch import Lease, ServiceError, actor_id
from ._workers import Watch, Worker, Workers

WAIT_SLICE_S = 0.1  # one ray.wait slice; the close flag is checked between slices


@dataclass(frozen=True)
class ServiceConfig:
    """How a ``distribute`` runs (see :func:`headrace.service.distribute` for each field)."""

    processing_mode: str
    service: str
    num_workers: int | None
    job_name: str | None
    memory_budget: int | str | None
    prefetch: int = 2
    chunk_bytes: int = 4 << 20
    chunk_elements: int = 1024
    chunk_s: float = 0.1
    timeout_s: float = 300.0
    max_replacements: int = 16
    start_timeout_s: float = 10.0


class ServiceNode(DatasetNode):
    """``distribute``'s node: the pipeline ``upstream`` runs on Ray workers, this node yields its elements."""

    label = "distribute"
    spec_passes = True

    def __init__(self, upstream: DatasetNode, config: ServiceConfig) -> None:
        super().__init__([upstream])
        self.config = config
        if config.processing_mode == "distributed_epoch":  # a source that cannot be split fails here, not later
            if config.job_name is None:
                plan_splits(upstream, "distributed_epoch", 1)
            else:
                plan_rank_splits(upstream, 1, 0, 1)

    def cardinality(self) -> int:
        """The upstream's count (``parallel_epochs``: times ``num_workers``; ``job_name``: this rank's share).
        Where a split ends a ``batch`` early (``batch`` upstream), the count depends on the splits, so it is
        known only with ``num_workers`` given."""
        up, cfg = self.inputs[0], self.config
        n = up.cardinality()
        if n < 0:
            return n
        if cfg.processing_mode == "parallel_epochs":
            return UNKNOWN_CARDINALITY if cfg.num_workers is None else n * cfg.num_workers
        chain_keeps_count = n == source_of(up).cardinality()
        if cfg.job_name is None and chain_keeps_count:
            return n
        world = 1 if cfg.job_name is None else process_info().world_size
        if chain_keeps_count:
            return n // world
        if cfg.num_workers is None:
            return UNKNOWN_CARDINALITY
        plan = (plan_splits(up, cfg.processing_mode, cfg.num_workers) if cfg.job_name is None
                else plan_rank_splits(up, world, 0, cfg.num_workers))
        counts = [split_node(up, list(split)).cardinality() for split in plan.splits]
        return UNKNOWN_CARDINALITY if min(counts) < 0 else sum(counts)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return ServiceIterator(ctx, self, ctx.stage_name(self, self.label))


class ServiceIterator(Stage):
    """The dispatcher of one trainer (see the module docstring)."""

    kind = "service"
    reorders = True  # chunks arrive in the order workers finish them: a stage above keeps its input by value

    def __init__(self, ctx: IteratorContext, node: ServiceNode, stage: str) -> None:
        super().__init__(ctx)
        cfg = node.config
        self._cfg, self._stage, self._stop = cfg, stage, ctx.tree.stop
        self._ray = ray = _cluster.connect(cfg.service)
        cpus = _cluster.cluster_cpus(ray)
        n = cfg.num_workers if cfg.num_workers is not None else max(1, cpus)
        if n > max(cpus, 1):
            raise ValueError(f"distribute(num_workers={n}): the Ray cluster at {cfg.service!r} has {cpus} CPUs and "
                             "each worker takes one; pass num_workers <= the cluster's CPUs, or add nodes")
        self._n = n
        self._rank = self._world = None
        if cfg.job_name is not None:
            info = process_info()
            self._rank, self._world = info.rank, info.world_size
            up = node.inputs[0]
            _cluster.join_job(ray, cfg.job_name, info.rank, info.world_size,
                              f"{cfg.processing_mode} of {up.label} ({up.cardinality()} elements)", cfg.timeout_s)
        if cfg.job_name is not None and cfg.processing_mode == "distributed_epoch":
            self._plan = plan_rank_splits(node.inputs[0], info.world_size, info.rank, n)
        else:
            self._plan = plan_splits(node.inputs[0], cfg.processing_mode, n)
        k = len(self._plan.splits)
        self._delivered = [0] * k
        self._received = [0] * k
        self._finished = [False] * k
        self._pending: collections.deque[int] = collections.deque(range(k))
        self._buffer: collections.deque[list[Any]] = collections.deque()  # [split, elements, next, bytes]
        self._account = ctx.account(stage, n * cfg.prefetch, hint="distribute's receive buffer")
        limit = ctx.budget.limit_bytes
        chunk_bytes = max(1 << 16, min(cfg.chunk_bytes, limit // max(1, 4 * n * cfg.prefetch)))
        self._chunk = (chunk_bytes, cfg.chunk_elements, cfg.chunk_s)
        self._upstream = node.inputs[0]
        self._node_ref = ray.put(self._upstream)
        self._pool = Workers(self, ray, self._start_one)  # (dropped: its finalizer stops the actors)
        self._lease = Lease(self)  # (another dispatcher of this process may take them back while this one idles)
        self._lost = 0
        self._reports: dict[str, dict[str, Any]] = {}  # actor id -> its last report
        self._started_s = time.monotonic()
        self._count = 0
        self._iteration = list(ctx.iteration)  # the workers run the splits in this iteration path
        self._watch = Watch(ray, stage, cfg, self._lease)
        self._start_workers()

    # ---- workers: started, lost, given back ----------------------------------------------------------------
    def _start_one(self) -> Any:
        return _cluster.start_worker(self._ray, self._node_ref, self._cfg.memory_budget, self._chunk)

    def _start_workers(self) -> None:
        self._pool.top_up(self._n)

    def _drop(self, w: Worker) -> None:
        """``w`` runs nothing more; its split (if unfinished) goes back first in line (the next worker opens it
        from the count received)."""
        split = self._pool.drop(w)
        if split is not None and not self._finished[split]:
            self._pending.appendleft(split)

    def _lose(self, w: Worker) -> None:
        """``w`` is gone (Ray said so): its split moves, a replacement starts."""
        self._drop(w)
        self._lost += 1
        if self._lost > self._cfg.max_replacements:
            raise ServiceError(f"{self._stage}: {self._lost} workers lost (max_replacements="
                               f"{self._cfg.max_replacements}); the cluster is failing, see `ray status`")
        self._start_workers()

    def give_back(self) -> int:
        """Stop every worker (the epoch ended, the iterator is closed, or another dispatcher of this process
        needs the CPUs while this one idles: ``_watch.yield_idle``); unfinished splits go back to the queue and
        the next ``next()`` starts new workers. Returns the number of actors stopped."""
        live = self._pool.live()
        for w in live:
            self._drop(w)
        self._pool.forget()
        return len(live)

    def actors_held(self) -> list[Any]:
        """The actors this dispatcher holds now (started, not stopped)."""
        return self._pool.held()

    # ---- iteration --------------------------------------------------------------------------------------
    def __next__(self) -> Any:
        with self._lease.lock:
            try:
                return self._next()
            finally:
                self._lease.last_call = time.monotonic()

    def _next(self) -> Any:
        deadline = self._watch.progress(time.monotonic())
        while True:
            buf = self._buffer
            while buf:
                entry = buf[0]
                split, elements, i, size = entry
                if i < len(elements):
                    x = elements[i]
                    elements[i] = None
                    entry[2] = i + 1
                    self._delivered[split] += 1
                    self._count += 1
                    if i + 1 == len(elements):
                        buf.popleft()
                        self._account.release(size)
                    return x
                buf.popleft()
                self._account.release(size)
            if self._all_finished():
                self.give_back()  # the epoch ended: its actors go back to the cluster now, not at close()
                raise StopIteration
            if self._stop.is_set():
                raise StopIteration
            if not self._pool.live():
                self._start_workers()  # (after give_back: a restore of an ended epoch, a resumed idle iterator)
            self._ask()
            if self._receive():
                deadline = self._watch.progress(time.monotonic())
                continue
            now = time.monotonic()
            self._watch.check(now, self._pool, self._lose)  # (Ray's tables, about once a second)
            if now > deadline:
                running = self._pool.running()
                starting = len(self._pool.live()) - running
                raise ServiceError(f"{self._stage}: no worker made progress for {self._cfg.timeout_s:.0f} s "
                                   f"({running} of {self._n} workers running, {starting} starting, {self._lost} "
                                   f"lost, {len(self._pending)} splits waiting, Ray at {self._cfg.service!r}); "
                                   "check that the cluster has free CPUs (`ray status`) and that its nodes run")

    def _all_finished(self) -> bool:
        return not self._pending and all(self._finished)

    def _ask(self) -> None:
        """Give idle workers a split and keep ``prefetch`` calls outstanding on each live one."""
        for w in self._pool.all:
            if w.dead or w.node_id is None:
                continue
            if w.split is None and self._pending:
                w.split = self._pending.popleft()
            while w.split is not None and len(w.calls) < self._cfg.prefetch:
                r = self._reserve(urgent=not self._buffer and not any(x.calls for x in self._pool.all))
                if r is None:
                    return
                split = w.split
                ref = w.actor.next_chunk.remote(list(self._plan.splits[split]), self._received[split],
                                                self._iteration)
                w.calls.append((ref, split, r))

    def _reserve(self, urgent: bool) -> Reservation | None:
        est = self._account.estimate()
        if urgent:  # nothing buffered or in flight: wait for room (the stall breaker keeps it from hanging)
            return self._account.reserve(est, self._stop)
        return self._account.try_reserve(est)

    def _receive(self) -> bool:
        """Wait one slice for the oldest call of any worker; take what came. True if anything came."""
        heads = {w.calls[0][0]: w for w in self._pool.all if w.calls and not w.dead}
        starting = {w.ready: w for w in self._pool.all if w.node_id is None and not w.dead}
        if not heads and not starting:
            time.sleep(WAIT_SLICE_S)  # (nothing to wait on: the budget refused a call; the caller re-checks)
            return False
        ready, _ = self._ray.wait([*heads, *starting], num_returns=1, timeout=WAIT_SLICE_S)
        for ref in ready:
            if ref in heads:
                self._take(heads[ref])
            else:
                self._started(starting[ref])
        return bool(ready)

    def _started(self, w: Worker) -> None:
        try:
            w.node_id = self._ray.get(w.ready, timeout=self._cfg.timeout_s)[0]
        except Exception as e:
            if not _cluster.is_lost(e):
                raise _cause(e) from None
            self._lose(w)

    def _take(self, w: Worker) -> None:
        ref, split, r = w.calls.popleft()
        try:
            elements, finished, report = self._ray.get(ref, timeout=self._cfg.timeout_s)
        except Exception as e:
            if r is not None:
                r.cancel()
            if not _cluster.is_lost(e):
                raise _cause(e) from None
            self._lose(w)
            return
        self._reports[actor_id(w.actor)] = report
        stale = self._finished[split] or w.split != split
        size = sum(nbytes(x) for x in elements) if elements and not stale else 0
        if r is not None:
            if size:
                r.settle(size, refuse=False)
            else:
                r.cancel()
        if stale:
            return
        if elements:
            self._received[split] += len(elements)
            self._buffer.append([split, elements, 0, size])
        if finished:
            self._finished[split] = True
            w.split = None

    # ---- state ------------------------------------------------------------------------------------------
    def _complete(self, s: int) -> bool:
        return self._finished[s] and self._delivered[s] == self._received[s]

    def get_state(self) -> dict[str, Any]:
        k = len(self._plan.splits)
        # ("epoch": the innermost epoch of the iteration path: which iter() of the dataset, which repeat epoch)
        return {"kind": self.kind, "mode": self._cfg.processing_mode, "epoch": self._iteration[-1],
                "splits": self._plan.what, "num_splits": k,
                "complete": [s for s in range(k) if self._complete(s)],
                "delivered": {str(s): d for s, d in enumerate(self._delivered) if d and not self._complete(s)},
                "seeds": pipeline_seeds(self._upstream), "iteration": self._iteration}

    def set_state(self, state: dict[str, Any]) -> None:
        with self._lease.lock:
            self._restore(state)

    def _restore(self, state: dict[str, Any]) -> None:
        k = len(self._plan.splits)
        check_state(state, self.kind, mode=self._cfg.processing_mode, splits=self._plan.what)
        if state.get("num_splits") != k:
            raise StateError(f"{self._stage}: the state has {state.get('num_splits')} splits, this pipeline {k}")
        for w in self._pool.all:  # calls in flight belong to the old position
            for _, _, r in w.calls:
                if r is not None:
                    r.cancel()
            w.calls.clear()
            w.split = None
            if not w.dead:  # (runs before any later call of this actor: an actor runs its calls in order)
                w.actor.close.remote()
        for entry in self._buffer:
            self._account.release(entry[3])
        self._buffer.clear()
        seeds = state.get("seeds")
        if seeds is not None and seeds != pipeline_seeds(self._upstream):
            # A seed=None shuffle upstream drew another seed in this build: adopt the state's, or a split re-run
            # from its delivered count would skip other elements.
            self._upstream = with_seeds(self._upstream, [int(x) for x in seeds], self._stage)
            self._node_ref = self._ray.put(self._upstream)
            for w in self._pool.all:
                if not w.dead:
                    w.actor.set_node.remote(self._node_ref)
        complete = set(state["complete"])
        delivered = {int(s): int(d) for s, d in state["delivered"].items()}
        self._delivered = [delivered.get(s, 0) for s in range(k)]
        self._received = list(self._delivered)
        self._finished = [s in complete for s in range(k)]
        self._pending = collections.deque(s for s in range(k) if s not in complete)
        # (a state taken in another epoch: its splits re-run in that epoch's order)
        self._iteration = [int(i) for i in state.get("iteration", self._iteration)]

    # ---- reporting and shutdown -------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """What the service did so far: ``workers`` (live), ``lost``, ``splits`` (how the source was cut,
        ``complete`` count), ``throughput_per_s`` (elements delivered), ``worker_reports`` (the last report
        of each worker, stopped and lost ones too: RSS, peak RSS, budget, elements made, busy seconds)."""
        elapsed = max(1e-9, time.monotonic() - self._started_s)
        k = len(self._plan.splits)
        return {"service": self._cfg.service, "processing_mode": self._cfg.processing_mode,
                "job_name": self._cfg.job_name, "rank": self._rank, "world_size": self._world,
                "workers": sum(not w.dead for w in self._pool.all), "lost": self._lost,
                "splits": {"how": self._plan.what, "total": k, "complete": sum(map(self._complete, range(k)))},
                "delivered": self._count, "throughput_per_s": round(self._count / elapsed, 1),
                "memory_budget_per_worker": self._cfg.memory_budget,
                "worker_reports": list(self._reports.values())}

    def optimization(self) -> str | None:
        r = self.report()
        peak = max((w["peak_rss_bytes"] for w in r["worker_reports"]), default=0)
        return (f"remote: {self.inputs_label} on {r['workers']} Ray workers at {r['service']} "
                f"({r['processing_mode']}, {r['splits']['complete']}/{r['splits']['total']} splits done, "
                f"{r['lost']} lost), {r['throughput_per_s']:.0f} elements/s, worker budget "
                f"{r['memory_budget_per_worker'] or 'process default'}, worker peak RSS {peak >> 20} MiB")

    @property
    def inputs_label(self) -> str:
        return self._plan.what

    def _close_self(self) -> None:
        self.give_back()
        self._pool.close()
        self._buffer.clear()
        self._account.close()

    def actors(self) -> list[Any]:
        """The handles of every worker actor this dispatcher started (live or not)."""
        return list(self._pool.started)


def _cause(error: BaseException) -> BaseException:
    """The user's exception inside a ``RayTaskError`` (its ``cause``); a worker that could not start (its
    ``__init__`` raised: the pipeline could not be unpickled there) as ``ServiceError`` saying what to fix;
    else ``error``."""
    if getattr(error, "actor_init_failed", False):
        failed = ServiceError(f"distribute: a Ray worker could not load the pipeline ({error}); the functions of "
                              "the pipeline must be importable on the cluster's nodes (install their package "
                              "there or use a Ray runtime_env), or be defined in __main__")
        failed.__cause__ = error
        return failed
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error


__all__ = ["ServiceConfig", "ServiceError", "ServiceIterator", "ServiceNode"]
