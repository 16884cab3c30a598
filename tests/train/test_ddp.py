"""DDP with two processes launched by torchrun (gloo on 127.0.0.1): it completes, the ranks read disjoint
shares that together are the dataset, and the replicas end with the same parameters."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).with_name("train_job.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _torchrun(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JOB_N": "64", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
           "127.0.0.1", "--master_port", str(_free_port()), str(JOB), str(out), *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_two_process_ddp_data_is_disjoint_and_complete(tmp_path: Path) -> None:
    done = _torchrun(tmp_path, "--micro", "1")
    ids = {}
    for r in (0, 1):
        rows = [[int(v) for v in line.split()] for line in (tmp_path / f"ids-rank{r}.txt").read_text().splitlines()]
        assert [row[0] for row in rows] == list(range(1, 17))  # 64 elements / global batch 4 = 16 steps
        assert all(len(row) == 3 for row in rows)  # 2 elements per rank per step
        ids[r] = [i for row in rows for i in row[1:]]
    assert not set(ids[0]) & set(ids[1])
    assert sorted(ids[0] + ids[1]) == list(range(64))
    params = {(tmp_path / f"params-rank{r}.txt").read_text() for r in (0, 1)}
    assert len(params) == 1  # gradients were all-reduced: the replicas agree
    assert "micro-batch 1 x 2 accumulation step(s) x 2 rank(s)" in done.stdout
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("ckpt-*.pt")) == ["ckpt-000000015.pt",
                                                                            "ckpt-000000016.pt"]


@pytest.mark.slow
def test_two_process_ddp_resumes_each_rank_where_it_stopped(tmp_path: Path) -> None:
    _torchrun(tmp_path, "--steps", "7")  # stops mid-epoch; its last checkpoint holds both ranks' positions
    _torchrun(tmp_path, "--resume")
    seen: list[int] = []
    for r in (0, 1):
        rows = [[int(v) for v in line.split()] for line in (tmp_path / f"ids-rank{r}.txt").read_text().splitlines()]
        assert [row[0] for row in rows] == list(range(1, 17))  # steps 1-7, then 8-16 after the resume
        seen += [i for row in rows for i in row[1:]]
    assert sorted(seen) == list(range(64))  # no element twice, none missing, over both ranks and runs
