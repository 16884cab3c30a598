"""Service iterators left unclosed, as notebooks, checkpoint callbacks and training scripts leave them, on the
2-node cluster of ``conftest.py``: an ended epoch gives its actors back without ``close()``, a dropped iterator's
are stopped, an idle iterator gives its actors to a pipeline that cannot start and resumes exactly once, workers
that cannot be placed say so within seconds naming the free CPUs and the actors holding them; and the shape of
the report that found the stall (pipelines made one after another, never closed, one losing its worker node
mid-epoch, a further pipeline after it): every element exactly once, no ``next()`` waits 30 s."""

from __future__ import annotations

import gc
import sys
import time

import pytest
from service_helpers import TimedNext, alive_actors, swap_worker_node, wait_dead

import headrace as hr
import headrace.service
from headrace.service import ServiceError, service_report

ray = pytest.importorskip("ray")
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # (the workers cannot import this module)
N = 2000


def _work(x):
    t = time.perf_counter()
    while time.perf_counter() - t < 0.001:  # ~1 ms of Python holding the GIL
        pass
    return x


def _pipeline(cluster, n: int = N, **kwargs) -> hr.Dataset:
    return hr.Dataset.range(n).map(_work).apply(headrace.service.distribute(
        "distributed_epoch", cluster.address, num_workers=2, timeout_s=60, **kwargs)).batch(16)


def _dispatcher(it):
    return it._root._source  # (batch's input: the distribute stage)


def _take(it, timed: TimedNext, batches: int | None = None) -> list[int]:
    """The elements of ``batches`` batches (all that are left: None)."""
    got: list[int] = []
    while batches is None or batches > 0:
        try:
            got.extend(int(x) for x in timed(it))
        except StopIteration:
            break
        batches = None if batches is None else batches - 1
    return got


@pytest.mark.slow
def test_unclosed_iterators_and_a_lost_node_never_stall_the_next_pipeline(cluster):
    everything = list(range(N))
    kept: list = []  # every iterator stays referenced and unclosed, as a notebook keeps them
    timed = TimedNext()
    try:
        p1 = iter(_pipeline(cluster))
        kept.append(p1)
        assert sorted(_take(p1, timed)) == everything
        assert not wait_dead(_dispatcher(p1).actors(), 10), "an ended epoch kept its actors"
        p2 = iter(_pipeline(cluster))
        kept.append(p2)
        head2 = _take(p2, timed, 30)
        state = p2.get_state()
        p3 = iter(_pipeline(cluster))  # p2 is idle, unclosed, mid-epoch: it gives its actors back
        kept.append(p3)
        p3.set_state(state)
        assert sorted(head2 + _take(p3, timed)) == everything
        p4 = iter(_pipeline(cluster))
        kept.append(p4)
        head4 = _take(p4, timed, 30)
        swap_worker_node(cluster)
        assert sorted(head4 + _take(p4, timed)) == everything
        assert service_report(p4)[0]["lost"] >= 1
        p5 = iter(_pipeline(cluster))
        kept.append(p5)
        assert sorted(_take(p5, timed)) == everything
        assert sorted(head2 + _take(p2, timed)) == everything  # the idle one resumes with new actors
        assert timed.worst < 30, f"a next() waited {timed.worst:.1f} s"
    finally:
        for it in kept:
            it.close()


def test_a_dropped_iterator_stops_its_actors(cluster):
    it = iter(_pipeline(cluster, 400))
    next(it)
    actors = _dispatcher(it).actors()
    assert alive_actors(actors)
    del it
    gc.collect()
    assert not wait_dead(actors, 10), "a dropped iterator kept its actors"


@ray.remote(num_cpus=1)
class Hog:
    """An actor of another program that holds a CPU."""

    def ready(self) -> bool:
        return True


def test_workers_that_cannot_be_placed_say_so_within_seconds(cluster):
    hogs = [Hog.remote() for _ in range(2)]
    try:
        ray.get([h.ready.remote() for h in hogs], timeout=60)
        it = iter(_pipeline(cluster, 100, start_timeout_s=2))
        t = time.monotonic()
        with pytest.raises(ServiceError, match=r"could not be placed.*0 of 2 CPUs free.*Hog pid \d+") as e:
            next(it)
        assert time.monotonic() - t < 20, e.value
        it.close()
    finally:
        for h in hogs:
            ray.kill(h)
