"""Helpers of the ``headrace.service`` tests: TFRecord shards whose records name their file and index; which
actors Ray still lists alive."""

from __future__ import annotations

import time
from pathlib import Path

from headrace.io import TFRecordWriter


def write_shards(directory: Path, files: int, records: int) -> list[str]:
    """``files`` TFRecord files in ``directory``, record ``i`` of file ``f`` being ``b"f:i"``; their paths."""
    names = []
    for f in range(files):
        names.append(str(directory / f"part-{f}.tfrecord"))
        with TFRecordWriter(names[-1]) as w:
            for i in range(records):
                w.write(f"{f}:{i}".encode())
    return names


def alive_actors(actors) -> list[str]:
    """The ids of ``actors`` (Ray actor handles) that Ray's actor table does not list as ``DEAD``."""
    from ray._private import state

    ids = {a._actor_id.hex() for a in actors}
    return [k for k, v in state.actors().items() if k in ids and v["State"] != "DEAD"]


def wait_dead(actors, timeout_s: float = 20.0) -> list[str]:
    """Wait (up to ``timeout_s``) until every one of ``actors`` is dead; those still alive then."""
    deadline = time.monotonic() + timeout_s
    while (alive := alive_actors(actors)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def swap_worker_node(cluster) -> None:
    """Remove the worker node of ``cluster`` (``conftest.py``'s: its raylet and every actor on it die) and add a
    fresh 1-CPU one."""
    cluster.remove_node(cluster.holder["worker"])
    cluster.holder["worker"] = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")


class TimedNext:
    """``next(it)`` keeping the longest wait (``worst``, seconds): a service pipeline must never make one wait
    long (a hang)."""

    def __init__(self) -> None:
        self.worst = 0.0

    def __call__(self, it):
        t = time.monotonic()
        try:
            return next(it)
        finally:
            self.worst = max(self.worst, time.monotonic() - t)
