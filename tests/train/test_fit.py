"""headrace.train.fit: learning, epochs/steps, eval, callbacks, metrics.jsonl, precision, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from train_helpers import blobs, mlp

import headrace as hr
from headrace.train import StepInfo, fit


def _data(n: int = 192, seed: int = 0) -> hr.Dataset:
    x, y = blobs(n, seed=seed)
    return hr.Dataset.from_tensor_slices((x, y))


def _fit(model: torch.nn.Module | None = None, **kwargs: object):
    model = model or mlp()
    args: dict[str, object] = {"loss_fn": torch.nn.CrossEntropyLoss(),
                               "optimizer": torch.optim.Adam(model.parameters(), lr=0.05),
                               "global_batch_size": 32, "micro_batch_size": 16, "progress": False}
    args.update(kwargs)
    return fit(model, args.pop("dataset", _data().shuffle(64, seed=0)), **args)  # type: ignore[arg-type]


def test_fit_learns_and_reports_each_epoch(tmp_path) -> None:
    steps_seen: list[StepInfo] = []
    epochs_seen: list[dict] = []

    class Recorder:
        def on_step_end(self, info: StepInfo) -> None:
            steps_seen.append(info)

        def on_epoch_end(self, record: dict) -> None:
            epochs_seen.append(record)

    result = _fit(epochs=3, eval_dataset=_data(96, seed=0), callbacks=[Recorder()],
                  checkpoint_dir=tmp_path / "ck", checkpoint_every=4)
    assert result.steps == 3 * (192 // 32) == len(steps_seen)
    assert [s.step for s in steps_seen] == list(range(1, 19))
    assert steps_seen[0].batch[0].shape == (32, 8)
    # epochs count from 1 everywhere: history, callbacks, metrics.jsonl, StepInfo
    assert [r["epoch"] for r in result.history] == [1, 2, 3] and epochs_seen == result.history
    assert [s.epoch for s in steps_seen] == [1] * 6 + [2] * 6 + [3] * 6
    assert result.history[-1]["eval_accuracy"] > 0.9
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    lines = [json.loads(line) for line in (tmp_path / "ck" / "metrics.jsonl").read_text().splitlines()]
    assert [r["event"] for r in lines].count("epoch") == 3 and lines[-1]["event"] == "end"
    assert [r["epoch"] for r in lines if r["event"] == "epoch"] == [1, 2, 3]
    step_records = [r for r in lines if r["event"] == "step"]
    assert step_records and all(r["epoch"] == (r["step"] - 1) // 6 + 1 for r in step_records)
    step_lines = [r for r in lines if r["event"] == "step"]
    assert [r["step"] for r in step_lines] == [10]  # log_every=10
    assert {"loss", "samples_per_s", "data_wait_fraction", "rss_bytes"} <= set(step_lines[0])
    names = sorted(p.name for p in (tmp_path / "ck").glob("ckpt-*.pt"))
    assert names == ["ckpt-000000016.pt", "ckpt-000000018.pt"]  # every 4 steps + the end; keep 2


def test_steps_stop_mid_epoch_and_callable_callbacks() -> None:
    steps: list[int] = []
    result = _fit(steps=4, callbacks=[lambda info: steps.append(info.step)])
    assert result.steps == 4 and steps == [1, 2, 3, 4]
    assert result.history == []  # the epoch did not finish


def test_bf16_autocast_on_cpu_trains() -> None:
    result = _fit(epochs=2, precision="bf16", eval_dataset=_data(96))
    assert result.history[-1]["eval_accuracy"] > 0.8


def test_fp16_on_cpu_is_refused() -> None:
    with pytest.raises(ValueError, match="precision='fp16' needs a CUDA device"):
        _fit(steps=1, precision="fp16", device="cpu")


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"global_batch_size": 0}, "global_batch_size=0"),
    ({"micro_batch_size": "big"}, "micro_batch_size='big'"),
    ({"epochs": 0}, "epochs=0"),
    ({"checkpoint_every": 0}, "checkpoint_every=0"),
    ({"resume": True}, "resume=True needs checkpoint_dir"),
    ({"precision": "fp8"}, "precision='fp8' is not one of"),
    ({"memory_budget": "lots"}, "memory_budget='lots' is not a size"),
])
def test_bad_arguments_are_named(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _fit(steps=1, **kwargs)


def test_elements_must_be_input_target_pairs() -> None:
    ds = hr.Dataset.from_tensor_slices(np.zeros((64, 8), np.float32))
    with pytest.raises(ValueError, match=r"needs elements \(inputs, targets\)"):
        _fit(steps=1, dataset=ds)


@pytest.mark.parametrize("micro", [16, "auto"])
def test_dataset_smaller_than_one_batch_is_an_error(micro: object) -> None:
    with pytest.raises(ValueError, match="fewer than 32 elements"):
        _fit(epochs=1, dataset=_data(20), micro_batch_size=micro)


@pytest.mark.parametrize("stop_at", [5, 8])  # mid-epoch 0, mid-epoch 1 (6 steps per epoch)
def test_resume_continues_exactly_where_the_checkpoint_was(tmp_path, stop_at: int) -> None:
    def run(steps: int, resume: bool, ckpt: str | None) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 3))
        _fit(model, steps=steps, resume=resume, checkpoint_dir=ckpt, checkpoint_every=100,
             dataset=_data().shuffle(64, seed=3))  # reshuffled each epoch
        return [p.detach().clone() for p in model.parameters()]

    straight = run(17, False, None)  # crosses two epoch boundaries
    run(stop_at, False, str(tmp_path))  # the final checkpoint is at step stop_at
    resumed = run(17, True, str(tmp_path))
    for a, b in zip(straight, resumed):  # data order, optimizer state and dropout RNG all restored
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_resumed_run_continues_the_history_and_the_clock(tmp_path) -> None:
    """After resume, ``history`` holds every epoch of the run (the resumed one counting its steps from before
    the checkpoint too) and metrics.jsonl's ``time_s`` goes on from the checkpoint's (issue #21 item 14a)."""
    def run(resume: bool, **kwargs: object):
        torch.manual_seed(0)
        return _fit(resume=resume, checkpoint_dir=tmp_path, checkpoint_every=100, log_every=1,
                    callbacks=[lambda info: __import__("time").sleep(0.05)], **kwargs)

    first = run(False, steps=8)  # epoch 1 (6 steps) and 2 steps of epoch 2
    resumed = run(True, epochs=3)
    assert resumed.steps == 18
    assert [(r["epoch"], r["steps"]) for r in resumed.history] == [(1, 6), (2, 6), (3, 6)]
    assert resumed.history[0] == first.history[0]
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    times = [r["time_s"] for r in lines if r["event"] == "step"]
    assert [r["step"] for r in lines if r["event"] == "step"] == list(range(1, 19))
    assert times == sorted(times) and times[8] >= times[7] >= 0.3  # step 9, after the resume, goes on
    ends = [r for r in lines if r["event"] == "end"]
    assert ends[1]["time_s"] > ends[0]["time_s"] and ends[1]["steps"] == 18
    assert resumed.history[1]["time_s"] >= 0.05 * 6  # epoch 2's six steps, two of them before the resume


def test_resuming_into_another_model_is_a_state_error(tmp_path) -> None:
    _fit(steps=2, checkpoint_dir=tmp_path)
    with pytest.raises(hr.StateError, match=r"ckpt-000000002\.pt: its model state does not fit the model given "
                                            r"to fit \(.*size mismatch.*\); resume with the model"):
        _fit(mlp(classes=4), steps=4, checkpoint_dir=tmp_path, resume=True)


def test_fit_options_are_fits_arguments():
    # fit(...) hands its arguments on as one FitOptions (train/options.py): the two lists must not drift
    import dataclasses
    import inspect

    from headrace.train.fit import fit
    from headrace.train.options import FitOptions

    params = inspect.signature(fit).parameters
    assert [f.name for f in dataclasses.fields(FitOptions)] == [n for n in params if n not in ("model", "dataset")]
    assert all(f.default == params[f.name].default for f in dataclasses.fields(FitOptions)
               if f.default is not dataclasses.MISSING)
