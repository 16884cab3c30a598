"""Knowledge distillation: the loss is Hinton et al.'s formula, it runs inside fit (accumulation), the teacher
is left unchanged, and a distillation SIGKILLed after a checkpoint resumes exactly."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import headrace as hr
from headrace.compress import DistillationLoss, distill, kd_loss

JOB = Path(__file__).with_name("distill_job.py")


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_kd_loss_equals_the_reference_formula() -> None:
    s = np.array([[2.0, -1.0, 0.5, 0.0], [0.1, 0.2, 3.0, -2.0], [-1.0, 1.0, 0.0, 2.5]])
    t = np.array([[3.0, -2.0, 1.0, 0.0], [0.0, 1.0, 2.0, -1.0], [-0.5, 0.5, 0.2, 4.0]])
    y = np.array([0, 2, 3])
    temperature, alpha = 3.0, 0.7
    p_t, p_s = _softmax(t / temperature), _softmax(s / temperature)
    kl = float(np.sum(p_t * (np.log(p_t) - np.log(p_s))) / len(y))  # batchmean
    ce = float(np.mean(-np.log(_softmax(s)[np.arange(len(y)), y])))
    want = alpha * temperature**2 * kl + (1 - alpha) * ce
    got = kd_loss(torch.tensor(s), torch.tensor(t), torch.tensor(y), temperature=temperature, alpha=alpha)
    assert math.isclose(float(got), want, rel_tol=1e-6)
    # alpha=0: plain cross-entropy; alpha=1: only the soft term, zero when the logits agree
    assert math.isclose(float(kd_loss(torch.tensor(s), torch.tensor(t), torch.tensor(y), alpha=0.0)), ce, rel_tol=1e-6)
    assert float(kd_loss(torch.tensor(t), torch.tensor(t), torch.tensor(y), alpha=1.0)) == pytest.approx(0.0, abs=1e-6)


def test_kd_loss_of_per_segment_logits_counts_the_labelled_slots_only() -> None:
    """Text rows (``(N, S, C)`` logits, ``(N, S)`` labels, -1 on unused slots): the loss of the labelled slots as
    rows of their own; whatever the unused slots' logits are."""
    rng = np.random.default_rng(0)
    s, t = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 4))
    y = np.array([[1, 3, -1], [0, -1, -1]])
    keep = y >= 0
    want = kd_loss(torch.tensor(s[keep]), torch.tensor(t[keep]), torch.tensor(y[keep]), temperature=2.0, alpha=0.5)
    s[~keep], t[~keep] = 1e3, -1e3
    got = kd_loss(torch.tensor(s), torch.tensor(t), torch.tensor(y), temperature=2.0, alpha=0.5)
    assert math.isclose(float(got), float(want), rel_tol=1e-9) and float(want) > 0


@pytest.mark.parametrize(("temperature", "alpha"), [(0.0, 0.5), (-1.0, 0.5), (4.0, 1.5), (4.0, -0.1)])
def test_bad_temperature_or_alpha_is_rejected(temperature: float, alpha: float) -> None:
    with pytest.raises(ValueError, match="temperature" if temperature <= 0 else "alpha"):
        DistillationLoss(torch.nn.Linear(2, 2), temperature=temperature, alpha=alpha)


def _blobs(n: int) -> hr.Dataset:
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=3.0, size=(3, 6))
    y = rng.integers(0, 3, size=n)
    x = (centers[y] + rng.normal(size=(n, 6))).astype(np.float32)
    return hr.Dataset.from_tensor_slices((x, y.astype(np.int64)))


def _mlp(seed: int, hidden: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 3))


def test_distill_trains_the_student_with_accumulation_and_leaves_the_teacher_alone() -> None:
    teacher = _mlp(1, 32)
    before = [p.detach().clone() for p in teacher.parameters()]
    results = []
    for micro in (8, 2):  # one micro-batch per step vs 4 accumulated: the same gradients
        student = _mlp(2, 4)
        d = distill(teacher, student, _blobs(64), temperature=2.0, alpha=0.5, global_batch_size=8,
                    micro_batch_size=micro, epochs=1, progress=False, lr=0.05)
        assert d.method == "distilled" and d.fit_result.steps == 8 and d.model is student
        results.append([p.detach().clone() for p in student.parameters()])
    for a, b in zip(*results):
        assert torch.allclose(a, b, atol=1e-5)
    assert not torch.equal(results[0][0], _mlp(2, 4)[0].weight)  # the student was trained
    for a, b in zip(before, teacher.parameters()):
        assert torch.equal(a, b) and not b.requires_grad


def test_distill_rejects_its_own_loss() -> None:
    with pytest.raises(ValueError, match="loss_fn"):
        distill(_mlp(0, 8), _mlp(1, 4), _blobs(16), global_batch_size=4, loss_fn=torch.nn.CrossEntropyLoss())


def _read_steps(path: Path) -> list[tuple[int, list[int]]]:
    return [(int(line.split()[0]), [int(v) for v in line.split()[1:]]) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_distillation_resumes_exactly_after_sigkill(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    first, second, whole = tmp_path / "first", tmp_path / "second", tmp_path / "whole"
    for d in (first, second, whole):
        d.mkdir()
    uninterrupted = subprocess.Popen([sys.executable, str(JOB), str(whole)], env=env)
    proc = subprocess.Popen([sys.executable, str(JOB), str(first), "--sleep", "0.1"], env=env)
    latest = first / "ckpt" / "latest.json"
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            ids_file = first / "ids.txt"
            done = len(ids_file.read_text().splitlines()) if ids_file.exists() else 0
            if latest.exists() and done > json.loads(latest.read_text())["step"] >= 6:
                break  # steps recorded after the checkpoint: kill mid-epoch, with work to redo
            time.sleep(0.02)
        assert proc.poll() is None, "the job ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    ckpt_step = json.loads(latest.read_text())["step"]
    killed = _read_steps(first / "ids.txt")
    assert ckpt_step < len(killed) < 24
    os.symlink(first / "ckpt", second / "ckpt")
    subprocess.run([sys.executable, str(JOB), str(second), "--resume"], env=env, check=True, timeout=120)
    assert uninterrupted.wait(timeout=120) == 0
    resumed = _read_steps(second / "ids.txt")
    assert [s for s, _ in resumed] == list(range(ckpt_step + 1, 25))
    ids = [i for s, row in killed if s <= ckpt_step for i in row] + [i for _, row in resumed for i in row]
    assert sorted(ids) == list(range(96))  # no duplicates, no gaps
    assert [row for _, row in resumed] == [row for s, row in _read_steps(whole / "ids.txt") if s > ckpt_step]
    # the same losses and the same final student as the run that was never interrupted
    assert (second / "losses.txt").read_text().splitlines() == \
        (whole / "losses.txt").read_text().splitlines()[ckpt_step:]
    assert (second / "params.txt").read_text() == (whole / "params.txt").read_text()
