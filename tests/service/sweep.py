"""The service sweep's cases, run and judged: generated (seeded) upstream shapes x kill points x restores of
restores, on one running 2-node Ray cluster (``bench/service_sweep.py`` runs hundreds; ``test_sweep_slice.py``
a few).

A case is an upstream of ``distribute("distributed_epoch", num_workers=2)`` - a ``range`` or an ``interleave``
of TFRecord files (records ``b"f:i"`` read as the int ``1000 f + i``), then 1-4 of: ``map`` (sequential,
parallel in order, or ``deterministic=False`` with a random sleep), ``shuffle`` (seeded or not, reshuffling each
iteration or not), ``filter``, ``batch`` then ``unbatch``, a ``map`` that raises on some elements then
``ignore_errors`` - sometimes a ``batch`` downstream, run in a trainer epoch ``e`` (``Iterator(ds,
iteration=e)``), with one kill point: none, a worker actor killed, the worker node removed (a fresh one
added), or the trainer stopped (``get_state`` -> JSON -> a freshly built pipeline -> ``set_state``, 1-3 times:
restores of restores; the old iterator closed, or left open half the time as a notebook leaves it).

Judged element by element against the same splits run locally (``_splits.split_node`` under ``InOrderNode``,
in the iteration ``(e,)``, with the pipeline's own seeds): per split, the elements delivered are exactly the
split's elements in the split's order (``lost``, ``duplicated``, ``reordered``: counts of elements); ``hang``:
a ``next()`` over ``HANG_S`` or a ``ServiceError``. Since the delivered order of every split is its order in the
trainer's epoch ``e``, a trainer epoch reshuffles exactly when the upstream says so: an upstream without a
reshuffling shuffle must give every split the same order in epochs ``e`` and ``e + 1`` (else ``reshuffle``);
one with a reshuffling shuffle is counted ``epoch_blind`` when no split's order differs between them (too few
elements to tell the epochs apart; not a failure, reported).
"""

from __future__ import annotations

import collections
import json
import random
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service_helpers import TimedNext, swap_worker_node, write_shards

import headrace as hr
from headrace._dataset import Dataset
from headrace.io import TFRecordDataset
from headrace.service import ServiceError, distribute
from headrace.service._dispatch import ServiceIterator
from headrace.service._splits import InOrderNode, split_node

HANG_S = 30.0  # a next() longer than this is a hang
FILES, RECORDS = 4, 60
UPSTREAM_OPS = ("map", "map_parallel", "map_unordered", "shuffle_seeded", "shuffle_unseeded", "shuffle_fixed",
                "filter", "batch_unbatch", "ignore_errors")
KILLS = ("none", "actor", "node", "trainer")


def write_files(directory: Path) -> list[str]:
    """The TFRecord files of the ``files`` source: record ``i`` of file ``f`` is ``b"f:i"``."""
    return write_shards(directory, FILES, RECORDS)


def _record_id(r: Any) -> int:
    f, i = bytes(r).split(b":")
    return 1000 * int(f) + int(i)


def _plus(x: Any) -> Any:
    return x + 7


def _jitter(x: Any) -> Any:
    time.sleep(random.random() * 0.002)  # (later elements overtake earlier ones in a deterministic=False map)
    return x


def _keep(x: Any) -> bool:
    return int(x) % 7 != 3


def _fail_some(x: Any) -> Any:
    if int(x) % 11 == 5:
        raise ValueError(f"element {int(x)} is bad")
    return x


@dataclass
class Case:
    """One generated case (see the module docstring)."""

    seed: int
    source: str  # "range" or "files"
    n: int
    ops: list[tuple[str, int]]
    batch: int | None  # downstream of distribute
    epoch: int
    kill: str
    at: list[float] = field(default_factory=list)  # fractions of the epoch where the kill(s) happen

    def describe(self) -> str:
        ops = " -> ".join(f"{o}({a})" for o, a in self.ops)
        return (f"seed {self.seed}: {self.source}({self.n}) -> {ops} -> distribute -> batch({self.batch}), "
                f"epoch {self.epoch}, kill {self.kill} at {[round(a, 2) for a in self.at]}")


def generate(seed: int, kills: tuple[str, ...] = KILLS) -> Case:
    """The case of ``seed`` (the same case for the same seed)."""
    rng = random.Random(seed)
    source = rng.choice(["range", "range", "files"])
    n = rng.randrange(200, 600) if source == "range" else FILES * RECORDS
    ops = [(rng.choice(UPSTREAM_OPS), rng.randrange(2, 40)) for _ in range(rng.randrange(1, 5))]
    kill = rng.choice(kills)
    at = sorted(rng.uniform(0.05, 0.9) for _ in range(rng.randrange(1, 4) if kill == "trainer" else 1))
    return Case(seed, source, n, ops, rng.choice([None, 4, 16]), rng.randrange(3), kill, [] if kill == "none" else at)


def upstream(case: Case, files: list[str]) -> Dataset:
    """The case's pipeline upstream of ``distribute`` (built anew each call: a ``seed=None`` shuffle draws)."""
    if case.source == "range":
        ds = hr.Dataset.range(case.n)
    else:
        ds = hr.Dataset.from_tensor_slices(files).interleave(TFRecordDataset, cycle_length=2).map(_record_id)
    for op, a in case.ops:
        if op == "map":
            ds = ds.map(_plus)
        elif op == "map_parallel":
            ds = ds.map(_jitter, num_parallel_calls=2)
        elif op == "map_unordered":
            ds = ds.map(_jitter, num_parallel_calls=3, deterministic=False)
        elif op == "shuffle_seeded":
            ds = ds.shuffle(a, seed=a)
        elif op == "shuffle_unseeded":
            ds = ds.shuffle(a)
        elif op == "shuffle_fixed":
            ds = ds.shuffle(a, seed=a, reshuffle_each_iteration=False)
        elif op == "filter":
            ds = ds.filter(_keep)
        elif op == "batch_unbatch":
            ds = ds.batch(1 + a % 5).unbatch()
        elif op == "ignore_errors":
            ds = ds.map(_fail_some).ignore_errors()
    return ds


def pipeline(case: Case, files: list[str], address: str) -> Dataset:
    ds = upstream(case, files).apply(distribute("distributed_epoch", address, num_workers=2, timeout_s=60))
    return ds if case.batch is None else ds.batch(case.batch)


def dispatcher(it: hr.Iterator) -> ServiceIterator:
    """The ``distribute`` stage of a started iterator."""
    stage = it._root
    while not isinstance(stage, ServiceIterator):
        stage = next(c for c in stage._children() if c is not None)
    return stage


def split_orders(d: ServiceIterator, iteration: tuple[int, ...]) -> list[list[int]]:
    """Each split's elements in order, run here as a worker runs it (in order, in ``iteration``)."""
    out = []
    for split in d._plan.splits:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", hr.IgnoredErrorsWarning)  # (ignore_errors upstream says what it dropped)
            with hr.Iterator(Dataset(InOrderNode(split_node(d._upstream, list(split)))), iteration=iteration) as it:
                out.append([int(x) for x in it])
    return out


@dataclass
class Verdict:
    """What the judge found in one case (counts of elements; ``hang``, ``reshuffle``, ``epoch_blind``: 0/1)."""

    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    hang: int = 0
    reshuffle: int = 0
    epoch_blind: int = 0
    worst_next_s: float = 0.0
    seconds: float = 0.0
    error: str = ""

    def failed(self) -> bool:
        return bool(self.lost or self.duplicated or self.reordered or self.hang or self.reshuffle or self.error)


def _flat(x: Any) -> list[int]:
    return [int(v) for v in x] if getattr(x, "ndim", 0) else [int(x)]


def run_case(case: Case, files: list[str], cluster: Any) -> Verdict:
    """Run ``case`` on ``cluster`` (a ``ray.cluster_utils.Cluster`` with ``holder["worker"]``) and judge it."""
    import ray

    v = Verdict()
    started = time.monotonic()
    got: list[int] = []
    its: list[hr.Iterator] = []
    timed = TimedNext()
    try:
        it = hr.Iterator(pipeline(case, files, cluster.address), iteration=case.epoch)
        its.append(it)
        d = dispatcher(it)
        orders = split_orders(d, (case.epoch,))
        total = sum(map(len, orders))
        marks = [int(a * total) for a in case.at]
        rng = random.Random(case.seed)
        while True:
            if marks and len(got) >= marks[0]:
                marks.pop(0)
                if case.kill == "actor" and d.actors_held():
                    ray.kill(rng.choice(d.actors_held()), no_restart=True)
                elif case.kill == "node":
                    swap_worker_node(cluster)
                elif case.kill == "trainer":
                    state = json.loads(json.dumps(it.get_state()))
                    if rng.random() < 0.5:  # (else left open, as a notebook leaves it: it gives its actors back)
                        it.close()
                    it = hr.Iterator(pipeline(case, files, cluster.address), iteration=case.epoch)
                    its.append(it)
                    it.set_state(state)
            try:
                got.extend(_flat(timed(it)))
            except StopIteration:
                break
        _judge(v, got, orders)
        if any(op in ("shuffle_seeded", "shuffle_unseeded") for op, _ in case.ops):
            following = split_orders(d, (case.epoch + 1,))
            if all(a == b for a, b in zip(orders, following, strict=True)):
                v.epoch_blind = 1  # (too few elements per split to tell the epochs apart)
        elif any(a != b for a, b in zip(orders, split_orders(d, (case.epoch + 1,)), strict=True)):
            v.reshuffle = 1  # an upstream that does not reshuffle gave another order in the next epoch
    except ServiceError as e:
        v.hang, v.error = 1, f"ServiceError: {e}"
    except Exception as e:  # a failure the judge reports with its case
        v.error = f"{type(e).__name__}: {e}"
    finally:
        for it in its:
            it.close()
    v.worst_next_s = timed.worst
    if v.worst_next_s > HANG_S:
        v.hang = 1
    v.seconds = time.monotonic() - started
    return v


def _judge(v: Verdict, got: list[int], orders: list[list[int]]) -> None:
    where = {x: s for s, order in enumerate(orders) for x in order}
    have = collections.Counter(got)
    want = collections.Counter(list(where))
    v.lost = sum((want - have).values())
    v.duplicated = sum((have - want).values())
    per_split: list[list[int]] = [[] for _ in orders]
    for x in got:
        if x in where:
            per_split[where[x]].append(x)
    v.reordered = sum(a != b for order, seen in zip(orders, per_split, strict=True)
                      for a, b in zip(order, seen, strict=False))
