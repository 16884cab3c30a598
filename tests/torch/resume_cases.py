"""Helper of test_stateful_dataloader.py and test_lightning.py: pipelines whose elements are their ids (0 .. N-1,
shuffled per epoch), the loaders the tests put them in, and (run as a script) the resumed half of a Lightning run
in a fresh process.

Importable by DataLoader workers started with spawn (the tests' directory is on their ``sys.path``).

Script: ``python resume_cases.py CASES_JSON`` where CASES_JSON is a list of ``{"loader", "ckpt", "exactly_once"}``;
prints, as JSON, the ids each resumed ``fit(ckpt_path=...)`` trained on, in order.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

import headrace as hr
from headrace.torch import to_torch

N = 24  # elements per epoch
BATCH = 4  # 6 batches per epoch
EPOCHS = 2
SEED = 11


def pipeline(sized: bool = True) -> hr.Dataset:
    """``0 .. N-1`` shuffled anew each epoch, in batches of ``BATCH``; ``sized=False`` adds a filter that keeps
    everything, so the cardinality (and ``len()``) is unknown, as for most real pipelines."""
    ds = hr.Dataset.range(N).shuffle(N, seed=SEED)
    if not sized:
        ds = ds.filter(lambda x: x >= 0)
    return ds.batch(BATCH)


def stateful_loader(workers: int = 0, context: str | None = None, sized: bool = True, **kwargs: Any) -> Any:
    """``StatefulDataLoader(to_torch(pipeline(sized)), batch_size=None)``, with ``workers`` workers started by
    ``context``."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    if workers:
        kwargs.update(num_workers=workers, multiprocessing_context=context)
    return StatefulDataLoader(to_torch(pipeline(sized)), batch_size=None, **kwargs)


def make_loader(kind: str) -> Any:
    """The train dataloader a Lightning case uses: ``stateful`` (no workers), ``stateful-workers`` (2 forked
    workers), ``plain`` (``torch.utils.data.DataLoader``, no workers), ``direct`` (``to_torch(ds)`` itself),
    each over the unsized pipeline (Lightning prefetches); ``stateful-sized``: over the sized one (it does not).
    A ``-reload`` suffix: the same, and :func:`fit` makes Lightning ask for new dataloaders every epoch."""
    from torch.utils.data import DataLoader

    kind = kind.removesuffix("-reload")
    if kind == "stateful":
        return stateful_loader(sized=False)
    if kind == "stateful-workers":
        return stateful_loader(2, "fork", sized=False)
    if kind == "stateful-sized":
        return stateful_loader(sized=True)
    if kind == "plain":
        return DataLoader(to_torch(pipeline(sized=False)), batch_size=None)
    if kind == "direct":
        return to_torch(pipeline(sized=False))
    raise ValueError(f"make_loader({kind!r}): unknown kind")


def ids(batches: Any) -> list[int]:
    return [int(v) for batch in batches for v in np.asarray(batch).ravel()]


def fit(kind: str, ckpt_dir: str, *, stop_at: int | None = None, ckpt_path: str | None = None,
        exactly_once: bool = True) -> list[int]:
    """Train a tiny model on ``make_loader(kind)`` for ``EPOCHS`` epochs (or ``stop_at`` steps, checkpointing
    at that step into ``ckpt_dir``); the ids its ``training_step`` saw, in order."""
    import lightning.pytorch as pl
    import torch

    from headrace.lightning import ExactlyOnce

    seen: list[int] = []

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            seen.extend(int(v) for v in batch)
            return self.layer(batch.float().unsqueeze(1)).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def train_dataloader(self) -> Any:
            return make_loader(kind)

    callbacks: list[Any] = [ExactlyOnce()] if exactly_once else []
    if stop_at is not None:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=stop_at,
                                                      save_top_k=-1, filename="mid"))
    trainer = pl.Trainer(accelerator="cpu", max_epochs=EPOCHS, max_steps=stop_at or -1, callbacks=callbacks,
                         enable_progress_bar=False, logger=False, enable_model_summary=False,
                         enable_checkpointing=stop_at is not None, num_sanity_val_steps=0,
                         reload_dataloaders_every_n_epochs=int(kind.endswith("-reload")))
    trainer.fit(Tiny(), ckpt_path=ckpt_path)
    return seen


if __name__ == "__main__":
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    results = [fit(c["loader"], c["dir"], ckpt_path=c["ckpt"], exactly_once=c["exactly_once"])
               for c in json.loads(sys.argv[1])]
    print("RESULT " + json.dumps(results))
