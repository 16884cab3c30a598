"""Small datasets and models shared by the training tests (imported as ``train_helpers``)."""

from __future__ import annotations

import numpy as np
import torch


def blobs(n: int, seed: int = 0, dim: int = 8, classes: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points in ``classes`` well separated Gaussian blobs: float32 (n, dim) and int64 (n,) labels."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=4.0, size=(classes, dim))
    y = rng.integers(0, classes, size=n)
    x = centers[y] + rng.normal(size=(n, dim))
    return x.astype(np.float32), y.astype(np.int64)


def mlp(dim: int = 8, classes: int = 3, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(dim, 16), torch.nn.Tanh(), torch.nn.Linear(16, classes))
