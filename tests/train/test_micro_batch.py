"""micro_batch_size="auto": doubling + bisection over candidate sizes, measured by process RSS against a CPU
budget."""

from __future__ import annotations

import math

import pytest
import torch
from train_helpers import Wide

import headrace as hr
from headrace import MemoryBudgetError
from headrace.train import fit
from headrace.train.micro_batch import (
    Trial,
    accumulation_candidates,
    find_micro_batch_size,
    optimizer_state_bytes,
    search_largest,
)
from headrace.train.precision import make_precision

MIB = 1 << 20


@pytest.mark.parametrize("threshold", [1, 2, 3, 5, 16, 17, 37, 64, 100])
def test_search_finds_the_largest_fitting_size(threshold: int) -> None:
    calls: list[int] = []

    def measure(n: int) -> Trial:
        calls.append(n)
        return Trial(n, n <= threshold, n * 1000)

    size, trials = search_largest(measure, cap=64)
    assert size == min(threshold, 64)
    assert [t.size for t in trials] == calls
    assert len(calls) <= 2 * math.ceil(math.log2(64)) + 1  # doubling then bisection, not a linear scan
    assert calls[:3] == [1, 2, 4][:len(calls[:3])]


def test_search_skips_sizes_predicted_to_exceed_the_limit() -> None:
    ran: list[int] = []

    def measure(n: int) -> Trial:
        ran.append(n)
        used = 100 + 10 * n
        return Trial(n, used <= 400, used)

    size, trials = search_largest(measure, cap=1000, limit_bytes=400)
    assert size == 30
    assert max(ran) <= 32  # nothing far above the limit was ever run
    assert any(t.error == "predicted" and not t.fits for t in trials)


def test_search_over_candidates_and_the_power_of_two_step_sizes() -> None:
    assert accumulation_candidates(64) == [1, 2, 4, 8, 16, 32, 64]
    assert accumulation_candidates(61) == [1, 2, 4, 8, 16, 31, 61]  # 61 in 1, 2, 4, ... micro-batches
    ran: list[int] = []

    def measure(n: int) -> Trial:
        ran.append(n)
        return Trial(n, n <= 20, n)

    size, _ = search_largest(measure, cap=64, candidates=accumulation_candidates(64))
    assert size == 16 and ran == [1, 2, 4, 8, 16, 32]  # 20 fits but is no candidate: 16 x 4 is what runs


def test_search_raises_when_one_element_does_not_fit() -> None:
    with pytest.raises(MemoryBudgetError, match="micro-batch size 1 does not fit"):
        search_largest(lambda n: Trial(n, False, 10 * MIB), cap=8)


def _choose(budget_mib: int) -> tuple[int, list[Trial]]:
    torch.manual_seed(0)
    model = Wide()
    sample = (torch.randn(4, 64), torch.tensor([0, 1, 0, 1]))
    choice = find_micro_batch_size(model, sample, torch.nn.functional.cross_entropy,
                                   budget_bytes=budget_mib * MIB, cap=256,
                                   precision=make_precision("fp32", "cpu"))
    return choice.size, choice.trials


def test_auto_size_fits_the_rss_budget_and_the_next_size_does_not() -> None:
    small, trials = _choose(64)
    large, _ = _choose(160)  # 2.5x: a size twice `small` needs about twice its bytes, which sat at 128 MiB
    by_size = {t.size: t for t in trials}
    assert by_size[small].fits and by_size[small].used_bytes <= 64 * MIB
    assert not by_size[2 * small].fits  # the next candidate (twice the size, half the accumulation steps)
    assert [t.size for t in trials] == [1, 2, 4, 8, 16, 32][:len(trials)]  # only power-of-two step counts
    assert 8 <= small <= 16  # ~4 MiB per sample -> about 12 in 64 MiB
    assert large >= 2 * small  # 2.5x the budget (RSS noise of a loaded CI run): at least the next candidate


def test_search_restores_batchnorm_statistics() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    find_micro_batch_size(model, (torch.randn(8, 4) * 5, torch.zeros(8, dtype=torch.int64)),
                          torch.nn.functional.cross_entropy, budget_bytes=256 * MIB, cap=8,
                          precision=make_precision("fp32", "cpu"))
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(p.grad is None for p in model.parameters())


def test_fit_auto_accumulates_to_keep_the_global_batch(capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(64, 64).numpy()
    y = (torch.arange(64) % 2).numpy()
    model = Wide()
    result = fit(model, hr.Dataset.from_tensor_slices((x, y)), loss_fn=torch.nn.CrossEntropyLoss(),
                 optimizer=torch.optim.SGD(model.parameters(), lr=0.1), global_batch_size=64,
                 micro_batch_size="auto", memory_budget="96MiB", steps=1, progress=False)
    assert result.micro_batch_choice is not None
    assert 1 <= result.micro_batch_size < 64
    assert result.accumulation_steps == math.ceil(64 / result.micro_batch_size)
    out = capsys.readouterr().out
    assert "global batch 64 = micro-batch" in out and "auto micro-batch" in out


def test_optimizer_state_estimate() -> None:
    p = torch.nn.Parameter(torch.zeros(1000))
    assert optimizer_state_bytes(torch.optim.Adam([p])) == 8000
    assert optimizer_state_bytes(torch.optim.SGD([p], lr=0.1)) == 0
    assert optimizer_state_bytes(torch.optim.SGD([p], lr=0.1, momentum=0.9)) == 4000
