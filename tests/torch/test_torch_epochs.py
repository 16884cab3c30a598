"""to_torch under DataLoader workers: every epoch reshuffles (fork, spawn, forkserver; persistent or not),
reproducibly for a seed, and what crosses to a spawn/forkserver worker pickles (issue #21 items 3 and 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from epoch_orders import CASES, EPOCHS, N, epoch_orders, pipeline
from torch.utils.data import DataLoader

import headrace as hr
from headrace.torch import to_torch

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def fresh_run() -> dict[str, list[list[int]]]:
    """Epoch orders computed by another, fresh interpreter (another hash seed too): without workers, and
    with 2 forked workers (every start method must give these)."""
    env = dict(os.environ, PYTHONHASHSEED="123")
    out = subprocess.run([sys.executable, str(HERE / "epoch_orders.py")], env=env, capture_output=True, text=True,
                         timeout=240, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.mark.slow
@pytest.mark.parametrize(("context", "persistent"), CASES, ids=[f"{c or 'main'}-persistent={p}" for c, p in CASES])
def test_every_epoch_reshuffles_reproducibly(context: str | None, persistent: bool,
                                             fresh_run: dict[str, list[list[int]]]) -> None:
    orders = epoch_orders(context, persistent)
    for e, order in enumerate(orders):
        assert sorted(order) == list(range(N)), f"epoch {e} lost or repeated elements: {order}"
    assert len({tuple(o) for o in orders}) == EPOCHS, f"epochs repeat an order: {orders}"
    # Reproducible run to run, and the same for fork, spawn and forkserver (the same recipe and iteration
    # paths in every worker).
    assert orders == fresh_run["main" if context is None else "workers"], "other orders in a fresh run"


def test_set_epoch_picks_the_order_of_that_epoch() -> None:
    tds = to_torch(pipeline(3))
    loader = DataLoader(tds, batch_size=None)
    orders = [[int(v) for b in loader for v in b] for _ in range(3)]
    again = to_torch(pipeline(3))
    again.set_epoch(2)
    assert [int(v) for b in DataLoader(again, batch_size=None) for v in b] == orders[2]
    again.set_epoch(1)  # every epoch set explicitly, as with HF/Accelerate: the same orders
    assert [int(v) for b in DataLoader(again, batch_size=None) for v in b] == orders[1]
    assert [int(v) for b in DataLoader(again, batch_size=None) for v in b] == orders[2]  # then counts on


def test_set_epoch_reaches_persistent_workers() -> None:
    tds = to_torch(pipeline(5))
    loader = DataLoader(tds, batch_size=None, num_workers=2, persistent_workers=True, multiprocessing_context="fork")
    first = [int(v) for b in loader for v in b]
    tds.set_epoch(0)
    assert [int(v) for b in loader for v in b] == first


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1"])
def test_set_epoch_rejects_bad_values(bad: object) -> None:
    with pytest.raises(ValueError, match=r"set_epoch\(.*\): .*int >= 0"):
        to_torch(hr.Dataset.range(3)).set_epoch(bad)  # type: ignore[arg-type]


def _tfrecord_pipeline() -> hr.Dataset:
    pattern = str(HERE.parent / "data" / "tfrecord" / "[res]*.tfrecord")  # raw, examples, sequence_examples
    return (hr.Dataset.list_files(pattern, shuffle=True, seed=1)
            .interleave(hr.io.TFRecordDataset, cycle_length=2, num_parallel_calls=2)
            .map(lambda r: len(r))
            .shuffle(8, seed=1))


@pytest.mark.slow
@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_tfrecord_pipeline_crosses_to_spawned_workers(context: str) -> None:
    # Issue #21 item 4: "cannot pickle '_thread.lock'" (the reader's lock) and lambdas in the recipe.
    expected = sorted(int(v) for v in _tfrecord_pipeline())
    loader = DataLoader(to_torch(_tfrecord_pipeline()), batch_size=None, num_workers=2,
                        multiprocessing_context=context)
    assert sorted(int(v) for v in loader) == expected and len(expected) > 10


def test_recipe_round_trips_through_cloudpickle() -> None:
    import cloudpickle

    ds = _tfrecord_pipeline().batch(3).cache()
    spec = ds.element_spec  # memoized on the nodes before pickling
    again = cloudpickle.loads(cloudpickle.dumps(ds))
    assert again.element_spec == spec
    assert [v.tolist() for v in again] == [v.tolist() for v in ds]
