"""The Ray cluster of the ``headrace.service`` tests: ``ray.cluster_utils.Cluster`` on 127.0.0.1, a head and a
worker node of 1 CPU each (separate raylets), started once for the package (Ray is heavy on a 2-core machine)
and shut down after it. ``cluster.holder["worker"]`` is the worker node (a test that removes it adds a fresh
one)."""

from __future__ import annotations

import os

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # (read when ray is imported) every Ray process on 127.0.0.1


@pytest.fixture(scope="package")
def cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    # A raylet starved of CPU (the suite beside a second one on 2 cores) misses Ray's health checks (3 s, 5 misses)
    # and its node is declared dead; the tests remove nodes gracefully (the head is told at once), so waiting
    # longer for a silent node tests nothing less.
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1",
                                                      "_system_config": {"health_check_failure_threshold": 40}})
    c.holder = {"worker": c.add_node(num_cpus=1, node_ip_address="127.0.0.1")}
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()

