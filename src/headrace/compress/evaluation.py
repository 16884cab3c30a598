"""``evaluate``: accuracy, size on disk, parameters, MACs and latency of a model or a compressed model."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..train._deps import import_torch
from ._data import iter_batches
from .measure import batch_of, latency_ms
from .model import CompressedModel
from .report import wilson_interval

torch = import_torch()


def as_compressed(model: Any, example: np.ndarray) -> CompressedModel:
    """``model`` itself if it is a :class:`CompressedModel`, else an fp32 wrapper of the ``nn.Module``."""
    if isinstance(model, CompressedModel):
        return model
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"expected a torch.nn.Module or a CompressedModel, got {type(model).__name__}")
    return CompressedModel.from_module(model, "fp32", example)


def evaluate(model: Any, eval_dataset: Any, *, batch_size: int = 32, threads: int | None = None,
             latency_batch_sizes: tuple[int, ...] = (1, 32), warmup: int = 3, repeats: int = 20,
             max_batches: int | None = None) -> dict[str, Any]:
    """Measure ``model`` on ``eval_dataset``.

    Args:
        model: a ``torch.nn.Module`` (measured as fp32 in eager mode) or a :class:`CompressedModel`.
        eval_dataset: a headrace ``Dataset`` of unbatched ``(inputs, label)`` elements (label: int class), or of
            ``(inputs, labels)`` with one label per output slot (logits ``(N, S, C)``, labels ``(N, S)``; labels
            < 0 are not counted: :mod:`headrace.train.text`).
        batch_size: elements per ``predict`` call for the accuracy pass.
        threads: CPU threads for every measurement (``torch.set_num_threads`` and the ONNX Runtime
            session); default ``torch.get_num_threads()``. Restored afterwards.
        latency_batch_sizes: batch sizes timed; the batches are the first eval elements (cycled).
        warmup, repeats: untimed and timed ``predict`` calls per batch size (for batches over 8 a quarter
            as many timed calls, at least 5).
        max_batches: stop the accuracy pass after this many batches (None: the whole dataset).

    Returns:
        ``accuracy`` (0-1), ``examples`` (labels counted), ``correct``, ``accuracy_ci95`` (``[low, high]``, the
        95% Wilson score interval), ``size_bytes`` (on disk, see :class:`CompressedModel`),
        ``parameters``, ``macs`` (per element), ``threads``, and per batch size ``b``
        ``latency_ms_batch{b}`` (p50, ms per batch), ``latency_ms_batch{b}_p90`` and ``_min`` (best of N), plus
        ``method`` and
        ``backend``.

    Raises:
        ValueError: an empty eval dataset, elements that are not ``(inputs, int label)``, inputs that do not
            match the model (names the batch).
    """
    threads = int(threads or torch.get_num_threads())
    if threads < 1:
        raise ValueError(f"threads={threads} must be >= 1")
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _evaluate(model, eval_dataset, batch_size, threads, latency_batch_sizes, warmup, repeats,
                         max_batches)
    finally:
        torch.set_num_threads(saved_threads)


def _evaluate(model: Any, eval_dataset: Any, batch_size: int, threads: int, sizes: tuple[int, ...],
              warmup: int, repeats: int, max_batches: int | None) -> dict[str, Any]:
    correct = count = 0
    compressed: CompressedModel | None = None
    first: np.ndarray | None = None
    was_training = getattr(model, "training", None)
    try:
        batches = iter_batches(eval_dataset, batch_size, "eval_dataset")
        for index, (x, y) in enumerate(batches):
            if y is None or not np.issubdtype(np.asarray(y).dtype, np.integer):
                batches.close()
                raise ValueError(f"eval_dataset, batch {index}: elements must be (inputs, integer label); the "
                                 f"targets are {None if y is None else np.asarray(y).dtype}")
            if compressed is None:
                compressed = as_compressed(model, x)
                compressed.set_threads(threads)
                first = x
            try:
                out = compressed.predict(x)
            except ValueError:
                batches.close()
                raise
            except Exception as exc:
                batches.close()
                raise ValueError(f"eval_dataset, batch {index}: the model cannot run on inputs {x.dtype} "
                                 f"{tuple(x.shape)}: {type(exc).__name__}: {exc}") from exc
            labels = np.asarray(y)
            labelled = labels >= 0  # per-segment labels mark unused slots < 0 (headrace.train.text)
            correct += int(((out.argmax(axis=-1) == labels) & labelled).sum())
            count += int(labelled.sum())
            if max_batches is not None and index + 1 >= max_batches:
                batches.close()
                break
        if compressed is None or first is None:
            raise ValueError("eval_dataset is empty: it yielded no elements; point it at the evaluation data")
        low, high = wilson_interval(correct, count)
        result: dict[str, Any] = {"method": compressed.method, "backend": compressed.backend,
                                  "accuracy": correct / count, "examples": count, "correct": correct,
                                  "accuracy_ci95": [round(low, 4), round(high, 4)],
                                  "size_bytes": int(compressed.size_bytes),
                                  "parameters": int(compressed.info.get("parameters", 0)),
                                  "macs": int(compressed.info.get("macs", 0)), "threads": threads}
        for b in sizes:
            t = latency_ms(compressed.predict, batch_of(first, b), warmup=warmup,
                           repeats=max(repeats // 4, 5) if b > 8 else repeats)
            result[f"latency_ms_batch{b}"] = round(t["p50"], 3)
            result[f"latency_ms_batch{b}_p90"] = round(t["p90"], 3)
            result[f"latency_ms_batch{b}_min"] = round(t["min"], 3)
        for key in ("sparsity", "compressed_size_bytes"):
            if key in compressed.info:
                result[key] = compressed.info[key]
        return result
    finally:
        if was_training is not None and hasattr(model, "train"):
            model.train(was_training)


__all__ = ["as_compressed", "evaluate"]
