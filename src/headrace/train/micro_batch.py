"""``micro_batch_size="auto"``: the largest micro-batch whose forward + backward fits the memory budget.

Candidates: the micro-batch sizes a per-rank batch of ``B`` elements splits into with a power-of-two
number of accumulation steps, ``ceil(B / 2**j)`` (64: 64, 32, 16, 8, 4, 2, 1). The chosen size is then
exactly what runs (``B`` in ``2**j`` micro-batches of equal size, or sizes differing by one), and the
choice is stable from run to run: neighbouring candidates are 2x apart, so the few percent by which RSS
measurements vary between runs do not move it (a search down to single sizes chose 9, 12 or 20 for the
same demo run). This is the "power" mode of PyTorch Lightning's batch-size finder, on accumulation steps.

Search: try the candidates from the smallest up (doubling) until one does not fit or the largest (the
per-rank batch) fits. One unmeasured warm-up pass runs first, so one-time allocations (kernel caches,
thread pools) are not counted as the first size's. Each trial runs a real forward + backward pass of the
model on a micro-batch built from real data (the first batch, repeated), under the run's precision, and
restores the model's buffers (BatchNorm statistics) afterwards.

What "fits" means:

- CPU: ``peak RSS during the trial - base_rss_bytes + reserve_bytes <= budget_bytes``, RSS measured with
  :class:`~headrace.train.memory.PeakRSS`; a ``MemoryError`` also means "does not fit".
- CUDA: ``torch.cuda.max_memory_allocated()`` during the trial minus what was allocated before it (the
  model), ``+ reserve_bytes <= budget_bytes``; a ``torch.cuda.OutOfMemoryError`` also means "does not
  fit". ``fit`` sets ``budget_bytes`` to 90% of :func:`headrace.train.gpu.available_gpu_bytes` (free
  memory, within a per-process memory fraction).

``reserve_bytes`` is memory the trial does not allocate but training will: the optimizer's state and the
data pipeline's buffers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._errors import MemoryBudgetError
from .._memory import format_bytes
from .._structure import flatten, pack_as
from ._deps import import_torch
from .loss import LossFn, compute_loss
from .memory import PeakRSS, release_free_memory, rss_bytes
from .precision import Precision

torch = import_torch()


@dataclass(frozen=True)
class Trial:
    """One measured micro-batch size: ``used_bytes`` counted against the budget, and whether it fit."""

    size: int
    fits: bool
    used_bytes: int | None = None
    error: str | None = None


@dataclass
class MicroBatchChoice:
    """The result of the search: the chosen ``size`` and every trial, in the order run."""

    size: int
    budget_bytes: int
    cap: int
    trials: list[Trial] = field(default_factory=list)

    def describe(self) -> str:
        tried = ", ".join(f"{t.size}{'' if t.fits else ('~x' if t.error == 'predicted' else 'x')}"
                          for t in self.trials)
        used = next((t.used_bytes for t in self.trials if t.size == self.size), None)
        used_s = format_bytes(used) if used is not None else "?"
        return (f"largest fitting micro-batch {self.size} (uses {used_s} of {format_bytes(self.budget_bytes)}; "
                f"tried {tried}; x = did not fit, ~x = predicted not to fit)")


def _predict(trials: list[Trial], n: int) -> float | None:
    """Linear extrapolation of ``used_bytes`` to size ``n`` from the two largest sizes that fit."""
    fit = sorted(((t.size, t.used_bytes) for t in trials if t.fits and t.used_bytes is not None),
                 key=lambda size_used: size_used[0])[-2:]  # (stable: the later of equal sizes last)
    if len(fit) < 2 or fit[1][0] == fit[0][0]:
        return None
    (size0, used0), (size1, used1) = fit
    slope = (used1 - used0) / (size1 - size0)
    return used1 + max(slope, 0.0) * (n - size1)


def accumulation_candidates(per_rank_batch: int) -> list[int]:
    """Micro-batch sizes with a power-of-two number of accumulation steps: ``ceil(B / 2**j)``, ascending."""
    return sorted({-(-per_rank_batch // 2**j) for j in range(per_rank_batch.bit_length() + 1)})


def search_largest(measure: Callable[[int], Trial], cap: int, limit_bytes: int | None = None,
                   start: int = 1, candidates: list[int] | None = None) -> tuple[int, list[Trial]]:
    """The largest ``n`` in ``[start, cap]`` (and among ``candidates``, default every size) with
    ``measure(n).fits``, by doubling then bisection over the candidates.

    Assumes fitting is monotone (if ``n`` fits, every smaller size fits). With ``limit_bytes``, a size
    whose usage, extrapolated linearly from the two largest sizes that fit, exceeds the limit is counted
    as not fitting without running it (recorded with ``error="predicted"``), so the search itself rarely
    goes over the budget. Returns ``(n, trials)``.

    Raises:
        MemoryBudgetError: even ``n = start`` does not fit.
    """
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ValueError(f"cap={cap!r} must be an int >= 1")
    start = max(1, min(start, cap))
    sizes = sorted({n for n in (candidates or range(start, cap + 1)) if start <= n <= cap}) or [start]
    start = sizes[0]
    trials: list[Trial] = []

    def fits(n: int) -> bool:
        predicted = _predict(trials, n) if limit_bytes is not None else None
        if predicted is not None and limit_bytes is not None and predicted > limit_bytes:
            t = Trial(n, False, int(predicted), "predicted")
        else:
            t = measure(n)
        trials.append(t)
        return t.fits

    good, bad = -1, len(sizes)  # indices into sizes
    i = 0
    while True:
        if fits(sizes[i]):
            good = i
            if i == len(sizes) - 1:
                return sizes[good], trials
            i = max(i + 1, max(j for j, n in enumerate(sizes) if n <= 2 * sizes[i]))  # doubling
        else:
            bad = i
            break
    if good < 0:
        detail = trials[0].error or (f"uses {format_bytes(trials[0].used_bytes)}"
                                     if trials[0].used_bytes is not None else "")
        raise MemoryBudgetError(f"micro-batch size {start} does not fit the memory budget ({detail}); raise "
                                "memory_budget, use a smaller model or image size, or precision='bf16'")
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(sizes[mid]):
            good = mid
        else:
            bad = mid
    return sizes[good], trials


def _repeat_batch(sample: Any, n: int) -> Any:
    leaves = flatten(sample)
    first = next(leaf for leaf in leaves if isinstance(leaf, torch.Tensor) and leaf.ndim >= 1)
    idx = torch.arange(n, device=first.device) % first.shape[0]
    return pack_as(sample, [leaf.index_select(0, idx) if isinstance(leaf, torch.Tensor) and leaf.ndim >= 1
                            else leaf for leaf in leaves])


def find_micro_batch_size(model: Any, sample: tuple[Any, Any], loss_fn: LossFn, *,
                          budget_bytes: int, cap: int, precision: Precision,
                          base_rss_bytes: int | None = None, reserve_bytes: int = 0,
                          device: Any = "cpu", candidates: list[int] | None = None) -> MicroBatchChoice:
    """Search the largest micro-batch for ``model`` (see the module docstring; from 2 with BatchNorm).

    Args:
        model: the model (its parameters on ``device``; the DDP wrapper is not needed).
        sample: one batch ``(inputs, targets)`` of tensors on ``device`` with >= 1 element; trial batches
            repeat its elements.
        loss_fn: ``loss_fn(model(inputs), targets)`` -> scalar tensor.
        budget_bytes: bytes the training step may use (CPU: above ``base_rss_bytes``).
        cap: the largest size worth trying (the per-rank batch).
        precision: the run's precision (trials run under its autocast).
        base_rss_bytes: CPU only: the RSS that does not count against the budget (default: RSS now).
        reserve_bytes: bytes training needs beyond one forward + backward (optimizer state, data buffers).
        candidates: the sizes to choose from (default :func:`accumulation_candidates` of ``cap``; pass
            ``range(1, cap + 1)`` to search every size).

    Raises:
        MemoryBudgetError: a micro-batch of 1 does not fit.
    """
    device = torch.device(device)
    base = rss_bytes() if base_rss_bytes is None else base_rss_bytes
    saved_buffers = [(b, b.detach().clone()) for b in model.buffers()]
    was_training = model.training
    model.train()

    def step(n: int) -> None:
        inputs, targets = _repeat_batch(sample, n)
        with precision.autocast():
            loss = compute_loss(loss_fn, model(inputs), targets, inputs)
        loss.backward()

    def measure(n: int) -> Trial:
        model.zero_grad(set_to_none=True)
        try:
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
                before = int(torch.cuda.memory_allocated(device))  # the model: not part of the budget
                step(n)
                used = int(torch.cuda.max_memory_allocated(device)) - before + reserve_bytes
            else:
                release_free_memory()
                with PeakRSS() as peak:
                    step(n)
                used = peak.peak_bytes - base + reserve_bytes
        except (MemoryError, torch.cuda.OutOfMemoryError) as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else ""
            return Trial(n, False, None, f"{type(exc).__name__}: {first_line}")
        finally:
            model.zero_grad(set_to_none=True)
        return Trial(n, used <= budget_bytes, used)

    try:
        # BatchNorm cannot train on one element: start at 2 for models that have it.
        has_bn = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
        sizes = list(candidates) if candidates is not None else accumulation_candidates(cap)
        start = min((n for n in sizes if n >= (2 if has_bn else 1)), default=cap)
        try:  # warm-up, not measured: one-time allocations are not the first size's
            step(start)
        except (MemoryError, torch.cuda.OutOfMemoryError):
            pass  # the measured trial will say so
        finally:
            model.zero_grad(set_to_none=True)
        size, trials = search_largest(measure, cap, budget_bytes, start=start, candidates=sizes)
    finally:
        with torch.no_grad():
            for live, saved in saved_buffers:
                live.copy_(saved)
        model.train(was_training)
        release_free_memory()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return MicroBatchChoice(size, budget_bytes, cap, trials)


_STATE_TENSORS_PER_PARAM = {"Adam": 2, "AdamW": 2, "NAdam": 2, "RAdam": 2, "Adamax": 2, "Adadelta": 2,
                            "SGD": 1, "RMSprop": 2, "Adagrad": 1, "Rprop": 2, "ASGD": 2, "LBFGS": 2}


def optimizer_state_bytes(optimizer: Any) -> int:
    """Bytes the optimizer's state takes (measured if it has state, else estimated from its type).

    The estimate counts, per parameter, the state tensors of the same size that the torch optimizer
    keeps (Adam: 2, SGD with momentum: 1, unknown types: 2, to be safe).
    """
    measured = sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values()
                   if isinstance(v, torch.Tensor))
    if measured:
        return int(measured)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    per_param = _STATE_TENSORS_PER_PARAM.get(type(optimizer).__name__, 2)
    if type(optimizer).__name__ == "SGD" and not any(g.get("momentum") for g in optimizer.param_groups):
        per_param = 0
    return per_param * sum(p.numel() * p.element_size() for p in params)


__all__ = ["MicroBatchChoice", "Trial", "accumulation_candidates", "find_micro_batch_size", "optimizer_state_bytes",
           "search_largest"]
