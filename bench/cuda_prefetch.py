"""``headrace.torch.device_prefetch`` on CUDA: how much of the host-to-device copy time hides behind compute.

Batches of 64 uint8 images (224 x 224 x 3, 9.6 MB, numpy as headrace yields them) go to the GPU while a
matmul loop, calibrated to take about as long as one batch's copy, stands for the training step:

- ``naive``: ``torch.from_numpy(x).to("cuda")`` (pageable memory, blocking), then the compute;
- ``prefetch``: ``for x in device_prefetch(batches, "cuda")`` (pinned memory, non-blocking copies on a
  side stream, 2 batches in flight), then the same compute.

Hidden share = ``(naive - prefetch) / copy time``; target >= 50% of the copy time hidden behind compute.

Usage: ``python bench/cuda_prefetch.py [--batches 50]``. Needs a CUDA device (without one it says so and
exits 0). Writes ``bench/results/cuda_prefetch.json``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from headrace._machine import machine_line
from headrace.torch import device_prefetch


def _timed(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main(argv: list[str]) -> int:
    print(machine_line(), flush=True)
    if not torch.cuda.is_available():
        print("cuda_prefetch: no CUDA device here; not run")
        return 0
    n = int(argv[argv.index("--batches") + 1]) if "--batches" in argv else 50
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 255, (64, 224, 224, 3), dtype=np.uint8) for _ in range(n)]
    a = torch.randn(2048, 2048, device="cuda")
    copy_s = _timed(lambda: [torch.from_numpy(x).to("cuda") for x in batches]) / n
    one_matmul = _timed(lambda: [a @ a for _ in range(20)]) / 20
    reps = max(1, round(copy_s / one_matmul))

    def compute(x: torch.Tensor) -> None:
        y = a
        for _ in range(reps):
            y = y @ a
        x.float().mean()

    naive = _timed(lambda: [compute(torch.from_numpy(x).to("cuda")) for x in batches]) / n
    prefetch = _timed(lambda: [compute(x) for x in device_prefetch(iter(batches), "cuda")]) / n
    hidden = (naive - prefetch) / copy_s
    result = {"device": torch.cuda.get_device_name(), "copy_ms": 1e3 * copy_s, "naive_ms": 1e3 * naive,
              "prefetch_ms": 1e3 * prefetch, "hidden_share": hidden}
    print(f"{result['device']}: copy {1e3 * copy_s:.2f} ms/batch, naive step {1e3 * naive:.2f} ms, with "
          f"device_prefetch {1e3 * prefetch:.2f} ms: {100 * hidden:.0f}% of the copy hidden (target >= 50%)")
    out = Path(__file__).with_name("results")
    out.mkdir(exist_ok=True)
    (out / "cuda_prefetch.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0 if hidden >= 0.5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
