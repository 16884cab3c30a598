"""The text model under DDP: two ranks launched by torchrun (gloo on 127.0.0.1) train
``PackedTextClassifier`` on packed rows (``text_job.py``): the ranks train the same tokenizer, read disjoint
rows, agree on the weights after every step, and a run resumed from a mid-run checkpoint ends with the
weights of the uninterrupted run, bit for bit."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from train_helpers import TORCHRUN, free_port, job_env, launch

JOB = Path(__file__).with_name("text_job.py")


def _text_job(out: Path, *args: str) -> str:
    cmd = [*TORCHRUN, "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           str(JOB), str(out), *args]
    ((_, output),) = launch([cmd], job_env(), out, timeout_s=180.0)
    return output


def _steps(path: Path) -> list[tuple[int, str, list[str]]]:
    rows = []
    for line in path.read_text().splitlines():
        step, total, *digests = line.split()
        rows.append((int(step), total, digests))
    return rows


@pytest.mark.slow  # two torchrun jobs of two processes each: ~30 s on 2 loaded cores
def test_two_ranks_train_the_text_model_in_step_and_resume_bit_for_bit(tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    straight.mkdir()
    out = _text_job(straight)
    assert "micro-batch 1 x 2 accumulation step(s) x 2 rank(s)" in out, out
    tokenizers = {(straight / f"tokenizer-rank{r}.txt").read_text() for r in (0, 1)}
    assert len(tokenizers) == 1  # the same vocabulary on both ranks: a token id means the same everywhere
    ranks = [_steps(straight / f"steps-rank{r}.txt") for r in (0, 1)]
    assert [s for s, _, _ in ranks[0]] == [s for s, _, _ in ranks[1]] == [1, 2, 3, 4]
    for (_, sum0, rows0), (_, sum1, rows1) in zip(*ranks, strict=True):
        assert sum0 == sum1  # gradients all-reduced: the replicas agree after every step
        assert len(rows0) == len(rows1) == 2 and not set(rows0) & set(rows1)  # each rank its own rows
    assert len({total for _, total, _ in ranks[0]}) == 4  # and every step changed the weights
    final = [torch.load(straight / f"params-rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert all(torch.equal(final[0][k], final[1][k]) for k in final[0])

    # the same run stopped after step 2: its checkpoint of step 2, resumed to step 4
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(straight / "ckpt", resumed / "ckpt")
    (resumed / "ckpt" / "ckpt-000000004.pt").unlink()
    (resumed / "ckpt" / "latest.json").unlink()  # the newest left is step 2's
    out = _text_job(resumed, "--resume")
    assert "resumed from step 2 (in epoch 1)" in out, out
    assert [s for s, _, _ in _steps(resumed / "steps-rank0.txt")] == [3, 4]
    for r in (0, 1):
        assert _steps(resumed / f"steps-rank{r}.txt") == _steps(straight / f"steps-rank{r}.txt")[2:]
        after = torch.load(resumed / f"params-rank{r}.pt", weights_only=True)
        assert all(torch.equal(after[k], final[r][k]) for k in final[r])
