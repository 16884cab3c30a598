"""``headrace.service.distribute`` on a 2-node Ray cluster on this machine (``ray.cluster_utils.Cluster``: a
head and a worker node, separate raylets, on 127.0.0.1; one cluster for the module): every element exactly once
per epoch (a range, TFRecord files), also with the worker node removed mid-epoch and across states restored into
fresh pipelines (a restore of a restore too); ``parallel_epochs``; per-worker RSS within its budget; close()
leaves no actor alive."""

from __future__ import annotations

import collections
import json
import random
import sys
import time

import numpy as np
import pytest
from service_helpers import wait_dead, write_shards

import headrace as hr
from headrace.io import TFRecordDataset
from headrace.service import distribute, service_report
from tests.conftest import ints_and_errors

ray = pytest.importorskip("ray")
MiB = 1 << 20
# The functions of this module go to the workers by value (their processes cannot import the test module).
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _closed_without_leaks(it, timeout_s: float = 20.0) -> None:
    actors = it._root.actors() if hasattr(it._root, "actors") else it._root._source.actors()
    it.close()
    alive = wait_dead(actors, timeout_s)
    assert not alive, f"actors left alive after close(): {alive}"


def _slow(x):
    time.sleep(0.002)
    return x * 3


def test_one_epoch_yields_every_element_once_on_both_nodes(cluster):
    ds = hr.Dataset.range(2000).map(_slow).apply(distribute("distributed_epoch", cluster.address, timeout_s=60))
    it = iter(ds)
    got = collections.Counter(int(x) for x in it)
    assert got == collections.Counter(range(0, 6000, 3))
    report = service_report(it)[0]
    assert report["delivered"] == 2000 and report["splits"]["complete"] == report["splits"]["total"] == 16
    nodes = {r["node_id"] for r in report["worker_reports"]}
    assert len(nodes) == 2, f"the workers ran on {nodes}: one node only"
    assert all(r["elements"] > 0 for r in report["worker_reports"])
    assert "remote:" in str(it.explain()) and "Ray workers" in str(it.explain())
    _closed_without_leaks(it)


def test_tfrecord_files_once_each(cluster, tmp_path):
    names = write_shards(tmp_path, 6, 50)
    ds = TFRecordDataset(names).map(lambda r: r.upper()).apply(
        distribute("distributed_epoch", cluster.address, timeout_s=60)).batch(16)
    it = iter(ds)
    got = collections.Counter(r for b in it for r in b.tolist())
    assert got == collections.Counter(f"{f}:{i}".upper().encode() for f in range(6) for i in range(50))
    _closed_without_leaks(it)


def test_removing_the_worker_node_mid_epoch_still_yields_every_element_once(cluster):
    ds = hr.Dataset.range(1500).map(_slow).apply(distribute("distributed_epoch", cluster.address, timeout_s=60))
    it = iter(ds)
    got = collections.Counter(int(next(it)) for _ in range(300))
    nodes = {r["node_id"] for r in service_report(it)[0]["worker_reports"]}
    assert cluster.holder["worker"].node_id in nodes
    cluster.remove_node(cluster.holder["worker"])
    try:
        got.update(int(x) for x in it)
        assert got == collections.Counter(range(0, 4500, 3))
        assert service_report(it)[0]["lost"] >= 1
        _closed_without_leaks(it)
    finally:
        cluster.holder["worker"] = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()


def test_a_state_restored_in_a_fresh_pipeline_yields_exactly_the_rest(cluster):
    def make():
        # (a seeded shuffle per split: a split's pipeline makes the same elements each time it runs)
        return hr.Dataset.range(400).map(lambda x: x + 1).shuffle(10, seed=3).apply(
            distribute("distributed_epoch", cluster.address, timeout_s=60, chunk_bytes=64)).batch(7)

    everything = collections.Counter(range(1, 401))
    for first, second in ((9, 20), (50, 0)):
        seen: collections.Counter = collections.Counter()
        it = iter(make())
        for _ in range(first):
            seen.update(next(it).tolist())
        state = json.dumps(it.get_state())
        assert len(state) < 4000, "the state holds positions, not data"
        it.close()
        it = iter(make())
        it.set_state(json.loads(state))
        for _ in range(second):  # a restore of a restore
            seen.update(next(it).tolist())
        state = json.dumps(it.get_state())
        it.close()
        it = iter(make())
        it.set_state(json.loads(state))
        seen.update(x for b in it for x in b.tolist())
        it.close()
        assert seen == everything, (first, second, +(seen - everything), +(everything - seen))


def test_a_state_restored_into_the_iterator_in_use_yields_exactly_the_rest(cluster):
    ds = hr.Dataset.range(300).apply(distribute("distributed_epoch", cluster.address, timeout_s=60, chunk_bytes=64))
    it = iter(ds)
    seen = collections.Counter(int(next(it)) for _ in range(40))
    state = it.get_state()
    for _ in range(200):  # splits finish on the workers meanwhile; the restore must reopen them
        next(it)
    it.set_state(state)
    seen.update(int(x) for x in it)
    assert seen == collections.Counter(range(300))
    _closed_without_leaks(it)


def test_a_worker_killed_mid_epoch_gives_its_split_to_another(cluster):
    ds = hr.Dataset.range(800).map(_slow).apply(distribute("distributed_epoch", cluster.address, timeout_s=60))
    it = iter(ds)
    got = collections.Counter(int(next(it)) for _ in range(100))
    time.sleep(0.5)  # back-pressure: what the workers made ahead is bounded by the calls outstanding
    root = it._root
    assert all(len(w.calls) <= 2 for w in root._pool.all) and len(root._buffer) <= 2 * 2 + 1
    ray.kill(root.actors()[0], no_restart=True)
    got.update(int(x) for x in it)
    assert got == collections.Counter(range(0, 2400, 3))
    assert service_report(it)[0]["lost"] == 1
    _closed_without_leaks(it)


def _jitter(x):
    time.sleep(0.003 if random.random() < 0.5 else 0.0)  # (half the elements overtaken by their successors)
    return x


@pytest.mark.parametrize("upstream", ["unseeded-shuffle", "nondeterministic-map"])
def test_a_split_rerun_makes_the_same_elements_so_the_rest_is_exact(cluster, upstream):
    # A split re-run from its delivered count (a restore into a fresh pipeline, a lost worker) skips that many
    # elements: without the state's seed an unseeded shuffle, and without running in order a
    # deterministic=False map, made other elements first (6 duplicated and 6 lost of 400 before the fix).
    def make():
        ds = hr.Dataset.range(400)
        ds = ds.shuffle(50) if upstream == "unseeded-shuffle" else ds.map(_jitter, num_parallel_calls=4,
                                                                          deterministic=False)
        return ds.apply(distribute("distributed_epoch", cluster.address, timeout_s=60, chunk_bytes=64))

    seen = collections.Counter()
    it = iter(make())
    seen.update(int(next(it)) for _ in range(60))
    state = json.loads(json.dumps(it.get_state()))
    it.close()
    it = iter(make())
    it.set_state(state)
    seen.update(int(next(it)) for _ in range(100))
    ray.kill(it._root.actors()[0], no_restart=True)  # and a lost worker's split re-run by another
    seen.update(int(x) for x in it)
    everything = collections.Counter(range(400))
    assert seen == everything, (+(seen - everything), +(everything - seen))
    _closed_without_leaks(it)


def test_each_epoch_draws_another_order_and_a_restore_continues_its_epochs(cluster):
    # A reshuffle_each_iteration shuffle upstream: each iter() of the dataset is another order, as locally (the
    # workers ran every epoch as iteration 0 before); a state taken in the third epoch, restored in a fresh
    # pipeline, re-runs its splits in that epoch's order (a split cut mid-way would otherwise lose and
    # duplicate elements).
    def make():
        return hr.Dataset.range(200).shuffle(200).apply(
            distribute("distributed_epoch", cluster.address, num_workers=1, timeout_s=60, chunk_bytes=64))

    ds = make()
    epochs = [[int(x) for x in ds] for _ in range(2)]
    assert all(sorted(e) == list(range(200)) for e in epochs)
    assert epochs[0] != epochs[1]
    it = iter(ds)  # the third epoch
    head = [int(next(it)) for _ in range(60)]
    state = json.loads(json.dumps(it.get_state()))
    it.close()
    assert '"iteration": [2]' in json.dumps(state)
    it = iter(make())
    it.set_state(state)
    rest = [int(x) for x in it]
    assert sorted(head + rest) == list(range(200)), (len(head + rest), len(set(head + rest)))
    assert head + rest not in epochs
    _closed_without_leaks(it)


def test_parallel_epochs_yields_a_copy_per_worker(cluster):
    ds = hr.Dataset.range(60).apply(distribute("parallel_epochs", cluster.address, num_workers=2, timeout_s=60))
    assert ds.cardinality() == 120
    it = iter(ds)
    assert collections.Counter(int(x) for x in it) == collections.Counter(list(range(60)) * 2)
    _closed_without_leaks(it)


def test_more_workers_than_cpus_raises_naming_the_cpus(cluster):
    ds = hr.Dataset.range(5).apply(distribute("distributed_epoch", cluster.address, num_workers=5))
    with pytest.raises(ValueError, match=r"num_workers=5.*2 CPUs"):
        next(iter(ds))


def test_an_error_of_the_user_function_reaches_the_trainer_and_the_epoch_goes_on(cluster):
    def f(x):
        if x == 17:
            raise KeyError("bad element 17")
        return x

    ds = hr.Dataset.range(40).map(f).apply(distribute("distributed_epoch", cluster.address, timeout_s=60))
    it = iter(ds).__iter__()
    got, errors = ints_and_errors(it, KeyError)
    assert sorted(got) == [x for x in range(40) if x != 17] and len(errors) == 1
    _closed_without_leaks(it)


def _big(i):
    return np.full(1 << 20, i, np.float32)  # 4 MiB


_KEPT: list = []


def _leak(a):
    _KEPT.append(a + 1)  # memory the pipeline does not know of: the RSS check must see it
    return a[:4].copy()


@pytest.mark.parametrize("leak", [False, True])
def test_worker_rss_stays_within_its_budget(cluster, leak):
    # A shuffle of 40 elements of 4 MiB wants 160 MiB: with a 48 MiB budget it shrinks to fit.
    ds = hr.Dataset.range(40).map(_big).shuffle(40, seed=1).map(_leak if leak else lambda a: a[:4].copy()).apply(
        distribute("distributed_epoch", cluster.address, num_workers=1, memory_budget="48MiB", timeout_s=60))
    trainer = ds.with_options(hr.Options(memory_budget="16MiB"))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the shuffle says once that it runs smaller)
        it = iter(trainer)
        assert sorted(int(a[0]) for a in it) == list(range(40))
    report = service_report(it)[0]["worker_reports"][0]
    grew = report["peak_rss_bytes"] - report["start_rss_bytes"]
    assert report["budget_bytes"] == 48 * MiB and report["held_peak_bytes"] <= 48 * MiB
    if leak:  # 160 MiB kept outside the pipeline: the same check fails
        assert grew > 48 * MiB * 1.1 + 64 * MiB, grew / MiB
    else:
        assert grew <= 48 * MiB * 1.1 + 64 * MiB, f"worker RSS grew {grew / MiB:.0f} MiB over a 48 MiB budget"
    assert it.memory_stats()["peak_bytes"] <= 16 * MiB
    _closed_without_leaks(it)


def test_the_trainer_rss_stays_within_its_budget(cluster):
    import psutil

    # 60 elements of 4 MiB (240 MiB) stream through a trainer whose budget is 24 MiB.
    ds = hr.Dataset.range(60).map(_big).apply(
        distribute("distributed_epoch", cluster.address, num_workers=1, timeout_s=60)).map(lambda a: a[:1].copy())
    proc = psutil.Process()
    start = peak = proc.memory_info().rss
    it = iter(ds.with_options(hr.Options(memory_budget="24MiB")))
    got = []
    for x in it:
        got.append(int(x[0]))
        peak = max(peak, proc.memory_info().rss)
    assert sorted(got) == list(range(60))
    assert peak - start <= 24 * MiB * 1.1 + 64 * MiB, f"the trainer's RSS grew {(peak - start) / MiB:.0f} MiB"
    assert it.memory_stats()["peak_bytes"] <= 24 * MiB
    _closed_without_leaks(it)


def test_a_pipeline_the_workers_cannot_load_raises_saying_what_to_fix(cluster):
    from headrace.service import ServiceError

    class Unloadable:
        def __reduce__(self):
            return (_refuse, ())

    thing = Unloadable()
    ds = hr.Dataset.range(5).map(lambda x: x + (thing is None)).apply(
        distribute("distributed_epoch", cluster.address, timeout_s=60))
    it = iter(ds)
    with pytest.raises(ServiceError, match=r"(?s)could not load the pipeline.*importable"):
        next(it)
    _closed_without_leaks(it)


def _refuse():
    raise ImportError("no module named 'only_on_the_trainer'")


def _as_rank(monkeypatch, rank: int, world: int, ds: hr.Dataset):
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(world))
    return iter(ds)


def test_ranks_of_a_job_get_disjoint_equal_shares(cluster, monkeypatch):
    # 103 elements, batches of 4 made on the workers, 2 ranks: 51 elements each, in the same number of batches.
    ds = hr.Dataset.range(103).map(lambda x: x * 2).batch(4).apply(
        distribute("distributed_epoch", cluster.address, num_workers=1, job_name="test-job", timeout_s=60))
    ranks = [_as_rank(monkeypatch, r, 2, ds) for r in range(2)]
    assert ds.cardinality() == 16  # per rank: 8 splits of 6 or 7 elements, 2 batches each
    got = [[b.tolist() for b in it] for it in ranks]
    assert len(got[0]) == 16
    flat = [sorted(x for b in g for x in b) for g in got]
    assert len(got[0]) == len(got[1]) and len(flat[0]) == len(flat[1]) == 51
    assert not set(flat[0]) & set(flat[1])
    assert sorted(flat[0] + flat[1]) == [x * 2 for x in range(102)]  # the 103rd: past the equal shares
    report = service_report(ranks[1])[0]
    assert (report["job_name"], report["rank"], report["world_size"]) == ("test-job", 1, 2)
    state = ranks[0].get_state()
    for it in ranks:
        _closed_without_leaks(it)
    other = _as_rank(monkeypatch, 0, 3, ds)  # another world size: refused before it reads anything
    with pytest.raises(ValueError, match=r"world size 3.*the job 2"):
        next(other)
    other.close()
    again = _as_rank(monkeypatch, 1, 2, hr.Dataset.range(103).map(lambda x: x * 2).batch(4).apply(
        distribute("distributed_epoch", cluster.address, num_workers=1, job_name="test-job-2", timeout_s=60)))
    with pytest.raises(hr.StateError, match="rank"):  # rank 0's state in rank 1
        again.set_state(state)
    again.close()


def test_a_job_needs_an_index_source_and_known_counts():
    with pytest.raises(ValueError, match="filter"):
        hr.Dataset.range(10).filter(lambda x: x > 2).apply(distribute("distributed_epoch", "auto", job_name="j"))
    with pytest.raises(ValueError, match=r"auto_shard.*without job_name"):
        hr.Dataset.from_generator(lambda: iter([1]), output_signature=hr.TensorSpec((), "int64")).apply(
            distribute("distributed_epoch", "auto", job_name="j"))


@pytest.mark.slow
def test_headrace_train_service_trains_on_data_the_cluster_reads(cluster, tmp_path):
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from headrace.cli import app
    from headrace.image.photos import iter_photo_jpegs
    from headrace.io.example import encode
    from headrace.io.sharded_writer import ShardedWriter

    with ShardedWriter(tmp_path, "train", num_shards=3) as w:
        for jpeg, label in iter_photo_jpegs(24, (64, 48)):
            w.write(encode({"image/encoded": jpeg, "image/class/label": label}))
    from ray._private import state

    def workers_started() -> int:
        return sum(a["ActorClassName"].endswith("SplitWorker") for a in state.actors().values())

    before = workers_started()
    r = CliRunner().invoke(app, ["train", str(tmp_path), "--model", "small-cnn", "--image-size", "32",
                                 "--global-batch-size", "8", "--service", cluster.address])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output.strip().splitlines()[-1])
    assert summary["steps"] == 3 and summary["records"] == 24
    assert workers_started() >= before + 2  # the data came through the cluster's workers
