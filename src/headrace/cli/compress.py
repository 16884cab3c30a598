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
    prune: str = typer.Option("0.5", parser=fraction, metavar="FRACTION",
                               help="Fraction of channels (or weights) to prune, in (0, 1); 0: no pruning."),
    prune_method: str = typer.Option("structured", parser=choice(("structured", "unstructured")),
                                     metavar="KIND", help="structured (channels) or unstructured (weights)."),
    finetune_epochs: int = typer.Option(1, min=0, metavar="N", help="Epochs of fine-tuning after pruning (0: none)."),
    distill_student: str = typer.Option("small-cnn", metavar="NAME",
                                        help="Student architecture to distill into, or none."),
    distill_epochs: int = typer.Option(2, min=0, metavar="N", help="Epochs of distillation."),
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
            checkpoint, eval_data, model=model, num_classes=num_classes, image_size=image_size,
            train_data=train_data, calibration_data=calibration_data, output=output,
            quantize=None if quantize == "none" else quantize, backend=backend, prune=prune or None,
            prune_method=prune_method, finetune_epochs=finetune_epochs,
            distill_student=None if distill_student == "none" else distill_student, distill_epochs=distill_epochs,
            temperature=temperature, alpha=alpha, num_calibration_batches=num_calibration_batches,
            batch_size=batch_size, global_batch_size=global_batch_size, memory_budget=memory_budget,
            threads=threads, repeats=repeats, seed=seed)

    run(ctx, work)
