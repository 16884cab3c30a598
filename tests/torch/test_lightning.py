"""headrace.lightning.ExactlyOnce (issue 25): a Lightning Trainer with a mid-epoch ModelCheckpoint, resumed by
fit(ckpt_path=...) in a fresh process, trains on every element exactly once, in the order of an uninterrupted
run; without the callback the resumed run skips the batch Lightning had prefetched (so the callback is needed).

Ids are the elements themselves (0 .. N-1, reshuffled per epoch): a lost batch is a missing run of ids."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("lightning")
pytest.importorskip("torchdata")

import resume_cases as rc

HERE = Path(__file__).resolve().parent

# (loader kind, the step the first run checkpoints at and stops): mid epoch 0, the first step of epoch 1 (the
# fetcher made that epoch's iterator after on_train_epoch_start), the last step of epoch 0; "-reload": new
# dataloaders (and a new fetcher) every epoch
CASES = [("stateful", 3), ("stateful", 7), ("stateful", 6), ("stateful-workers", 3), ("plain", 3), ("plain", 7),
         ("stateful-sized", 3), ("stateful-reload", 9), ("plain-reload", 7)]
ONLY_WITH = ("stateful-workers", "stateful-reload", "plain-reload")  # the failure without it: shown by the others


def reference(kind: str) -> list[int]:
    """The ids an uninterrupted run trains on: the loader's ``EPOCHS`` epochs."""
    loader = rc.make_loader(kind)
    return [i for _ in range(rc.EPOCHS) for i in rc.ids(loader)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int, bool], tuple[list[int], list[int]]]:
    """For each case, with and without ExactlyOnce in both runs: (ids of the first run, which checkpoints at
    the case's step and stops; ids of the resumed run, in one fresh process for all cases)."""
    warnings.simplefilter("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    firsts, jobs = {}, []
    for kind, step in CASES:
        for exactly_once in (True, False):
            if kind in ONLY_WITH and not exactly_once:
                continue
            d = tmp_path_factory.mktemp(f"{kind}-{step}-{exactly_once}")
            firsts[kind, step, exactly_once] = rc.fit(kind, str(d), stop_at=step, exactly_once=exactly_once)
            [ckpt] = d.glob("*.ckpt")
            jobs.append({"loader": kind, "dir": str(d), "ckpt": str(ckpt), "exactly_once": exactly_once})
    out = subprocess.run([sys.executable, str(HERE / "resume_cases.py"), json.dumps(jobs)], capture_output=True,
                         text=True, timeout=240, check=False, cwd=HERE)
    assert out.returncode == 0, out.stderr[-4000:]
    resumed = json.loads(out.stdout.strip().splitlines()[-1].removeprefix("RESULT "))
    return {key: (firsts[key], seen) for key, seen in zip(firsts, resumed, strict=True)}


@pytest.mark.parametrize(("kind", "step"), CASES, ids=[f"{k}-step{s}" for k, s in CASES])
def test_a_resumed_fit_trains_on_every_element_once(kind: str, step: int, runs: dict) -> None:
    first, resumed = runs[kind, step, True]
    expected = reference(kind)
    assert first == expected[:step * rc.BATCH], "the first run's batches differ from an uninterrupted run's"
    assert first + resumed == expected, (
        f"checkpoint at step {step}: first run {first}, resumed {resumed}; an uninterrupted run: {expected}")


@pytest.mark.parametrize(("kind", "step"), [c for c in CASES if c[0] not in ONLY_WITH],
                         ids=[f"{k}-step{s}" for k, s in CASES if k not in ONLY_WITH])
def test_without_the_callback_a_batch_is_lost_or_the_epoch_restarts(kind: str, step: int, runs: dict) -> None:
    first, resumed = runs[kind, step, False]
    expected = reference(kind)
    if kind == "stateful-sized" or step == 6:
        # a sized loader is not prefetched, and at an epoch's last batch nothing is left to prefetch:
        # Lightning's own restore is exact there (the callback changes nothing)
        assert first + resumed == expected
        return
    seen = first + resumed
    if kind == "stateful":  # StatefulDataLoader: the checkpoint is one batch ahead, that batch is never seen
        assert seen == expected[:step * rc.BATCH] + expected[(step + 1) * rc.BATCH:], seen
    else:  # a plain DataLoader has no state_dict: Lightning saves no position, the epoch starts over
        assert len(seen) > len(expected), seen


def test_a_plain_dataloader_with_workers_is_refused_with_the_fix() -> None:
    from torch.utils.data import DataLoader

    from headrace.lightning import ExactlyOnce
    from headrace.torch import to_torch

    class Loop:  # what on_train_start reads of trainer.fit_loop
        _combined_loader = type("Combined", (), {"flattened": [DataLoader(to_torch(rc.pipeline()), batch_size=None,
                                                                          num_workers=2)]})()
        _data_fetcher = object()

    trainer = type("Trainer", (), {"fit_loop": Loop()})()
    with pytest.raises(ValueError, match=r"num_workers=2.*StatefulDataLoader"):
        ExactlyOnce().on_train_start(trainer, None)
    Loop._combined_loader.flattened = [[1, 2, 3]]
    with pytest.raises(ValueError, match=r"\(list\) has no state_dict"):
        ExactlyOnce().on_train_start(trainer, None)


def test_without_lightning_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    monkeypatch.delitem(sys.modules, "headrace.lightning")
    with pytest.raises(ImportError, match=r"pip install 'headrace\[lightning\]'"):
        importlib.import_module("headrace.lightning")
