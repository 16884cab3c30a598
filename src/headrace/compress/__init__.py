"""Making trained models smaller: int8 quantization, pruning and knowledge distillation, each measured.

- :func:`quantize`: int8 post-training quantization (static, calibrated on a headrace ``Dataset``; or
  dynamic), run by ONNX Runtime (default) or torchao's PT2E flow + TorchInductor.
- :func:`prune_to_macs`: iterative structured pruning (torch-pruning DepGraph, group-norm importance) to a
  MACs target, fine-tuned between rounds; :func:`prune`: one-shot structured channel pruning, optionally
  fine-tuned with :func:`headrace.train.fit`, or unstructured global magnitude pruning.
- :func:`distill`: knowledge distillation (Hinton et al. 2015) as a loss on top of :func:`headrace.train.fit`,
  with a cosine schedule and early stopping on a held-out split; :func:`student_for_params` sizes the student.
- :func:`evaluate`: accuracy, size on disk, parameters, MACs and latency percentiles.
- :class:`CompressedModel` (``predict``, ``save``, ``size_bytes``) and :func:`load`.

Needs ``pip install 'headrace[compress]'`` (onnxruntime, onnx, onnxscript, torch-pruning, torchao).
The names are imported on first use, so ``headrace.compress.command`` loads without PyTorch.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"CompressedModel": "model", "load": "model", "ExportError": "_export", "DistillationLoss": "distillation",
          "distill": "distillation", "kd_loss": "distillation", "evaluate": "evaluation", "prune": "pruning",
          "prune_to_macs": "pruning", "quantize": "quantization", "student_for_params": "distillation"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CompressedModel", "DistillationLoss", "ExportError", "distill", "evaluate", "kd_loss", "load", "prune",
           "prune_to_macs", "quantize", "student_for_params"]
