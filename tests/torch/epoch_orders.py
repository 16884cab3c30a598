"""Helper of test_torch_epochs.py: the epoch orders a DataLoader over ``to_torch`` yields.

Run as a script (``python epoch_orders.py``) it prints, as JSON, :func:`fresh_orders` for a fresh process,
so a test can check that a seed gives the same sequence of epoch orders run to run (with workers every start
method gives the same orders, so the fresh process runs only the cheap ones: no workers, and fork).
"""

from __future__ import annotations

import json
import sys

import numpy as np
from torch.utils.data import DataLoader

import headrace as hr
from headrace.torch import to_torch

N = 24
EPOCHS = 3
CASES = [(None, False)] + [(ctx, persistent) for ctx in ("fork", "spawn", "forkserver") for persistent in (False, True)]


def pipeline(seed: int) -> hr.Dataset:
    """Lambdas in map and filter, a from_tensor_slices source, shuffle and batch: ``0 .. N-1`` shuffled."""
    return (hr.Dataset.from_tensor_slices(np.arange(N) * 2)
            .map(lambda x: x // 2)
            .filter(lambda x: x >= 0)
            .shuffle(N, seed=seed)
            .batch(4))


def epoch_orders(context: str | None, persistent: bool, seed: int = 7, epochs: int = EPOCHS) -> list[list[int]]:
    """The elements of each of ``epochs`` epochs, in the order the DataLoader yields them.

    ``context=None``: ``num_workers=0``; else 2 workers started with that method.
    """
    kwargs = {} if context is None else {"num_workers": 2, "multiprocessing_context": context,
                                         "persistent_workers": persistent}
    loader = DataLoader(to_torch(pipeline(seed)), batch_size=None, **kwargs)
    return [[int(v) for batch in loader for v in batch] for _ in range(epochs)]


def fresh_orders(seed: int = 7) -> dict[str, list[list[int]]]:
    """``{"main": orders without workers, "workers": orders with 2 forked workers}``."""
    return {"main": epoch_orders(None, False, seed), "workers": epoch_orders("fork", False, seed)}


if __name__ == "__main__":
    json.dump(fresh_orders(int(sys.argv[1]) if len(sys.argv) > 1 else 7), sys.stdout)
