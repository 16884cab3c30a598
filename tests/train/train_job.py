"""A tiny training job run as a subprocess by the SIGKILL-resume and DDP tests (not collected by pytest).

``python train_job.py OUT_DIR [--resume] [--sleep S] [--micro M] [--steps K]``: trains an MLP on elements
``(features, (label, element_id))`` of ``Dataset.range(N)`` (shuffled, ``N`` from ``$JOB_N``, default 96)
for one epoch (or until optimizer step ``K``)
with checkpoints every 3 steps in ``OUT_DIR/ckpt``, and appends ``"<step> <id> <id> ..."`` per step to
``OUT_DIR/ids-rank<R>.txt`` (flushed and fsynced before the next step). At the end it writes the final
parameters' sum to ``OUT_DIR/params-rank<R>.txt``.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch

import headrace as hr
from headrace.distribute import rank
from headrace.train import StepInfo, fit


def element(i: np.int64) -> tuple[np.ndarray, tuple[np.int64, np.int64]]:
    x = np.full((4,), float(i) / 100.0, np.float32)
    return x, (np.int64(i % 2), i)


def main(argv: list[str]) -> None:
    out = argv[0]
    resume = "--resume" in argv
    sleep_s = float(argv[argv.index("--sleep") + 1]) if "--sleep" in argv else 0.0
    micro = int(argv[argv.index("--micro") + 1]) if "--micro" in argv else 2
    steps = int(argv[argv.index("--steps") + 1]) if "--steps" in argv else None
    n = int(os.environ.get("JOB_N", "96"))
    r = rank()
    ids_path = os.path.join(out, f"ids-rank{r}.txt")
    log = open(ids_path, "a", encoding="utf-8")  # noqa: SIM115 - closed at the end of main

    def record(info: StepInfo) -> None:
        ids = info.batch[1][1].tolist()
        log.write(f"{info.step} " + " ".join(str(i) for i in ids) + "\n")
        log.flush()
        os.fsync(log.fileno())
        time.sleep(sleep_s)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    ds = hr.Dataset.range(n).map(element).shuffle(16, seed=7)
    fit(model, ds, loss_fn=lambda out, target: torch.nn.functional.cross_entropy(out, target[0]),
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1), global_batch_size=4, micro_batch_size=micro,
        epochs=1, steps=steps, checkpoint_dir=os.path.join(out, "ckpt"), checkpoint_every=3, resume=resume,
        callbacks=[record], progress=False)
    log.close()
    total = sum(float(p.detach().double().sum()) for p in model.parameters())
    with open(os.path.join(out, f"params-rank{r}.txt"), "w", encoding="utf-8") as f:
        f.write(repr(total))


if __name__ == "__main__":
    main(sys.argv[1:])
