"""headrace.train.text: the packed-row classifier's per-segment attention, fit on packed text, resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import headrace as hr
from headrace.train import fit
from headrace.train.text import (
    IGNORE,
    PackedTextClassifier,
    segment_attention_mask,
    segment_cross_entropy,
    segment_examples,
)

LENGTH, SLOTS, CLASSES, VOCAB = 32, 8, 3, 40


def _model(seed: int = 0, **kwargs: object) -> PackedTextClassifier:
    torch.manual_seed(seed)
    args = {"d_model": 32, "num_heads": 2, "num_layers": 2} | kwargs
    return PackedTextClassifier(VOCAB, CLASSES, sequence_length=LENGTH, max_segments=SLOTS, **args)  # type: ignore[arg-type]


def _sequence(i: np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Sequence ``i``: 4..15 tokens drawn from its class's own band of ids (class ``i % 3``), labelled per token."""
    rng = np.random.default_rng(int(i))
    label = int(i) % CLASSES
    ids = rng.integers(1 + 13 * label, 14 + 13 * label, size=int(rng.integers(4, 16))).astype(np.int32)
    return ids, np.full(len(ids), label, np.int32)


def _data(n: int, shuffle_seed: int | None = None) -> hr.Dataset:
    ds = hr.Dataset.range(n).map(_sequence)
    ds = ds.pack(LENGTH, num_packing_bins=4).map(segment_examples(SLOTS))
    return ds.shuffle(16, seed=shuffle_seed) if shuffle_seed is not None else ds


def _row(*segments: list[int]) -> torch.Tensor:
    tokens, seg, pos = np.zeros(LENGTH, np.int32), np.zeros(LENGTH, np.int32), np.zeros(LENGTH, np.int32)
    at = 0
    for s, ids in enumerate(segments, 1):
        tokens[at:at + len(ids)], seg[at:at + len(ids)], pos[at:at + len(ids)] = ids, s, np.arange(len(ids))
        at += len(ids)
    return torch.from_numpy(np.stack([tokens, seg, pos]))[None]


def test_the_mask_is_block_diagonal_per_segment() -> None:
    seg = torch.tensor([[1, 1, 2, 2, 2, 0]])
    mask = segment_attention_mask(seg)[0]
    assert mask[0].tolist() == [True, True, False, False, False, False]
    assert mask[3].tolist() == [False, False, True, True, True, False]
    assert mask[5].tolist() == [False] * 5 + [True]  # padding sees only padding: no empty softmax row


def test_a_segments_output_does_not_depend_on_the_other_segments() -> None:
    model = _model().eval()
    first = [5, 6, 7, 8, 9]
    with torch.no_grad():
        alone = model(_row(first))
        beside_a = model(_row(first, [20, 21, 22]))
        beside_b = model(_row(first, [30, 31, 32, 33, 34, 35, 36], [2, 3]))
    torch.testing.assert_close(beside_a[0, 0], alone[0, 0], rtol=0, atol=1e-5)
    torch.testing.assert_close(beside_b[0, 0], alone[0, 0], rtol=0, atol=1e-5)
    torch.testing.assert_close(beside_b[0, 1], model(_row([30, 31, 32, 33, 34, 35, 36]))[0, 0].detach(),
                               rtol=0, atol=1e-5)  # a segment later in its row: positions restart from 0
    assert not torch.allclose(beside_a[0, 1], beside_b[0, 1])  # the second slot does see its own tokens


def test_segment_examples_read_each_segments_label_and_mark_unused_slots() -> None:
    rows, targets = next(iter(_data(30)))
    assert rows.shape == (3, LENGTH) and rows.dtype == np.int32 and targets.shape == (SLOTS,)
    seg, pos = rows[1], rows[2]
    found = int(((pos == 0) & (seg > 0)).sum())
    assert found >= 2 and (targets[found:] == IGNORE).all()
    for s in range(1, found + 1):  # the label is the one its tokens' band says
        assert targets[s - 1] == (int(rows[0][seg == s][0]) - 1) // 13


def test_more_segments_than_slots_is_an_error_naming_both() -> None:
    ds = hr.Dataset.range(20).map(lambda i: (np.ones(2, np.int32), np.zeros(2, np.int32)))
    with pytest.raises(ValueError, match="holds 16 segments, more than max_segments=8"):
        next(iter(ds.pack(LENGTH).map(segment_examples(8))))
    with pytest.raises(ValueError, match="d_model=30 must be a multiple of num_heads=4"):
        _model(d_model=30, num_heads=4)


def test_loss_ignores_unused_slots() -> None:
    logits = torch.zeros(1, 3, CLASSES)
    logits[0, 0, 1] = 5.0
    assert float(segment_cross_entropy(logits, torch.tensor([[1, IGNORE, IGNORE]]))) < 0.02


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_fit_learns_the_toy_task_with_auto_micro_batch(precision: str) -> None:
    model = _model()
    result = fit(model, _data(480, shuffle_seed=0), loss_fn=segment_cross_entropy,
                 optimizer=torch.optim.Adam(model.parameters(), lr=3e-3), global_batch_size=16,
                 micro_batch_size="auto", memory_budget="256MiB", epochs=2, precision=precision,
                 eval_dataset=_data(120), progress=False)
    first, last = result.history[0], result.history[-1]
    assert last["train_loss"] < first["train_loss"] and last["eval_accuracy"] > 0.8  # chance: 1/3
    assert result.micro_batch_choice is not None and result.micro_batch_size >= 1
    assert result.peak_rss_bytes - result.base_rss_bytes <= 256 * 2**20


@pytest.mark.parametrize("stop_at", [9])  # mid-epoch 2: the restore re-packs from the saved position
def test_resume_continues_exactly_where_the_checkpoint_was(tmp_path, stop_at: int) -> None:
    def run(steps: int, resume: bool, ckpt: str | None) -> list[torch.Tensor]:
        model = _model(dropout=0.2)
        fit(model, _data(120, shuffle_seed=3), loss_fn=segment_cross_entropy,
            optimizer=torch.optim.Adam(model.parameters(), lr=1e-3), global_batch_size=8, micro_batch_size=4,
            steps=steps, resume=resume, checkpoint_dir=ckpt, checkpoint_every=100, progress=False)
        return [p.detach().clone() for p in model.parameters()]

    straight = run(12, False, None)  # crosses an epoch boundary (about 7 steps per epoch)
    run(stop_at, False, str(tmp_path))
    resumed = run(12, True, str(tmp_path))
    for a, b in zip(straight, resumed):  # packed rows, optimizer state and dropout RNG all restored
        torch.testing.assert_close(a, b, rtol=0, atol=0)
