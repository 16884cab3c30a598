"""The one-cycle schedule of ``headrace train`` / ``headrace demo`` over any number of steps."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from headrace.train.schedule import one_cycle  # noqa: E402


@pytest.mark.parametrize("total_steps", [1, 2, 3, 4, 5, 7, 8, 40])
def test_one_cycle_runs_every_step_of_a_short_run_and_peaks_at_max_lr(total_steps):
    """4 steps (a 264-record shard at the default global batch of 64) raised ZeroDivisionError at the first
    ``step()``: a quarter of 4 ends the rise at step 0, which OneCycleLR divides by."""
    net = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    schedule = one_cycle(opt, max_lr=0.05, total_steps=total_steps)
    lrs = []
    for _ in range(total_steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.step()
    assert schedule.state_dict()["total_steps"] == total_steps
    assert max(lrs) <= 0.05 + 1e-12 and (lrs[-1] < max(lrs) or total_steps == 1)
    if total_steps >= 4:  # a rise, then a fall
        peak = lrs.index(max(lrs))
        assert 0 < peak < total_steps - 1 and max(lrs) > 0.8 * 0.05 and lrs[0] < 0.1 * 0.05, lrs


def test_one_cycle_refuses_zero_steps():
    opt = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.05)
    with pytest.raises(ValueError, match="total_steps=0"):
        one_cycle(opt, max_lr=0.05, total_steps=0)
