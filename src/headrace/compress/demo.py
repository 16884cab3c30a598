"""``headrace demo --compress``: compress the model the demo just trained, measured on the demo's eval shards.

Writes ``OUTPUT/model.pt`` (the trained fp32 ``state_dict``, so ``headrace compress OUTPUT/model.pt
OUTPUT/data/eval`` can repeat the run) and ``OUTPUT/compress/``: ``report.json``, ``report.png`` and the
int8 / pruned / distilled models. Calibration and evaluation read the eval shards (never the training
shards); fine-tuning and distillation read the training shards but the last eighth of them (2 of 16), which
is held out for early stopping (:func:`split_files`), with the demo's memory budget.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ._deps import require
from .model import atomic_write

HELD_OUT = 0.125


def split_files(files: list[str], fraction: float = HELD_OUT) -> tuple[list[str], list[str]]:
    """``(training, held_out)``: the last ``ceil(fraction * len(files))`` shards are held out for early
    stopping (none when there are fewer than 2 shards). Raises ``ValueError`` for ``fraction`` outside [0, 1)."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"fraction={fraction!r}: the share of training shards held out must be in [0, 1)")
    if len(files) < 2 or fraction == 0.0:
        return list(files), []
    k = min(len(files) - 1, max(1, math.ceil(fraction * len(files))))
    return list(files[:-k]), list(files[-k:])


def compress_demo(model: Any, output: Path, *, image_size: int | tuple[int, int], memory_budget: Any,
                  global_batch_size: int, num_classes: int, seed: int = 0, progress: bool | None = None,
                  train_records: int | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run :func:`headrace.compress.run.compress_model` on the demo's model; returns a summary for the JSON
    line: ``{"report": path, "variants": {name: {size_bytes, accuracy, latency_ms_batch32, ...}}}``.
    ``overrides``: :class:`~headrace.compress.run.CompressOptions` fields that replace its defaults (e.g.
    ``{"distill_epochs": 8}``)."""
    torch = require("torch", "headrace demo --compress")

    from ..train.data import image_classification_dataset
    from ..train.models import build_model
    from .run import CompressOptions, compress_model

    atomic_write(output / "model.pt", lambda tmp: torch.save(model.state_dict(), tmp))
    files = {split: sorted(str(p) for p in (output / "data" / split).glob("*.tfrecord")) for split in ("train", "eval")}
    train_files, held_out = split_files(files["train"])
    eval_ds = image_classification_dataset(files["eval"], image_size, training=False)
    train_ds = image_classification_dataset(train_files, image_size, training=True, seed=seed)
    validation = image_classification_dataset(held_out, image_size, training=False) if held_out else None
    options = CompressOptions(memory_budget=memory_budget, global_batch_size=global_batch_size, seed=seed,
                              **(overrides or {}))
    size = train_records * len(train_files) // max(1, len(files["train"])) if train_records else None
    report = compress_model(model.eval(), eval_dataset=eval_ds, calibration_dataset=eval_ds, train_dataset=train_ds,
                            build_student=lambda name: build_model(name, num_classes),
                            output=output / "compress", options=options, progress=progress,
                            validation_dataset=validation, train_size=size)
    return summary(report, output / "compress")


def summary(report: dict[str, Any], directory: Path) -> dict[str, Any]:
    """The demos' JSON-line entry for a compression ``report`` written into ``directory``."""
    keys = ("size_bytes", "parameters", "macs", "accuracy", "accuracy_ci95", "latency_ms_batch1",
            "latency_ms_batch32", "speedup_batch32", "size_ratio")
    return {"report": str(directory / "report.json"),
            "variants": {v["name"]: {k: v.get(k) for k in keys} for v in report["variants"]}}


__all__ = ["compress_demo", "split_files", "summary"]
