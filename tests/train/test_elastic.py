"""Elastic resume: a checkpoint written by N ranks continues with M ranks (ElasticDataset: a global seeded
order over a random-access source, the global position in the checkpoint). Checked by element IDs: every
element not yet trained in an epoch is trained exactly once across the new ranks, each global step holds
the same elements at every world size, and a per-rank pipeline resumed with another world size fails
naming both world sizes and the fix."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import train_job
from train_helpers import ids_by_step, read_steps, torchrun_job

import headrace as hr
from headrace import StateError
from headrace.train import ElasticDataset, fit

N, BATCH = 96, 12  # 8 global steps per epoch; 12 is a multiple of 2, 3 and 4 ranks


def _in_process(out: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> None:
    """``train_job.py OUT ARGS`` in this process (one rank)."""
    out.mkdir(exist_ok=True)
    monkeypatch.setenv("JOB_N", str(N))
    train_job.main([str(out), *args])


# ---- the order itself (in-process) -----------------------------------------------------------------------

@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("start", [0, 36])
def test_elastic_rank_shares_make_the_same_global_steps_at_any_world_size(world: int, start: int) -> None:
    data = ElasticDataset(np.arange(N), shuffle=True, seed=3)
    order = [int(i) for i in data.dataset(epoch=1)]
    assert sorted(order) == list(range(N)) and order != list(range(N))
    steps: dict[int, list[int]] = {}
    for rank in range(world):  # what fit gives rank r of `world` after `start` elements of epoch 1
        share = data.dataset(epoch=1, start=start, num_shards=world, index=rank)
        for k, batch in enumerate(share.batch(BATCH // world, drop_remainder=True)):
            steps.setdefault(k, []).extend(int(i) for i in batch)
    assert len(steps) == (N - start) // BATCH
    for k, ids in steps.items():  # global step k = positions [start + k*B, start + (k+1)*B) of the order
        assert sorted(ids) == sorted(order[start + k * BATCH:start + (k + 1) * BATCH])


def test_elastic_epochs_have_their_own_reproducible_orders() -> None:
    data = ElasticDataset(np.arange(50), seed=1)
    orders = [[int(i) for i in data.dataset(epoch=e)] for e in (0, 1, 0)]
    assert orders[0] == orders[2] != orders[1]
    assert [int(i) for i in ElasticDataset(np.arange(50), shuffle=False).dataset(epoch=4)] == list(range(50))
    assert [int(i) for i in data] == orders[0] and len(data) == 50


def test_elastic_dataset_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError, match=r"needs len\(\) and \[i\]"):
        ElasticDataset(iter(range(3)))
    with pytest.raises(TypeError, match=r"seed=None.*the same on every rank"):
        ElasticDataset([1, 2], seed=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="map_func=3"):
        ElasticDataset([1, 2], 3)  # type: ignore[arg-type]
    model = torch.nn.Linear(4, 2)
    with pytest.raises(ValueError, match=r"fit\(shard=False\) does not apply to an ElasticDataset"):
        fit(model, ElasticDataset(np.arange(8), train_job.element), loss_fn=torch.nn.CrossEntropyLoss(),
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1), global_batch_size=4, micro_batch_size=4,
            shard=False, progress=False)


def test_elastic_dataset_as_eval_dataset_is_evaluated_whole() -> None:
    seen: list[int] = []

    def labelled(i: np.int64, log: list[int] | None = None) -> tuple[np.ndarray, np.int64]:
        if log is not None:
            log.append(int(i))
        x, (label, _) = train_job.element(i)
        return x, label

    model = torch.nn.Linear(4, 2)
    result = fit(model, ElasticDataset(np.arange(40), labelled, seed=1), loss_fn=torch.nn.CrossEntropyLoss(),
                 optimizer=torch.optim.SGD(model.parameters(), lr=0.1), global_batch_size=8, micro_batch_size=8,
                 eval_dataset=ElasticDataset(np.arange(36), lambda i: labelled(i, seen)), progress=False)
    assert result.steps == 5 and 0.0 <= result.history[0]["eval_accuracy"] <= 1.0
    assert sorted(seen) == list(range(36))  # every element evaluated once, the incomplete last batch too


# ---- resume in one process -------------------------------------------------------------------------------

def test_elastic_resume_in_one_process_replays_the_straight_run(tmp_path: Path, monkeypatch) -> None:
    common = ["--elastic", "--global-batch", str(BATCH), "--epochs", "2"]
    _in_process(tmp_path / "straight", monkeypatch, *common, "--ckpt", str(tmp_path / "ck-straight"))
    ck = str(tmp_path / "ck")
    _in_process(tmp_path / "a", monkeypatch, *common, "--steps", "5", "--ckpt", ck)
    _in_process(tmp_path / "b", monkeypatch, *common, "--resume", "--ckpt", ck)
    straight = read_steps(tmp_path / "straight" / "ids-rank0.txt")
    resumed = read_steps(tmp_path / "a" / "ids-rank0.txt") + read_steps(tmp_path / "b" / "ids-rank0.txt")
    assert resumed == straight and len(straight) == 16  # the same elements in the same order
    a = torch.load(tmp_path / "straight" / "params-rank0.pt")
    b = torch.load(tmp_path / "b" / "params-rank0.pt")
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=0)


def test_elastic_resume_with_another_seed_or_length_is_refused(tmp_path: Path) -> None:
    def run(data: ElasticDataset, **kw: object) -> None:
        model = torch.nn.Linear(4, 2)
        fit(model, data, loss_fn=lambda out, t: torch.nn.functional.cross_entropy(out, t[0]),
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1), global_batch_size=4, micro_batch_size=4,
            checkpoint_dir=tmp_path, progress=False, **kw)  # type: ignore[arg-type]

    run(ElasticDataset(np.arange(40), train_job.element, seed=1), steps=3)
    with pytest.raises(StateError, match="seed=1 there but 2 here"):
        run(ElasticDataset(np.arange(40), train_job.element, seed=2), resume=True)
    with pytest.raises(StateError, match="length=40 there but 44 here"):
        run(ElasticDataset(np.arange(44), train_job.element, seed=1), resume=True)
    with pytest.raises(StateError, match="written while training on an ElasticDataset"):
        run(hr.Dataset.range(40).map(train_job.element), resume=True)


# ---- N ranks -> M ranks under torchrun (gloo on loopback) ------------------------------------------------

@pytest.fixture(scope="module")
def elastic_chain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two epochs of 8 global steps (96 elements, global batch 12): steps 1-3 on 4 ranks, 4-11 on 2 ranks
    (epoch 0's rest and epoch 1's start), 12-16 on 3 ranks; each stage resumes the previous one's last
    checkpoint (mid-epoch both times). Plus the same two epochs straight through in one process."""
    root = tmp_path_factory.mktemp("elastic")
    common = ["--elastic", "--global-batch", str(BATCH), "--epochs", "2", "--ckpt", str(root / "ckpt")]
    stages = {"w4": (4, ["--steps", "3"]), "w2": (2, ["--steps", "11", "--resume"]), "w3": (3, ["--resume"])}
    for name, (nproc, extra) in stages.items():
        (root / name).mkdir()
        torchrun_job(root / name, *common, *extra, nproc=nproc, n=N)
    mp = pytest.MonkeyPatch()
    try:
        _in_process(root / "w1", mp, *common[:-2], "--ckpt", str(root / "ckpt-w1"))
    finally:
        mp.undo()
    return {name: root / name for name in ("w4", "w2", "w3", "w1")}


def _steps(run: Path, world: int) -> dict[int, list[int]]:
    return ids_by_step([run / f"ids-rank{r}.txt" for r in range(world)])


@pytest.mark.slow
def test_elastic_resume_4_to_2_trains_the_rest_of_the_epoch_exactly_once(elastic_chain) -> None:
    w4, w2 = _steps(elastic_chain["w4"], 4), _steps(elastic_chain["w2"], 2)
    assert sorted(w4) == [1, 2, 3] and sorted(w2) == list(range(4, 12))
    assert all(len(ids) == BATCH for ids in [*w4.values(), *w2.values()])  # every step a whole global batch
    before = [i for s in (1, 2, 3) for i in w4[s]]
    after = [i for s in range(4, 9) for i in w2[s]]  # the rest of epoch 0, on 2 ranks
    assert len(set(before)) == len(before) and not set(before) & set(after)
    assert sorted(before + after) == list(range(N))  # none lost, none twice


@pytest.mark.slow
def test_elastic_resume_2_to_3_trains_the_rest_of_the_epoch_exactly_once(elastic_chain) -> None:
    w2, w3 = _steps(elastic_chain["w2"], 2), _steps(elastic_chain["w3"], 3)
    assert sorted(w3) == list(range(12, 17))
    before = [i for s in (9, 10, 11) for i in w2[s]]  # epoch 1's first steps, on 2 ranks
    after = [i for s in range(12, 17) for i in w3[s]]  # its rest, on 3 ranks
    assert len(set(after)) == len(after) and not set(before) & set(after)
    assert sorted(before + after) == list(range(N))
    for r in range(3):  # each new rank had a share of every step
        assert [s for s, _ in read_steps(elastic_chain["w3"] / f"ids-rank{r}.txt")] == list(range(12, 17))


@pytest.mark.slow
def test_elastic_resume_keeps_the_global_order_and_the_training(elastic_chain) -> None:
    straight = _steps(elastic_chain["w1"], 1)
    chained = {**_steps(elastic_chain["w4"], 4), **_steps(elastic_chain["w2"], 2), **_steps(elastic_chain["w3"], 3)}
    assert sorted(chained) == sorted(straight) == list(range(1, 17))
    for step in straight:  # the same elements in each global step as one process straight through
        assert sorted(chained[step]) == sorted(straight[step]), step
    final = [torch.load(elastic_chain["w3"] / f"params-rank{r}.pt") for r in range(3)]
    reference = torch.load(elastic_chain["w1"] / "params-rank0.pt")
    for k in reference:
        assert all(torch.equal(f[k], final[0][k]) for f in final)  # the replicas agree
        torch.testing.assert_close(final[0][k], reference[k], rtol=1e-4, atol=1e-5)  # same steps, same model


@pytest.mark.slow
def test_elastic_resume_of_a_per_rank_pipeline_names_both_world_sizes_and_the_fix(
        ddp_stopped_at_step_7: Path, tmp_path: Path, monkeypatch) -> None:
    run = tmp_path / "run"
    shutil.copytree(ddp_stopped_at_step_7, run)  # 2 ranks, Dataset.shard positions, stopped mid-epoch
    monkeypatch.setenv("JOB_N", "64")
    with pytest.raises(StateError) as err:
        train_job.main([str(run), "--resume"])  # one process
    text = str(err.value)
    assert "written by 2 rank(s) and this run has 1" in text
    assert "Resume with 2 rank(s)" in text and "headrace.train.ElasticDataset" in text
    assert read_steps(run / "ids-rank0.txt")[-1][0] == 7  # nothing was trained


def test_fit_shows_the_total_from_the_first_step(capsys: pytest.CaptureFixture[str]) -> None:
    """An ElasticDataset knows its length: the progress lines show the total and the ETA in epoch 1 already
    (issue #21 item 10b)."""
    def labelled(i: np.int64) -> tuple[np.ndarray, np.int64]:
        x, (label, _) = train_job.element(i)
        return x, label

    model = torch.nn.Linear(4, 2)
    fit(model, ElasticDataset(np.arange(44), labelled, seed=1), loss_fn=torch.nn.CrossEntropyLoss(),
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1), global_batch_size=8, micro_batch_size=8,
        epochs=2, progress=False, log_every=2)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("headrace.fit: step ")]
    assert lines[0].startswith("headrace.fit: step 1/10 (10%), epoch 1/2")  # 44 // 8 = 5 steps per epoch
    assert lines[1].startswith("headrace.fit: step 2/10 (20%), epoch 1/2") and ", eta " in lines[1]
