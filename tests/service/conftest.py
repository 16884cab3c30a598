"""The Ray cluster of the ``headrace.service`` tests: ``ray.cluster_utils.Cluster`` on 127.0.0.1, a head and a
worker node of 1 CPU each (separate raylets), started once for the package (Ray is heavy on a 2-core machine)
and shut down after it. ``cluster.holder["worker"]`` is the worker node (a test that removes it adds a fresh
one)."""

from __future__ import annotations

import os

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # (read when ray is imported) every Ray process on 127.0.0.1


START_ATTEMPTS = 3
"""Ray waits a hard-coded 30 s for a node's raylet to register with the GCS (``ray/_private/node.py``); on a
2-core machine running the suite that wait ran out in a quiet clean-clone CI run (18 errors at setup). A start
that runs out is torn down (its processes killed) and tried again."""


def _start_cluster(ray, cluster_class):
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    try:
        # A raylet starved of CPU (the suite beside a second one on 2 cores) misses Ray's health checks (3 s, 5
        # misses) and its node is declared dead; the tests remove nodes gracefully (the head is told at once), so
        # waiting longer for a silent node tests nothing less.
        c = cluster_class(initialize_head=True, head_node_args={
            "num_cpus": 1, "node_ip_address": "127.0.0.1", "_system_config": {"health_check_failure_threshold": 40}})
        c.holder = {"worker": c.add_node(num_cpus=1, node_ip_address="127.0.0.1")}
        ray.init(address=c.address, log_to_driver=False)
        return c
    except Exception as e:
        if "timed out during startup" not in str(e):
            raise
        ray.shutdown()
        started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        for p in started:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(started, timeout=10)
        return None


@pytest.fixture(scope="package")
def cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    c = None
    for _ in range(START_ATTEMPTS):
        c = _start_cluster(ray, Cluster)
        if c is not None:
            break
    if c is None:
        pytest.fail(f"the Ray cluster did not start in {START_ATTEMPTS} attempts (a node timed out during startup)")
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
