"""Gradient accumulation: one accumulated step equals one full-batch step; the plan's arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from train_helpers import blobs, mlp

import headrace as hr
from headrace.train import fit
from headrace.train.accumulate import batch_size_of, make_plan, split_batch


def _one_step(micro: int | None, x: np.ndarray, y: np.ndarray) -> list[torch.Tensor]:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    if micro is None:  # reference: a plain full-batch step, no headrace
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
    else:
        fit(model, hr.Dataset.from_tensor_slices((x, y)), loss_fn=torch.nn.CrossEntropyLoss(), optimizer=opt,
            global_batch_size=len(x), micro_batch_size=micro, steps=1, progress=False)
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("micro", [1, 3, 4, 10])
def test_accumulated_step_equals_full_batch_step(micro: int) -> None:
    x, y = blobs(10)
    reference = _one_step(None, x, y)
    got = _one_step(micro, x, y)
    before = [p.detach() for p in mlp().parameters()]
    assert any(not torch.allclose(r, b) for r, b in zip(reference, before))  # the step changed something
    for r, g in zip(reference, got):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6)


def test_plan_sizes_add_up() -> None:
    plan = make_plan(64, 2, 12)
    assert plan.per_rank_batch_size == 32
    assert plan.accumulation_steps == 3
    assert plan.micro_sizes == [11, 11, 10] and sum(plan.micro_sizes) == 32
    assert plan.describe() == "global batch 64 = micro-batch 10-11 x 3 accumulation step(s) x 2 rank(s)"
    assert make_plan(8, 1, 100).micro_sizes == [8]


@pytest.mark.parametrize(("args", "match"), [((10, 3, 2), "not a multiple of the world size 3"),
                                             ((0, 1, 2), "global_batch_size=0"),
                                             ((8, 1, 0), "micro_batch_size=0")])
def test_plan_rejects_bad_sizes(args: tuple[int, int, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_plan(*args)


def test_split_batch_makes_views_of_nested_batches() -> None:
    batch = ({"a": torch.arange(10)}, torch.zeros(10, 2))
    parts = split_batch(batch, [4, 3, 3])
    assert [p[0]["a"].tolist() for p in parts] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert parts[1][0]["a"].data_ptr() == batch[0]["a"].data_ptr() + 4 * 8
    assert batch_size_of(batch) == 10
    with pytest.raises(ValueError, match="one common leading"):
        batch_size_of((torch.zeros(3), torch.zeros(4)))
