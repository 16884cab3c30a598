"""DDP with two processes launched by torchrun (gloo on 127.0.0.1): it completes, the ranks read disjoint
shares that together are the dataset, and the replicas end with the same parameters; SIGTERM to the job
checkpoints the step reached in every rank."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from train_helpers import TORCHRUN, _stop, free_port, job_env, read_steps, torchrun_job


@pytest.mark.slow
def test_two_process_ddp_resumes_each_rank_where_it_stopped(ddp_stopped_at_step_7: Path, tmp_path: Path) -> None:
    """The run stopped at step 7 (whole micro-batches of 2) resumed with accumulation (micro-batch 1 x 2): over
    both runs, 16 steps in every rank, the ranks' shares disjoint and together the dataset, each element once;
    the replicas agree at the end (gradients all-reduced); the last two checkpoints are kept. (One torchrun job
    checks what a straight run and a resumed one each did.)"""
    run = tmp_path / "run"
    shutil.copytree(ddp_stopped_at_step_7, run)  # its last checkpoint holds both ranks' positions at step 7
    out = torchrun_job(run, "--resume", "--micro", "1")
    ids = {}
    for r in (0, 1):
        rows = read_steps(run / f"ids-rank{r}.txt")
        assert [step for step, _ in rows] == list(range(1, 17))  # steps 1-7, then 8-16 after the resume
        assert all(len(row) == 2 for _, row in rows)  # 2 elements per rank per step (64 / global batch 4)
        ids[r] = [i for _, row in rows for i in row]
    assert not set(ids[0]) & set(ids[1])  # disjoint shares
    assert sorted(ids[0] + ids[1]) == list(range(64))  # no element twice, none missing, over both ranks and runs
    params = {(run / f"params-rank{r}.txt").read_text() for r in (0, 1)}
    assert len(params) == 1  # gradients were all-reduced: the replicas agree
    assert "micro-batch 1 x 2 accumulation step(s) x 2 rank(s)" in out
    assert sorted(p.name for p in (run / "ckpt").glob("ckpt-*.pt")) == ["ckpt-000000015.pt", "ckpt-000000016.pt"]


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _terminate_when(cmd: list[str], marker: str) -> str:
    """Run ``cmd`` in its own session; once an output line holds ``marker``, SIGTERM every process of it;
    return the output."""
    proc = subprocess.Popen(cmd, env=job_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=_default_signals)
    seen: list[str] = []
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            seen.append(line)
            if marker in line:
                os.killpg(proc.pid, signal.SIGTERM)
                break
        seen.append(proc.communicate(timeout=120)[0])
    finally:
        _stop(proc)
    return "".join(seen)


@pytest.mark.slow
def test_sigterm_to_a_torchrun_job_checkpoints_the_step_reached_in_every_rank(tmp_path: Path) -> None:
    """SIGTERM to every process of `torchrun ... headrace train` (as Slurm and Kubernetes stop a job; the
    elastic agent forwards one more to its workers): both ranks stop at the same step after a checkpoint
    of it, and --resume continues from it (issue #21 item 13a)."""
    from headrace.image.photos import iter_photo_jpegs
    from headrace.io.example import encode
    from headrace.io.sharded_writer import ShardedWriter

    with ShardedWriter(tmp_path / "data", "train", num_shards=2) as w:
        for jpeg, label in iter_photo_jpegs(16, (32, 24)):
            w.write(encode({"image/encoded": jpeg, "image/class/label": label}))
    ck = tmp_path / "ck"

    def command(*extra: str) -> list[str]:
        return [*TORCHRUN, "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
                str(free_port()), "-m", "headrace.cli", "train", str(tmp_path / "data"), "--model", "small-cnn",
                "--image-size", "16", "--global-batch-size", "4", "--micro-batch-size", "2", "--epochs", "100",
                "--checkpoint-dir", str(ck), "--checkpoint-every", "100000", *extra]

    out = _terminate_when(command(), "headrace.fit: step 1/400")
    latest = json.loads((ck / "latest.json").read_text())
    assert latest["step"] >= 1, out
    assert f"interrupted (SIGTERM): checkpoint of step {latest['step']} (epoch 1) written to " \
           f"{ck / latest['path']}" in out, out
    states = torch.load(ck / latest["path"], weights_only=True)["data_states"]
    assert len(states) == 2 and all(s is not None for s in states)  # both ranks took part, mid-epoch
    out = _terminate_when(command("--resume"), "resumed from step")
    assert f"resumed from step {latest['step']} (in epoch 1) of {ck / latest['path']}" in out, out
