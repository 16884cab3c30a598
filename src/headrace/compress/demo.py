"""``headrace demo --compress``: compress the model the demo just trained, measured on the demo's eval shards.

Writes ``OUTPUT/model.pt`` (the trained fp32 ``state_dict``, so ``headrace compress OUTPUT/model.pt
OUTPUT/data/eval`` can repeat the run) and ``OUTPUT/compress/``: ``report.json``, ``report.png`` and the
int8 / pruned / distilled models. Calibration and evaluation read the eval shards (never the training
shards); fine-tuning and distillation read the training shards, with the demo's memory budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._deps import require
from .model import atomic_write


def compress_demo(model: Any, output: Path, *, image_size: int | tuple[int, int], memory_budget: Any,
                  global_batch_size: int, num_classes: int, seed: int = 0,
                  progress: bool | None = None) -> dict[str, Any]:
    """Run :func:`headrace.compress.run.compress_model` on the demo's model; returns a summary for the JSON
    line: ``{"report": path, "variants": {name: {size_bytes, accuracy, latency_ms_batch32, ...}}}``."""
    torch = require("torch", "headrace demo --compress")

    from ..train.data import image_classification_dataset
    from ..train.models import build_model
    from .run import CompressOptions, compress_model

    atomic_write(output / "model.pt", lambda tmp: torch.save(model.state_dict(), tmp))
    files = {split: sorted(str(p) for p in (output / "data" / split).glob("*.tfrecord")) for split in ("train", "eval")}
    eval_ds = image_classification_dataset(files["eval"], image_size, training=False)
    train_ds = image_classification_dataset(files["train"], image_size, training=True, seed=seed)
    options = CompressOptions(memory_budget=memory_budget, global_batch_size=global_batch_size, seed=seed)
    report = compress_model(model.eval(), eval_dataset=eval_ds, calibration_dataset=eval_ds, train_dataset=train_ds,
                            build_student=lambda name: build_model(name, num_classes),
                            output=output / "compress", options=options, progress=progress)
    keys = ("size_bytes", "parameters", "macs", "accuracy", "latency_ms_batch1", "latency_ms_batch32",
            "speedup_batch32", "size_ratio")
    return {"report": str(output / "compress" / "report.json"),
            "variants": {v["name"]: {k: v.get(k) for k in keys} for v in report["variants"]}}


__all__ = ["compress_demo"]
