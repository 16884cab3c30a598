"""Training with PyTorch on headrace pipelines: :func:`fit` (gradient accumulation, automatic micro-batch
size, mixed precision, DDP, checkpoint/resume, progress and metrics) and the built-in models.

Needs PyTorch (``pip install 'headrace[torch]'``). Submodules: ``fit``, ``accumulate``, ``micro_batch``,
``precision``, ``checkpoint``, ``elastic``, ``progress``, ``memory``, ``models``, ``text`` (a Transformer
classifier of packed text rows), ``loss`` (how ``fit`` calls a loss).
"""

from __future__ import annotations

from .elastic import ElasticDataset
from .fit import FitResult, StepInfo, fit
from .micro_batch import MicroBatchChoice, find_micro_batch_size
from .models import MODEL_NAMES, build_model

__all__ = ["MODEL_NAMES", "ElasticDataset", "FitResult", "MicroBatchChoice", "StepInfo", "build_model",
           "find_micro_batch_size", "fit"]
