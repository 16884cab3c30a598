"""Measurements: parameters, multiply-accumulates and latency percentiles.

- Parameters: ``sum(p.numel())`` over ``model.parameters()`` (after ``prune.remove`` zeros still count).
- MACs per element: ``torch.utils.flop_counter.FlopCounterMode`` on a batch of one (FLOPs / 2; convolutions
  and matrix products, the layers that dominate a CNN's cost). Quantization does not change them.
- Latency: ``warmup`` untimed calls, then ``repeats`` timed calls of ``predict`` on the same batch;
  p50 / p90 in milliseconds (``numpy.percentile``, linear interpolation).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..train._deps import import_torch

torch = import_torch()


def count_parameters(model: Any) -> int:
    """Number of parameters (elements) of a ``torch.nn.Module``."""
    return int(sum(p.numel() for p in model.parameters()))


def count_macs(model: Any, example: np.ndarray) -> int:
    """Multiply-accumulates of one forward pass on ``example`` (a batch of one), from PyTorch's FLOP
    counter (FLOPs / 2)."""
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    model.eval()
    try:
        counter = FlopCounterMode(display=False)
        with torch.inference_mode(), counter:
            model(torch.from_numpy(np.ascontiguousarray(example[:1])))
    finally:
        model.train(was_training)
    return int(counter.get_total_flops() // 2)


def latency_ms(predict: Callable[[np.ndarray], Any], batch: np.ndarray, *, warmup: int = 3,
               repeats: int = 20) -> dict[str, float]:
    """``{"p50": ..., "p90": ..., "min": ...}`` milliseconds per ``predict(batch)`` call."""
    for _ in range(warmup):
        predict(batch)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        predict(batch)
        times.append((time.perf_counter() - t0) * 1e3)
    return {"p50": float(np.percentile(times, 50)), "p90": float(np.percentile(times, 90)),
            "min": float(min(times))}


def interleaved_latency(predicts: dict[str, Callable[[np.ndarray], Any]], batch: np.ndarray, *, rounds: int = 5,
                        repeats: int = 4, warmup: int = 2) -> dict[str, dict[str, float]]:
    """Latency of several models on the same ``batch``, measured in alternating rounds so that a change of
    machine load (another process, frequency scaling) hits every model alike: ``warmup`` untimed calls each,
    then ``rounds`` rounds in which every model (in an order rotated by one each round) makes ``repeats``
    timed calls. Returns ``{name: {"p50", "p90", "min", "cpu_p50"}}`` in milliseconds over all its timed calls;
    ``cpu_p50``: the median CPU time of this process per call (``time.process_time``, all its threads), what a
    call costs in CPU whatever share of the cores other processes leave it.

    Raises ``ValueError`` for ``rounds`` or ``repeats`` < 1.
    """
    if rounds < 1 or repeats < 1:
        raise ValueError(f"rounds={rounds}, repeats={repeats}: both must be >= 1")
    names = list(predicts)
    for name in names:
        for _ in range(warmup):
            predicts[name](batch)
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            for _ in range(repeats):
                c0, t0 = time.process_time(), time.perf_counter()
                predicts[name](batch)
                times[name].append((time.perf_counter() - t0) * 1e3)
                cpu[name].append((time.process_time() - c0) * 1e3)
    return {name: {"p50": float(np.percentile(t, 50)), "p90": float(np.percentile(t, 90)), "min": float(min(t)),
                   "cpu_p50": float(np.percentile(cpu[name], 50))} for name, t in times.items()}


def batch_of(examples: np.ndarray, size: int) -> np.ndarray:
    """A batch of ``size`` elements cycling through ``examples`` (real data for latency runs)."""
    idx = np.arange(size) % examples.shape[0]
    return np.ascontiguousarray(examples[idx])


__all__ = ["batch_of", "count_macs", "count_parameters", "interleaved_latency", "latency_ms"]
