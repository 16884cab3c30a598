"""``headrace compress``: make a trained model smaller (int8, pruning, distillation) and measure each variant
(:mod:`headrace.compress.command` does the work)."""

from __future__ import annotations

from typing import Any

import typer

from ._app import run
from ._flags import IMAGE_SIZE_HELP, choice, fraction, training_image_size


def command(
    ctx: typer.Context,
    checkpoint: str = typer.Argument(..., metavar="CHECKPOINT",
                                     help="Trained model: a headrace checkpoint directory, a ckpt-*.pt file, or a "
                                          "torch.save(model.state_dict()) file."),
    eval_data: str = typer.Argument(..., metavar="EVAL_DATA",
                                    help="Evaluation TFRecord shards (file, directory or glob): accuracy, latency "
                                         "inputs and (by default) int8 calibration."),
    model: str = typer.Option("resnet18", metavar="NAME",
                              help="Architecture: resnet18, small-cnn or package.module:function."),
    num_classes: int = typer.Option(None, metavar="N", help="Classes (default: from the checkpoint's classifier)."),
    image_size: str = typer.Option("96", parser=training_image_size, metavar="SIZE",
                                   help=f"Images are resized to {IMAGE_SIZE_HELP}."),
    quantize: str = typer.Option("static", parser=choice(("static", "dynamic", "none")), metavar="KIND",
                                 help="int8 quantization: static (calibrated), dynamic, or none."),
    backend: str = typer.Option("onnxruntime", parser=choice(("onnxruntime", "torchao")), metavar="NAME",
                                help="Quantization backend: onnxruntime or torchao."),
    prune_macs: str = typer.Option(None, parser=fraction, metavar="FRACTION",
                                   help="Iterative structured pruning to at most this fraction of the MACs, in "
                                        "(0, 1) (default 0.5 unless --prune is given); 0: no pruning."),
    prune_steps: int = typer.Option(2, min=1, max=20, metavar="N",
                                    help="Pruning rounds to the MACs target, each fine-tuned."),
    prune_importance: str = typer.Option("l2", parser=choice(("l2", "l1")), metavar="NORM",
                                         help="Channel-group importance: l2 or l1 norm of the weights."),
    prune_quantize: bool = typer.Option(False, "--prune-quantize",
                                        help="Also quantize the pruned model (a pruned-int8 row)."),
    prune: str = typer.Option(None, parser=fraction, metavar="FRACTION",
                              help="Older one-shot pruning: this fraction of channels (or weights) instead of "
                                   "--prune-macs."),
    prune_method: str = typer.Option("structured", parser=choice(("structured", "unstructured")),
                                     metavar="KIND", help="With --prune: structured (channels) or unstructured "
                                                          "(weights)."),
    finetune_epochs: int = typer.Option(3, min=0, metavar="N",
                                        help="Epochs (at most) of the final fine-tuning after pruning (0: none)."),
    distill_student: str = typer.Option("small-cnn", metavar="NAME",
                                        help="Student: small-cnn or resnet18 (width-scaled to --student-params), "
                                             "package.module:function, or none."),
    student_params: float = typer.Option(0.25, metavar="N",
                                         help="Student size: a fraction of the teacher's parameters (<= 1) or a "
                                              "count."),
    distill_epochs: int = typer.Option(20, min=0, metavar="N", help="Epochs (at most) of distillation."),
    distill_lr: float = typer.Option(None, min=0.0, metavar="LR",
                                     help="Peak learning rate of distillation (cosine schedule)."),
    finetune_lr: float = typer.Option(None, min=0.0, metavar="LR",
                                      help="Peak learning rate of the pruned model's fine-tuning."),
    patience: int = typer.Option(5, min=1, metavar="N",
                                 help="Early stopping: epochs without a better held-out accuracy."),
    hold_out: float = typer.Option(0.125, min=0.0, max=0.9, metavar="FRACTION",
                                   help="Share of the training shards held out for early stopping (0: none)."),
    temperature: float = typer.Option(4.0, metavar="T", help="Distillation temperature T."),
    alpha: float = typer.Option(0.9, metavar="A", help="Weight of the soft (teacher) term of the distillation loss."),
    train_data: str = typer.Option(None, metavar="PATH", help="Training TFRecord shards (fine-tuning, distillation)."),
    calibration_data: str = typer.Option(None, metavar="PATH", help="Calibration shards (default: EVAL_DATA)."),
    num_calibration_batches: int = typer.Option(8, min=1, metavar="N",
                                                help="Calibration batches of --batch-size elements."),
    batch_size: int = typer.Option(32, min=1, metavar="N", help="Elements per batch for calibration and evaluation."),
    global_batch_size: int = typer.Option(64, min=1, metavar="N", help="Elements per optimizer step when training."),
    memory_budget: str = typer.Option(None, metavar="SIZE", help="Training memory budget above the base RSS."),
    threads: int = typer.Option(None, min=1, metavar="N", help="CPU threads for every measurement (default: torch's)."),
    repeats: int = typer.Option(20, min=1, metavar="N",
                                help="Timed calls per latency figure (batch 32: a quarter, at least 5)."),
    output: str = typer.Option("compress_output", metavar="DIR",
                               help="Directory for report.json, report.png and the models."),
    seed: int = typer.Option(0, metavar="N", help="Seed of the student's initialisation and the training shuffles."),
) -> None:
    """Make a trained model smaller (int8, pruning, distillation) and measure each variant."""
    from ..compress.command import run_compress

    def work() -> dict[str, Any]:
        return run_compress(
            checkpoint, eval_data, model=model, num_classes=num_classes, image_size=image_size,  # type: ignore[arg-type]
            train_data=train_data, calibration_data=calibration_data, output=output,
            quantize=None if quantize == "none" else quantize, backend=backend, prune=prune or None,
            prune_macs=(0.5 if prune is None else None) if prune_macs is None else (prune_macs or None),
            prune_steps=prune_steps, prune_importance=prune_importance, prune_quantize=prune_quantize,
            prune_method=prune_method, finetune_epochs=finetune_epochs, hold_out=hold_out,
            distill_student=None if distill_student == "none" else distill_student, distill_epochs=distill_epochs,
            student_params=student_params, patience=patience,
            **{k: v for k, v in (("distill_lr", distill_lr), ("finetune_lr", finetune_lr))  # type: ignore[arg-type]
               if v is not None},
            temperature=temperature, alpha=alpha, num_calibration_batches=num_calibration_batches,
            batch_size=batch_size, global_batch_size=global_batch_size, memory_budget=memory_budget,
            threads=threads, repeats=repeats, seed=seed)

    run(ctx, work)
