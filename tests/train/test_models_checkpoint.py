"""Built-in models, checkpoint files, RSS measurement."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from headrace import StateError
from headrace.train.checkpoint import (
    capture_rng,
    latest_checkpoint,
    load_checkpoint,
    restore_rng,
    save_checkpoint,
)
from headrace.train.memory import PeakRSS, release_free_memory, rss_bytes
from headrace.train.models import MODEL_NAMES, build_model


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_models_take_nhwc_uint8_and_nchw_float(name: str) -> None:
    model = build_model(name, 5).eval()
    nhwc = torch.randint(0, 256, (2, 32, 32, 3), dtype=torch.uint8)
    nchw = nhwc.permute(0, 3, 1, 2).float() / 255.0
    with torch.no_grad():
        a, b = model(nhwc), model(nchw)
    assert a.shape == (2, 5)
    torch.testing.assert_close(a, b)


def test_unknown_model_and_bad_class_count() -> None:
    with pytest.raises(ValueError, match="unknown model 'vgg'; choose one of resnet18, small-cnn"):
        build_model("vgg", 10)
    with pytest.raises(ValueError, match="num_classes=0"):
        build_model("small-cnn", 0)


def test_resnet18_default_is_the_small_variant() -> None:
    small = sum(p.numel() for p in build_model("resnet18", 12).parameters())
    full = sum(p.numel() for p in build_model("resnet18", 12, width=64, stem_stride=1).parameters())
    assert 2.5e6 < small < 3.0e6 and 11.0e6 < full < 11.4e6  # ResNet-18: 11.2 M at 64 channels


def test_checkpoints_are_pruned_and_latest_wins(tmp_path: Path) -> None:
    for step in (3, 6, 9):
        save_checkpoint(tmp_path, {"step": step, "weights": torch.full((2,), float(step))}, keep=2)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.pt")) == ["ckpt-000000006.pt", "ckpt-000000009.pt"]
    assert not list(tmp_path.glob("*.tmp-*"))
    path = latest_checkpoint(tmp_path)
    assert path is not None and path.endswith("ckpt-000000009.pt")
    assert float(load_checkpoint(path)["weights"][0]) == 9.0
    (tmp_path / "latest.json").unlink()  # the pointer is lost: the highest step is still found
    assert latest_checkpoint(tmp_path).endswith("ckpt-000000009.pt")  # type: ignore[union-attr]
    assert latest_checkpoint(tmp_path / "nothing-here") is None


def test_bad_checkpoint_files_raise_state_error(tmp_path: Path) -> None:
    junk = tmp_path / "ckpt-000000001.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(StateError, match="not a readable headrace checkpoint"):
        load_checkpoint(str(junk))
    other = tmp_path / "other.pt"
    torch.save({"format": "something-else"}, other)
    with pytest.raises(StateError, match="not a headrace training checkpoint"):
        load_checkpoint(str(other))


def test_rng_states_round_trip() -> None:
    import random

    state = capture_rng()
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    restore_rng(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def test_peak_rss_sees_a_short_lived_allocation() -> None:
    release_free_memory()
    before = rss_bytes()
    with PeakRSS() as peak:
        block = np.ones(64 * 2**20, dtype=np.uint8)  # touched: resident
        del block
    assert peak.peak_bytes - before >= 60 * 2**20
    assert rss_bytes() < peak.peak_bytes - 32 * 2**20  # it was freed again, and still counted
