"""``headrace train PATH``: train a built-in model on TFRecord image shards (see :mod:`headrace.train.data`).

The path (and ``--eval``) is checked before torch is imported (:func:`headrace.cli._datasets.training_shards`:
Parquet, image folders and compressed shards get the ``headrace convert`` command that makes shards of
them). The number of classes and training records are read from the labels first (one fast pass that
parses only ``image/class/label``); ``--num-classes`` below the largest label + 1 is refused. SGD with
Nesterov momentum 0.9 and a one-cycle learning-rate schedule; checkpoints every ``--checkpoint-every``
steps (and at the end, and on Ctrl-C or SIGTERM, after which it exits with status 130 or 143) and
``metrics.jsonl`` in ``--checkpoint-dir``; ``--resume`` continues from the newest checkpoint there (and
says so, or that there is none yet); a checkpoint of another ``--model`` / ``--num-classes`` or another
schedule is refused in one line naming both and the fix.
"""

from __future__ import annotations

import signal
from typing import Any, Literal

import typer

from ._app import given_flags, run
from ._datasets import training_shards
from ._flags import (
    IMAGE_SIZE_HELP,
    Model,
    check_batch_budget,
    memory_size,
    micro_batch,
    positive,
    training_image_size,
)

DATA_MEMORY_FRACTION = 0.25
"""fit()'s default share of the budget for the data pipeline (headrace.train.fit's data_memory_fraction)."""


def _fitting_model(state: dict[str, Any]) -> tuple[str, int] | None:
    """The built-in model (name, classes) whose ``state_dict`` has ``state``'s keys and shapes, or None."""
    from ..compress.command import infer_num_classes
    from ..train.models import MODEL_NAMES, build_model

    try:
        classes = infer_num_classes(state, "checkpoint")
    except ValueError:
        return None
    for name in MODEL_NAMES:
        if _fits(build_model(name, classes).state_dict(), state):
            return name, classes
    return None


def _fits(expected: dict[str, Any], state: dict[str, Any]) -> bool:
    return expected.keys() == state.keys() and all(tuple(v.shape) == tuple(state[k].shape)
                                                   for k, v in expected.items())


def _check_resume(checkpoint_dir: str, total_steps: int, model: str, net: Any, classes: int) -> None:
    """Refuse, in one line, to resume a checkpoint of another model (``--model``, ``--num-classes``) or
    whose learning-rate schedule was made for another number of steps (another ``--epochs`` or
    ``--global-batch-size``: the one-cycle schedule cannot be stretched). Raises ``ValueError``."""
    from ..train.checkpoint import latest_checkpoint, load_checkpoint

    path = latest_checkpoint(checkpoint_dir)
    if path is None:
        return
    ck = load_checkpoint(path)
    if not _fits(net.state_dict(), ck["model"]):
        found = _fitting_model(ck["model"])
        held = f"a {found[0]} model with {found[1]} classes" if found else "a model other than the built-in ones"
        fix = (f"resume with --model {found[0]}" + (f" --num-classes {found[1]}" if found[1] != classes else "")
               if found else "resume with the model it was trained with")
        raise ValueError(f"--resume: {path} holds {held}, this run asks for --model {model} with {classes} "
                         f"classes; {fix}, or start afresh with another --checkpoint-dir")
    saved = (ck.get("lr_scheduler") or {}).get("total_steps")
    if saved is not None and saved != total_steps:
        raise ValueError(f"--resume: {path} is from a run of {saved} steps (--epochs x records / "
                         f"--global-batch-size), this one would take {total_steps}; resume with that run's "
                         "--epochs and --global-batch-size, or start afresh with another --checkpoint-dir")


def run_train(path: str, *, model: str, image_size: int | tuple[int, int], global_batch_size: int, epochs: int,
              precision: str, memory_budget: int | str | None, checkpoint_dir: str | None, resume: bool,
              micro_batch_size: int | str, learning_rate: float, eval_path: str | None, num_classes: int | None,
              seed: int = 0, checkpoint_every: int = 100, progress: bool | None = None,
              on_corrupt: str = "raise", service: str | None = None) -> dict[str, Any]:
    """Train and return a summary (``steps``, ``history``, ``samples_per_s``, memory figures,
    ``skipped_records``: how many corrupt records ``on_corrupt="skip"`` dropped, also printed with the
    first one's shard and byte offset, and written to ``metrics.jsonl`` as ``{"event": "skipped_records",
    "count", "records": [{"path", "offset", "reason"}, ...]}``, the first 100). ``service``: a Ray address
    (``headrace.service.distribute``): the training data is read, decoded and shuffled on that cluster's
    workers (shares of the shard files, exactly once per epoch) and batched here; its corrupt-record skips are
    the workers' (warned there, not counted here).

    Raises:
        FileNotFoundError: no TFRecord files at ``path`` / ``eval_path``.
        ImportError: ``service`` without ray installed (``pip install 'headrace[ray]'``).
        ValueError: not TFRecord shards, an empty dataset, too few records for one global batch,
            ``num_classes`` below the labels, a budget too small for the data pipeline.
        DataLossError: an undecodable image or corrupt record (``on_corrupt="raise"``), naming the shard
            and byte offset, after a checkpoint of the step reached (with ``checkpoint_dir``).
        TrainingInterrupted: Ctrl-C or SIGTERM (after writing a checkpoint, with ``checkpoint_dir``).
    """
    from .._args import image_hw
    from .._memory import parse_bytes
    from ..distribute import process_info

    remote = None
    if service is not None:  # the address is checked (and ray imported) before the data is read
        from ..service import distribute

        remote = distribute("distributed_epoch", service)
    train_files = training_shards(path, "train")
    eval_files = training_shards(eval_path, "train") if eval_path else None
    budget = parse_bytes(memory_budget) if memory_budget is not None else None
    image_size = image_hw(image_size)
    check_batch_budget(budget, DATA_MEMORY_FRACTION, global_batch_size // process_info().world_size, image_size,
                       "the data pipeline's quarter of it")

    from .._deps import require

    torch = require("torch", "headrace train")

    from ..train import fit
    from ..train.data import CorruptRecords, count_classes, find_tfrecords, image_classification_dataset
    from ..train.models import build_model
    from ..train.schedule import one_cycle

    if len(train_files) == 1 and "://" in train_files[0]:  # remote: listed only now
        train_files = find_tfrecords(train_files[0])
    if eval_files is not None and len(eval_files) == 1 and "://" in eval_files[0]:
        eval_files = find_tfrecords(eval_files[0])
    records, found_classes = count_classes(train_files, on_corrupt=on_corrupt)
    if num_classes is not None and num_classes < found_classes:
        raise ValueError(f"--num-classes {num_classes} is too few: the labels in {path} go up to "
                         f"{found_classes - 1}; use --num-classes {found_classes} or more, or leave it out")
    classes = num_classes or found_classes
    steps_per_epoch = records // global_batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"{path}: {records} records are fewer than one global batch ({global_batch_size}); "
                         "use a smaller --global-batch-size")
    torch.manual_seed(seed)
    net = build_model(model, classes)
    if resume:
        _check_resume(checkpoint_dir, steps_per_epoch * epochs, model, net, classes)  # type: ignore[arg-type]
    optimizer = torch.optim.SGD(net.parameters(), lr=learning_rate, momentum=0.9, nesterov=True,
                                weight_decay=5e-4)
    schedule = one_cycle(optimizer, max_lr=learning_rate, total_steps=steps_per_epoch * epochs)
    corrupt = CorruptRecords()
    train_ds = image_classification_dataset(train_files, image_size, training=True, seed=seed,
                                            on_corrupt=on_corrupt, corrupt=corrupt)
    if remote is not None:
        train_ds = train_ds.apply(remote)
    eval_ds = (image_classification_dataset(eval_files, image_size, training=False, on_corrupt=on_corrupt,
                                            corrupt=corrupt) if eval_files else None)
    result = fit(net, train_ds, loss_fn=torch.nn.CrossEntropyLoss(), optimizer=optimizer,
                 global_batch_size=global_batch_size, micro_batch_size=micro_batch_size, epochs=epochs,
                 precision=precision, memory_budget=memory_budget, checkpoint_dir=checkpoint_dir,
                 checkpoint_every=checkpoint_every, resume=resume, eval_dataset=eval_ds, lr_scheduler=schedule,
                 progress=progress, dataset_size=records, data_memory_fraction=DATA_MEMORY_FRACTION)
    skipped = _report_skipped(corrupt.records(), checkpoint_dir)
    return {"steps": result.steps, "epochs": result.epochs, "num_classes": classes, "records": records,
            "micro_batch_size": result.micro_batch_size, "accumulation_steps": result.accumulation_steps,
            "samples_per_s": round(result.samples_per_s, 2), "peak_rss_bytes": result.peak_rss_bytes,
            "base_rss_bytes": result.base_rss_bytes, "memory_budget_bytes": result.memory_budget_bytes,
            "history": result.history, "resumed_from": result.resumed_from, "skipped_records": skipped}


def _report_skipped(records: list[Any], checkpoint_dir: str | None) -> int:
    """Say how many corrupt records were skipped and the first one's place (rank 0), and write them to
    ``metrics.jsonl`` in ``checkpoint_dir``; returns the count."""
    from ..distribute import process_info

    if not records or not process_info().is_main:
        return len(records)
    first = records[0]
    typer.echo(f"headrace.fit: skipped {len(records)} corrupt record(s); the first: {first.path} at byte offset "
               f"{first.offset} ({first.reason})")
    if checkpoint_dir is not None and "://" not in checkpoint_dir:
        from ..train.progress import MetricsLog

        MetricsLog(f"{checkpoint_dir}/metrics.jsonl").write(
            {"event": "skipped_records", "count": len(records),
             "records": [{"path": r.path, "offset": r.offset, "reason": r.reason} for r in records[:100]]})
    return len(records)


def _interrupted(exc: KeyboardInterrupt) -> str:
    how = "interrupted"
    if getattr(exc, "signum", signal.SIGINT) != signal.SIGINT:
        how += f" ({signal.Signals(exc.signum).name})"  # type: ignore[attr-defined]
    path = getattr(exc, "checkpoint", None)
    if not path:
        return how
    return (f"{how} after step {getattr(exc, 'step', '?')}; checkpoint {path}: run the same command with "
            "--resume to continue from it")


def command(ctx: typer.Context,
            path: str = typer.Argument(..., metavar="PATH", help="TFRecord shards of image Examples (image/encoded, "
                                       "image/class/label): a file, directory or glob; headrace convert output."),
            model: Model = typer.Option("resnet18", help="The model to train."),
            image_size: str = typer.Option("96", parser=training_image_size, metavar="SIZE",
                                           help=f"Resize images to {IMAGE_SIZE_HELP}."),
            global_batch_size: int = typer.Option(64, min=1, metavar="N",
                                                  help="Elements per optimizer step, over all ranks."),
            micro_batch_size: str = typer.Option("auto", parser=micro_batch, metavar="N|auto",
                                                 help="Elements per forward/backward, or auto (the largest that "
                                                      "fits the budget)."),
            epochs: int = typer.Option(1, min=1, metavar="N", help="Passes over the data."),
            precision: Literal["fp32", "bf16", "fp16"] = typer.Option("fp32", help="fp16 needs CUDA."),
            memory_budget: str = typer.Option(None, parser=memory_size, metavar="SIZE",
                                              help="Bytes above the starting RSS, e.g. 512MiB."),
            checkpoint_dir: str = typer.Option(None, metavar="DIR",
                                               help="Write checkpoints and metrics.jsonl here."),
            checkpoint_every: int = typer.Option(100, min=1, metavar="N",
                                                 help="Optimizer steps between checkpoints (one is also written "
                                                      "at the end and on Ctrl-C or SIGTERM)."),
            resume: bool = typer.Option(False, "--resume",
                                        help="Continue from the newest checkpoint in --checkpoint-dir."),
            eval_path: str = typer.Option(None, "--eval", metavar="PATH",
                                          help="TFRecord shards evaluated after each epoch."),
            num_classes: int = typer.Option(None, min=2, metavar="N",
                                            help="Number of classes (default: largest label + 1)."),
            lr: float = typer.Option(None, parser=positive, metavar="RATE",
                                     help="Peak learning rate [default: 0.05 (SGD, one-cycle schedule); 0.003 "
                                          "with --text (AdamW, cosine schedule)]."),
            seed: int = typer.Option(0, metavar="N", help="Seed of the model initialisation and the shuffles."),
            on_corrupt: Literal["raise", "skip"] = typer.Option(
                "raise", help="At an undecodable image or corrupt record: stop (after a checkpoint), or skip it "
                              "(warned, counted at the end and in metrics.jsonl)."),
            service: str = typer.Option(None, "--service", metavar="ADDRESS",
                                        help="Read and decode the training data on the Ray cluster at ADDRESS "
                                             "(local, auto, HOST:PORT or ray://HOST:PORT; needs headrace[ray])."),
            text: bool = typer.Option(False, "--text",
                                      help="PATH is `headrace convert --from text --to text` output (or "
                                           "--to tfrecord) of '<label>\\t<text>' lines: train a tokenizer and a "
                                           "Transformer classifier on packed rows "
                                           "(--model, --image-size and --on-corrupt are the image models' options)."),
            sequence_length: int = typer.Option(128, min=4, metavar="N", help="With --text: tokens per packed row."),
            vocab_size: int = typer.Option(2000, min=260, metavar="N",
                                         help="With --text: the byte-level BPE vocabulary (>= 260)."),
            ) -> None:
    """Train a built-in model (resnet18, small-cnn) on TFRecord image shards inside a memory budget (or, with
    --text, a Transformer on labelled text)."""
    if resume and checkpoint_dir is None:
        raise typer.BadParameter("needs --checkpoint-dir (where the checkpoints are)", param_hint="--resume")
    other_models = ("model", "image_size", "on_corrupt") if text else ("sequence_length", "vocab_size")
    elsewhere = given_flags(ctx, *other_models)
    if elsewhere:  # (an option of the other model's training, never silently ignored)
        raise typer.BadParameter("an option of the image models, not of --text (it trains a Transformer on "
                                 "labelled text: drop it)" if text else "an option of --text training; add --text",
                                 param_hint=", ".join(elsewhere))
    if text:
        if service is not None:
            raise typer.BadParameter("reads image shards on a Ray cluster; --text trains here", param_hint="--service")
        from ._train_text import run_train_text

        run(ctx, lambda: run_train_text(path, eval_path=eval_path, global_batch_size=global_batch_size, epochs=epochs,
                                        precision=precision, memory_budget=memory_budget,
                                        checkpoint_dir=checkpoint_dir, resume=resume,
                                        micro_batch_size=micro_batch_size, learning_rate=lr or 3e-3,
                                        num_classes=num_classes, seed=seed, checkpoint_every=checkpoint_every,
                                        sequence_length=sequence_length, vocab_size=vocab_size),
            extra_flags={"learning_rate": "--lr", "resume": "--resume"}, interrupted=_interrupted)
        return
    lr = lr or 0.05
    run(ctx, lambda: run_train(path, model=model, image_size=image_size,  # type: ignore[arg-type]
                               global_batch_size=global_batch_size, epochs=epochs, precision=precision,
                               memory_budget=memory_budget, checkpoint_dir=checkpoint_dir, resume=resume,
                               micro_batch_size=micro_batch_size, learning_rate=lr, eval_path=eval_path,
                               num_classes=num_classes, seed=seed, checkpoint_every=checkpoint_every,
                               on_corrupt=on_corrupt, service=service),
        extra_flags={"learning_rate": "--lr", "resume": "--resume"}, interrupted=_interrupted)
