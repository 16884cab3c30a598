"""The pieces that make compression keep accuracy: the student sized by a parameter target, pruning that
reaches a MACs target, early stopping on a held-out split (best weights kept), the cosine schedule, the
teacher-logit cache, alternating latency rounds and the held-out shards."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from compress_helpers import CLASSES, SIZE, image_dataset, trained_cnn

from headrace.compress._training import EarlyStopping, _Stop, cosine_schedule, train
from headrace.compress.demo import split_files
from headrace.compress.distillation import DistillationLoss, kd_loss, student_for_params
from headrace.compress.measure import count_macs, interleaved_latency
from headrace.compress.pruning import prune_to_macs
from headrace.train import build_model


def _params(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("arch", ["small-cnn", "resnet18"])
def test_the_student_is_the_widest_that_fits_the_target(arch: str) -> None:
    teacher = _params(build_model("resnet18", 24))
    target = teacher // 4
    student, width = student_for_params(arch, 24, target)
    assert _params(student) <= target < _params(build_model(arch, 24, width=width + 1))
    assert student(torch.zeros(2, 32, 32, 3, dtype=torch.uint8)).shape == (2, 24)
    with pytest.raises(ValueError, match="--student-params: the narrowest small-cnn"):
        student_for_params("small-cnn", 24, 100)
    with pytest.raises(ValueError, match="'vgg'"):
        student_for_params("vgg", 24, target)


@pytest.mark.parametrize("target", [0.5, 0.3])
def test_pruning_reaches_the_macs_target_in_rounds_and_fine_tunes_between_them(target: float) -> None:
    model = build_model("small-cnn", CLASSES, width=8).eval()
    example = np.zeros((1, SIZE, SIZE, 3), np.uint8)
    base = count_macs(model, example)
    seen: list[tuple[int, int, int]] = []

    def finetune(net: torch.nn.Module, k: int, rounds: int) -> dict:
        seen.append((k, rounds, count_macs(net, example)))
        return {"tuned": k}

    p = prune_to_macs(model, macs_target=target, example_inputs=example, steps=3, finetune=finetune)
    assert p.info["macs"] <= target * base and p.info["macs_ratio"] <= target
    assert p.info["macs"] > 0.5 * target * base  # not pruned far past the target
    assert [k for k, _, _ in seen] == [1, 2, 3] and all(r == 3 for _, r, _ in seen)
    macs = [m for _, _, m in seen]
    assert macs[0] > macs[1] > macs[2] and macs[0] <= base * target ** (1 / 3) * 1.0001
    assert [r["tuned"] for r in p.info["rounds"]] == [1, 2, 3]
    assert count_macs(model, example) == base  # the original is untouched
    assert p.predict(np.zeros((2, SIZE, SIZE, 3), np.uint8)).shape == (2, CLASSES)


@pytest.mark.parametrize(("kwargs", "match"), [({"macs_target": 1.0}, "macs_target=1.0"),
                                               ({"macs_target": 0.5, "steps": 0}, "steps=0"),
                                               ({"macs_target": 0.5, "importance": "taylor"}, "importance='taylor'")])
def test_bad_pruning_targets_are_named(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        prune_to_macs(build_model("small-cnn", 3, width=4), example_inputs=np.zeros((1, 8, 8, 3), np.uint8), **kwargs)


def test_early_stopping_keeps_the_best_weights_and_stops_after_patience() -> None:
    model = torch.nn.Linear(2, 2)
    stopper = EarlyStopping(model, patience=2)
    for epoch, accuracy in enumerate([0.5, 0.7, 0.6], start=1):
        with torch.no_grad():
            model.weight.fill_(float(epoch))
        stopper.on_epoch_end({"eval_accuracy": accuracy})
    with torch.no_grad():
        model.weight.fill_(4.0)
    with pytest.raises(_Stop):
        stopper.on_epoch_end({"eval_accuracy": 0.65})  # second epoch without a new best
    stopper.restore()
    assert stopper.best_epoch == 2 and stopper.best_accuracy == 0.7 and torch.all(model.weight == 2.0)
    with pytest.raises(ValueError, match="patience=0"):
        EarlyStopping(model, 0)


def test_cosine_schedule_warms_up_then_decays_to_zero() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = cosine_schedule(opt, total_steps=20, warmup_steps=4)
    lrs = []
    for _ in range(20):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == pytest.approx(0.1 / 5) and lrs[3] == pytest.approx(0.1 * 4 / 5)
    assert lrs[4] == pytest.approx(0.1) and lrs[12] == pytest.approx(0.1 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert all(a >= b for a, b in itertools.pairwise(lrs[4:])) and opt.param_groups[0]["lr"] == pytest.approx(0.0)


class _Linear(torch.nn.Module):
    """A linear classifier of the flattened image (no BatchNorm: nothing changes but the weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(SIZE * SIZE * 3, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.float().flatten(1) / 255.0)


def test_train_stops_early_on_the_held_out_split() -> None:
    torch.manual_seed(0)
    model = _Linear()
    run = train(model, image_dataset(128, 1), loss_fn=torch.nn.CrossEntropyLoss(), epochs=6, lr=1e-9,
                validation=image_dataset(32, 2), patience=1, global_batch_size=32, micro_batch_size=32,
                progress=False)
    # a learning rate this small leaves the held-out accuracy where it is: the second epoch is no better
    assert run["epochs_run"] == 2 and run["best_epoch"] == 1 and run["fit_result"] is None
    assert 0.0 <= run["validation_accuracy"] <= 1.0
    with pytest.raises(ValueError, match="epochs=0"):
        train(model, image_dataset(8, 1), loss_fn=torch.nn.CrossEntropyLoss(), epochs=0, lr=0.1, global_batch_size=4)


def test_teacher_logit_cache_gives_the_teacher_logits_and_hits_on_the_second_pass() -> None:
    teacher = trained_cnn()
    x, y = (torch.from_numpy(a) for a in hr_batch(8))
    plain = DistillationLoss(teacher, temperature=2.0, alpha=0.5)
    cached = DistillationLoss(teacher, temperature=2.0, alpha=0.5, cache_bytes=2**20)
    want = plain.teacher_logits(x)
    assert torch.allclose(cached.teacher_logits(x), want, atol=1e-5) and cached.cache_misses == 8
    again = cached.teacher_logits(x[[3, 1]])
    assert cached.cache_hits == 2 and torch.allclose(again, want[[3, 1]], atol=1e-5)
    student_out = torch.randn(8, CLASSES)
    assert float(cached(student_out, y, x)) == pytest.approx(
        float(kd_loss(student_out, want, y, temperature=2.0, alpha=0.5)), rel=1e-5)
    with pytest.raises(ValueError, match="cache_bytes=-1"):
        DistillationLoss(teacher, cache_bytes=-1)


def hr_batch(n: int) -> tuple[np.ndarray, np.ndarray]:
    it = iter(image_dataset(n, 5).batch(n))
    try:
        return next(it)
    finally:
        it.close()


def test_interleaved_latency_times_every_model_in_every_round() -> None:
    calls: list[str] = []

    def make(name: str):  # type: ignore[no-untyped-def]
        return lambda batch: calls.append(name)

    out = interleaved_latency({"a": make("a"), "b": make("b"), "c": make("c")}, np.zeros(1), rounds=3, repeats=2,
                              warmup=1)
    assert set(out) == {"a", "b", "c"} and all(v["min"] <= v["p50"] <= v["p90"] for v in out.values())
    timed = calls[3:]  # after one warm-up call each
    assert timed == ["a"] * 2 + ["b"] * 2 + ["c"] * 2 + ["b"] * 2 + ["c"] * 2 + ["a"] * 2 + \
        ["c"] * 2 + ["a"] * 2 + ["b"] * 2  # the order rotates: no model always runs first
    with pytest.raises(ValueError, match="rounds=0"):
        interleaved_latency({"a": make("a")}, np.zeros(1), rounds=0)


def test_interleaved_latency_reports_the_cpu_time_of_a_call() -> None:
    """``cpu_p50`` is this process's CPU time per call: a call that computes for 5 ms of CPU time costs about that
    however loaded the machine is; one that sleeps costs next to nothing."""
    import time

    def compute(batch: np.ndarray) -> None:
        end = time.process_time() + 0.005
        while time.process_time() < end:
            pass

    out = interleaved_latency({"compute": compute, "sleep": lambda batch: time.sleep(0.005)}, np.zeros(1), rounds=2,
                              repeats=3, warmup=0)
    assert out["compute"]["cpu_p50"] >= 5.0 and out["sleep"]["cpu_p50"] < out["compute"]["cpu_p50"] / 2
    assert out["sleep"]["p50"] >= 5.0  # wall time: the sleep counts there


def test_held_out_shards_come_from_the_training_files() -> None:
    files = [f"train-{i:05d}" for i in range(16)]
    train_files, held = split_files(files)
    assert held == files[-2:] and train_files == files[:-2]
    assert split_files(files[:1]) == (files[:1], [])
    assert split_files(files[:3], 0.0) == (files[:3], [])
    assert split_files(files[:2], 0.9) == (files[:1], files[1:2])  # at least one shard left to train on
    with pytest.raises(ValueError, match=r"fraction=1\.0"):
        split_files(files, 1.0)


def test_an_unknown_dataset_size_keeps_the_learning_rate_instead_of_annealing_early(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A schedule of a guessed length annealed to 0 within the first epoch (a `headrace compress` student stuck
    at 30%); without a size there is no schedule (constant learning rate), with one the cosine spans all epochs."""
    import headrace.compress._training as training

    unknown = image_dataset(64, 1).filter(lambda x, y: True)  # cardinality unknown
    assert training.steps_per_epoch(unknown, 16, None) is None and training.steps_per_epoch(unknown, 16, 64) == 4
    made: list[int] = []
    real = training.cosine_schedule
    monkeypatch.setattr(training, "cosine_schedule",
                        lambda opt, total, warmup_steps=0: made.append(total) or real(opt, total, warmup_steps))
    for size in (None, 64):
        torch.manual_seed(0)
        training.train(_Linear(), unknown, loss_fn=torch.nn.CrossEntropyLoss(), epochs=2, lr=0.1, dataset_size=size,
                       global_batch_size=16, micro_batch_size=16, progress=False)
    assert made == [8]  # only the run with a known size: 4 steps x 2 epochs
