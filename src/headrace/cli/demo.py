"""``headrace demo``: real photos -> sharded TFRecords -> a small ResNet trained inside a memory budget
(:mod:`headrace.demo` does the work)."""

from __future__ import annotations

from typing import Any

import typer

from ._app import run


def command(images: int = typer.Option(5000, help="Photos to generate (12 classes)."),
            epochs: int = typer.Option(3, help="Training epochs."),
            image_size: int = typer.Option(96, help="Training resolution in pixels (square)."),
            memory_budget: str = typer.Option("384MiB", help="Memory budget above the process base RSS."),
            output: str = typer.Option("demo_output", help="Directory for the shards, metrics and plot."),
            model: str = typer.Option("resnet18", help="resnet18 or small-cnn."),
            global_batch_size: int = typer.Option(64, help="Elements per optimizer step.")) -> None:
    """Real photos -> sharded TFRecords -> train a small ResNet inside a memory budget; plot and JSON line."""
    from ..demo import DemoConfig, run_demo

    cfg = DemoConfig(images=images, epochs=epochs, image_size=image_size, memory_budget=memory_budget,
                     output=output, model=model, global_batch_size=global_batch_size)

    def work() -> dict[str, Any]:
        from ..train.models import MODEL_NAMES

        if model not in MODEL_NAMES:
            raise ValueError(f"unknown model {model!r}; choose one of {', '.join(MODEL_NAMES)}")
        return run_demo(cfg)  # prints its own JSON line last

    run(work, emit_json=False)
