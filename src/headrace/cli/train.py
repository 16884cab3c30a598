"""``headrace train PATH``: train a built-in model on TFRecord image shards (see :mod:`headrace.train.data`).

The number of classes and training records are read from the labels first (one fast pass that parses only
``image/class/label``) unless ``num_classes`` is given. SGD with Nesterov momentum 0.9 and a one-cycle
learning-rate schedule; checkpoints and ``metrics.jsonl`` in ``checkpoint_dir``.
"""

from __future__ import annotations

from typing import Any

import typer

from .._memory import parse_bytes
from ..train.data import count_classes, find_tfrecords, image_classification_dataset
from ._app import run


def run_train(path: str, *, model: str, image_size: int, global_batch_size: int, epochs: int,
              precision: str, memory_budget: str | None, checkpoint_dir: str | None, resume: bool,
              micro_batch_size: str, learning_rate: float, eval_path: str | None, num_classes: int | None,
              seed: int = 0, progress: bool | None = None) -> dict[str, Any]:
    """Train and return a summary (``steps``, ``history``, ``samples_per_s``, memory figures).

    Raises:
        FileNotFoundError: no TFRecord files at ``path`` / ``eval_path``.
        ValueError: an empty dataset, an unknown model, bad sizes or precision.
    """
    import torch

    from ..train import fit
    from ..train.models import MODEL_NAMES, build_model

    if model not in MODEL_NAMES:
        raise ValueError(f"unknown model {model!r}; choose one of {', '.join(MODEL_NAMES)}")
    files = find_tfrecords(path)
    eval_files = find_tfrecords(eval_path) if eval_path else None
    if memory_budget is not None:
        parse_bytes(memory_budget)
    micro: int | str = micro_batch_size if micro_batch_size == "auto" else _positive_int(micro_batch_size)
    records, found_classes = count_classes(files)
    classes = num_classes or found_classes
    net = build_model(model, classes)
    steps_per_epoch = records // global_batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"{path}: {records} records are fewer than one global batch ({global_batch_size}); "
                         "use a smaller --global-batch-size")
    torch.manual_seed(seed)
    optimizer = torch.optim.SGD(net.parameters(), lr=learning_rate, momentum=0.9, nesterov=True,
                                weight_decay=5e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=learning_rate,
                                                   total_steps=steps_per_epoch * epochs, pct_start=0.25)
    train_ds = image_classification_dataset(files, image_size, training=True, seed=seed)
    eval_ds = image_classification_dataset(eval_files, image_size, training=False) if eval_files else None
    result = fit(net, train_ds, loss_fn=torch.nn.CrossEntropyLoss(), optimizer=optimizer,
                 global_batch_size=global_batch_size, micro_batch_size=micro, epochs=epochs,
                 precision=precision, memory_budget=memory_budget, checkpoint_dir=checkpoint_dir,
                 resume=resume, eval_dataset=eval_ds, lr_scheduler=schedule, progress=progress)
    return {"steps": result.steps, "epochs": result.epochs, "num_classes": classes, "records": records,
            "micro_batch_size": result.micro_batch_size, "accumulation_steps": result.accumulation_steps,
            "samples_per_s": round(result.samples_per_s, 2), "peak_rss_bytes": result.peak_rss_bytes,
            "base_rss_bytes": result.base_rss_bytes, "memory_budget_bytes": result.memory_budget_bytes,
            "history": result.history, "resumed_from": result.resumed_from}


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"--micro-batch-size {text!r}: use 'auto' or an integer >= 1")
    return value


def command(path: str = typer.Argument(..., help="TFRecord shards of image Examples (image/encoded, "
                                                 "image/class/label): a file, directory or glob."),
            model: str = typer.Option("resnet18", help="resnet18 or small-cnn."),
            image_size: int = typer.Option(96, help="Images are resized to this many pixels square."),
            global_batch_size: int = typer.Option(64, help="Elements per optimizer step, over all ranks."),
            micro_batch_size: str = typer.Option("auto", help="Elements per forward/backward, or auto."),
            epochs: int = typer.Option(1, help="Passes over the data."),
            precision: str = typer.Option("fp32", help="fp32, bf16 or fp16 (CUDA)."),
            memory_budget: str = typer.Option(None, help="Bytes above the starting RSS, e.g. 512MiB."),
            checkpoint_dir: str = typer.Option(None, help="Write checkpoints and metrics.jsonl here."),
            resume: bool = typer.Option(False, help="Continue from the newest checkpoint in --checkpoint-dir."),
            eval_path: str = typer.Option(None, "--eval", help="TFRecord shards evaluated after each epoch."),
            num_classes: int = typer.Option(None, help="Number of classes (default: max label + 1)."),
            lr: float = typer.Option(0.05, help="Peak learning rate (SGD, one-cycle schedule)."),
            seed: int = typer.Option(0, help="Seed of the model initialisation and the shuffles.")) -> None:
    """Train a built-in model (resnet18, small-cnn) on TFRecord image shards inside a memory budget."""
    run(lambda: run_train(path, model=model, image_size=image_size, global_batch_size=global_batch_size,
                          epochs=epochs, precision=precision, memory_budget=memory_budget,
                          checkpoint_dir=checkpoint_dir, resume=resume, micro_batch_size=micro_batch_size,
                          learning_rate=lr, eval_path=eval_path, num_classes=num_classes, seed=seed))
