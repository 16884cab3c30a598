"""A slice of the service sweep (``bench/service_sweep.py`` runs hundreds): the first generated case of each kill
point (a worker actor, the worker node, the trainer restored 1-3 times), judged element by element
(``sweep.py``): nothing lost, duplicated or reordered within a split, no hang, each split in its trainer epoch's
order."""

from __future__ import annotations

import pytest
import sweep

ray = pytest.importorskip("ray")
ray.cloudpickle.register_pickle_by_value(sweep)  # (the workers cannot import the tests' modules)


def _first(kill: str):
    return next(c for c in map(sweep.generate, range(1000)) if c.kill == kill and c.epoch > 0)


@pytest.mark.slow
@pytest.mark.parametrize("kill", ["actor", "node", "trainer"])
def test_a_generated_case_is_exactly_once(cluster, tmp_path, kill):
    case = _first(kill)
    v = sweep.run_case(case, sweep.write_files(tmp_path), cluster)
    assert not v.failed(), f"{case.describe()}: {v}"
