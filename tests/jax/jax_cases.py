"""(Run by ``test_jax_adapter.py`` in a pytest process of its own: JAX's threads must not live in the suite's
process, whose later tests fork worker processes.)

headrace.jax.to_jax: batches as jax.Arrays (global arrays on a NamedSharding over 2 host devices, in a
subprocess), copied ahead on a thread within ``buffer_size`` and the memory budget, exact get_state /
set_state, close() and garbage collection stopping the thread, and what it refuses."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

if importlib.util.find_spec("jax") is None:
    pytest.skip("needs jax (pip install 'headrace[jax]')", allow_module_level=True)

import jax

import headrace as hr
from headrace.jax import to_jax


def _ds(n: int = 24, batch: int = 4) -> hr.Dataset:
    return hr.Dataset.from_tensor_slices((np.arange(n, dtype=np.float32)[:, None] * 2, np.arange(n))).shuffle(
        n, seed=1).batch(batch)


def _ids(batches) -> list[list[int]]:
    return [np.asarray(b[1]).tolist() for b in batches]


def test_sharded_global_arrays_on_two_host_devices() -> None:
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("jax_sharded.py"))], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["devices"] == 2
    assert len(out["batches"]) == 6
    for b in out["batches"]:
        assert b["sharding_ok"] and b["type"] == "ArrayImpl" and b["shape"] == [4, 2] and b["dtype"] == "float32"
        assert b["shards"] == [[[2, 2], 0], [[2, 2], 1]]  # rows 0-1 on one device, 2-3 on the other
        assert b["shard_ids"] == [b["id"][:2], b["id"][2:]]
        assert b["x"] == [[2 * i, 2 * i + 1] for i in b["id"]]  # the right rows
    assert sorted(i for b in out["batches"] for i in b["id"]) == list(range(24))
    assert out["rest"] == [b["id"] for b in out["batches"][2:]]
    assert "batch of 3" in out["error"] and "2 devices" in out["error"] and "multiple of 2" in out["error"]
    assert out["alive_after_close"] == []


def test_batches_as_jax_arrays_on_the_default_device() -> None:
    ds = hr.Dataset.from_tensor_slices({"x": np.arange(10, dtype=np.int32), "name": np.array([b"a"] * 10)}).batch(4)
    got = list(to_jax(ds))
    assert [b["x"].shape for b in got] == [(4,), (4,), (2,)]
    assert all(isinstance(b["x"], jax.Array) and b["x"].dtype == np.int32 for b in got)
    assert np.concatenate([np.asarray(b["x"]) for b in got]).tolist() == list(range(10))
    assert got[0]["name"].tolist() == [b"a"] * 4 and not isinstance(got[0]["name"], jax.Array)  # passes through


def test_state_is_the_last_batch_handed_out_not_the_ones_copied_ahead() -> None:
    whole = _ids(iter(_ds()))
    it = to_jax(_ds(), buffer_size=3)
    head = [np.asarray(next(it)[1]).tolist() for _ in range(2)]
    deadline = time.monotonic() + 10
    while len(it._producer.queue) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)  # the thread has copied 3 more ahead
    state = json.loads(json.dumps(it.get_state()))
    rest = _ids(it)
    assert head + rest == whole
    again = to_jax(_ds())
    again.set_state(state)
    assert _ids(again) == rest
    # set_state on an iterator in use drops what it copied ahead; a start state restarts the iteration
    third = to_jax(_ds())
    first = np.asarray(next(third)[1]).tolist()
    start = to_jax(_ds())
    start_state = start.get_state()
    start.close()
    third.set_state(state)
    assert _ids(third) == rest
    third.set_state(start_state)
    assert _ids(third)[0] == first
    assert start_state["iterator"] is None


def test_copying_ahead_is_bounded_and_charged_to_the_budget() -> None:
    ds = hr.Dataset.from_tensor_slices(np.zeros((64, 1000), np.float32)).batch(4)  # 16,000 bytes a batch
    it = to_jax(ds, buffer_size=2)
    next(it)
    time.sleep(0.3)  # room for the thread to run ahead as far as it may
    assert len(it._producer.queue) == 2
    held = it.memory_stats()["stages"]["to_jax"]["current_bytes"]
    assert held == 2 * 16_000
    it.close()


def test_close_and_garbage_collection_stop_the_thread() -> None:
    it = to_jax(_ds())
    next(it)
    thread = it._producer.thread
    assert it.threads_alive == ["headrace-to_jax"]
    it.close()
    assert not thread.is_alive() and it.threads_alive == []
    with pytest.raises(hr.IteratorClosedError):
        next(it)
    with pytest.raises(hr.IteratorClosedError):
        it.get_state()
    it.close()  # idempotent
    with to_jax(_ds()) as scoped:
        thread = scoped._producer.thread
    assert not thread.is_alive()
    dropped = to_jax(_ds())
    next(dropped)
    thread = dropped._producer.thread
    del dropped
    gc.collect()
    thread.join(5)
    assert not thread.is_alive()


def test_an_interrupt_inside_next_closes_the_iterator_and_stops_its_thread(monkeypatch) -> None:
    # Issue 37: Ctrl-C inside next() left the copying thread and the pipeline running (the batch being taken
    # may be lost, so the iterator cannot go on); now it closes, as a headrace Iterator does.
    from headrace import jax as hr_jax

    it = to_jax(_ds())
    next(it)
    thread = it._producer.thread

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(hr_jax._Producer, "take", interrupted)
    with pytest.raises(KeyboardInterrupt):
        next(it)
    thread.join(2)
    assert not thread.is_alive() and it.threads_alive == []
    with pytest.raises(hr.IteratorClosedError):
        next(it)


def test_an_error_in_the_pipeline_reaches_the_caller_after_the_batches_before_it() -> None:
    def bad(x):
        if x == 6:
            raise KeyError("element six")
        return x

    it = to_jax(hr.Dataset.range(10).map(bad).batch(3))
    assert np.asarray(next(it)).tolist() == [0, 1, 2]
    assert np.asarray(next(it)).tolist() == [3, 4, 5]
    with pytest.raises(KeyError, match="element six"):
        next(it)


def test_to_jax_refuses_bad_arguments_and_states() -> None:
    with pytest.raises(TypeError, match=r"headrace\.Dataset, got ndarray"):
        to_jax(np.zeros(3))
    with pytest.raises(TypeError, match=r"jax.sharding.Sharding.*got str"):
        to_jax(_ds(), sharding="data")
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=rf"buffer_size={bad!r}.*int >= 1"):
            to_jax(_ds(), buffer_size=bad)
    it = to_jax(_ds())
    with pytest.raises(hr.StateError, match="not a headrace to_jax state"):
        it.set_state({"format": "headrace.keras", "version": 1})
    with pytest.raises(hr.StateError, match="iteration=-1"):
        it.set_state({**it.get_state(), "iteration": -1})
    it.close()


def test_an_orbax_checkpoint_manager_saves_and_restores_the_iterator_beside_the_model(tmp_path) -> None:
    ocp = pytest.importorskip("orbax.checkpoint")
    from headrace.jax_orbax import CheckpointRestore, CheckpointSave

    full = _ids(to_jax(_ds()))
    it = to_jax(_ds())
    head = [np.asarray(next(it)[1]).tolist() for _ in range(2)]
    params = {"w": np.arange(4.0)}
    mngr = ocp.CheckpointManager(tmp_path / "ckpt")
    mngr.save(2, args=ocp.args.Composite(state=ocp.args.StandardSave(params), data=CheckpointSave(it)))
    mngr.wait_until_finished()
    it.close()
    fresh = to_jax(_ds())
    restored = mngr.restore(2, args=ocp.args.Composite(state=ocp.args.StandardRestore(params),
                                                       data=CheckpointRestore(fresh)))
    assert restored["data"] is fresh and np.asarray(restored["state"]["w"]).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert head + _ids(fresh) == full
    data = tmp_path / "ckpt" / "2" / "data"
    assert sorted(p.name for p in data.glob("process_*.json")) == ["process_0-of-1.json"]
    (data / "process_0-of-1.json").rename(data / "process_0-of-2.json")  # as another process count wrote it
    with pytest.raises(hr.StateError, match=r"no state for process 0 of 1 .*process_0-of-2\.json.*process count"):
        mngr.restore(2, args=ocp.args.Composite(data=CheckpointRestore(to_jax(_ds()))))
    mngr.close()
