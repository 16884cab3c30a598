"""headrace.keras with Keras 3 itself, one fresh process per backend (``KERAS_BACKEND`` is read once, at
``import keras``): ``fit(adapt(ds))`` trains on torch and on jax as on the same arrays, ``evaluate`` /
``predict`` work, and ``BackupAndRestore`` resumes the data exactly-once after a kill (torch: ``os._exit``
mid-epoch, then a new process) and after an exception (jax, in one process; also with Keras reading a batch
ahead of the step, as its JAX trainer does on an accelerator).

The jax process runs beside the torch ones (keras_run.py does the work; see its docstring)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("keras") is None or importlib.util.find_spec("jax") is None:
    pytest.skip("needs keras and jax (pip install 'headrace[keras,jax]')", allow_module_level=True)

RUN = Path(__file__).with_name("keras_run.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def _start(backend: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen([sys.executable, str(RUN), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen[str], rc: int = 0) -> dict:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == rc, err[-4000:]
    return json.loads(out.strip().splitlines()[-1]) if rc == 0 else {}


def _check_training(out: dict) -> None:
    loss = out["adapt"]["loss"]
    assert loss[-1] < 0.5 * loss[0], loss  # it learns
    assert abs(out["adapt"]["accuracy"] - out["arrays"]["accuracy"]) < 0.05, out  # as on the arrays
    assert out["adapt"]["accuracy"] > 0.85
    assert out["evaluate"]["accuracy"] == pytest.approx(out["evaluate_arrays"]["accuracy"], abs=1e-6)
    assert out["predict_shape"] == [144, 2] and out["predict_same"]


def _check_exactly_once(first: list[list[int]], resumed: list[list[int]], reference: list[list[int]]) -> None:
    """Epoch 0 and batches 0-3 of epoch 1 before the interruption, the rest after: together the uninterrupted
    run's batches, in its order, so every id once per epoch."""
    assert len(first) == 12 and len(resumed) == 12, (len(first), len(resumed))
    assert first + resumed == reference
    for epoch in range(3):
        ids = [i for batch in reference[8 * epoch:8 * epoch + 8] for i in batch]
        assert sorted(ids) == list(range(48))
    assert reference[:8] != reference[8:16]  # each epoch its own shuffle order


@pytest.mark.slow  # (three processes importing keras: about 30 s of CPU time in all, two at a time)
def test_fit_on_torch_and_jax_and_resume_after_a_kill(tmp_path: Path) -> None:
    jax_run = _start("jax", "train", str(tmp_path / "jax-backup"))
    _result(_start("torch", "kill", str(tmp_path)), rc=17)
    assert (tmp_path / "backup" / "training_metadata.json").exists()
    torch_out = _result(_start("torch", "resume", str(tmp_path)))
    first = json.loads((tmp_path / "ids.json").read_text())
    _check_exactly_once(first, torch_out["resumed"], torch_out["reference"])
    assert torch_out["resumed_epochs"] == 2  # epochs 1 (its rest) and 2
    assert torch_out["ran_out"] == []  # the short, resumed epoch is expected: no "ran out of data" warning
    assert not torch_out["backup_left"]  # deleted at the end, as Keras's
    _check_training(torch_out)

    jax_out = _result(jax_run)
    _check_training(jax_out)
    _check_exactly_once(jax_out["interrupted"], jax_out["resumed"], jax_out["reference"])
    assert jax_out["resumed_epochs"] == 2 and jax_out["ran_out"] == []
    ahead = jax_out["ahead"]  # Keras reading one batch ahead: the backup holds the trained batch's position
    assert all(kept > 0 for kept in ahead["kept"]), ahead["kept"]  # (it did read ahead)
    _check_exactly_once(ahead["interrupted"], ahead["resumed"], ahead["reference"])
