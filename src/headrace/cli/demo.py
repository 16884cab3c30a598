"""``headrace demo``: real photos -> sharded TFRecords -> a small ResNet trained inside a memory budget
(:mod:`headrace.demo` does the work); ``--text``: the standard library's sources -> a tokenizer, packed rows -> a
small Transformer (:mod:`headrace.text_demo`)."""

from __future__ import annotations

from typing import Any

import typer

from .._memory import parse_bytes
from ..demo import MIN_IMAGE_SIDE
from ._app import run
from ._flags import IMAGE_SIZE_HELP, Model, check_batch_budget, memory_size, training_image_size


def _demo_image_size(text: str) -> tuple[int, int]:
    return training_image_size(text, minimum=MIN_IMAGE_SIDE)


def command(ctx: typer.Context,
            images: int = typer.Option(None, min=1, metavar="N",
                                       help="Photos to generate [default: 5000; 2000 with --compress, 300 of "
                                            "them held out, and a quick compression budget]."),
            epochs: int = typer.Option(None, min=1, metavar="N", help="Training epochs [default: 3]."),
            image_size: str = typer.Option("96", parser=_demo_image_size, metavar="SIZE",
                                           help=f"Training resolution: {IMAGE_SIZE_HELP}, at least "
                                                f"{MIN_IMAGE_SIDE} pixels a side."),
            memory_budget: str = typer.Option(None, parser=memory_size, metavar="SIZE",
                                              help="Memory budget above the process base RSS [default: 384MiB; "
                                                   "256MiB with --text]."),
            output: str = typer.Option(None, metavar="DIR",
                                       help="Directory for the shards, metrics and plot [default: demo_output; "
                                            "demo_text_output with --text]."),
            model: Model = typer.Option("resnet18", help="The model to train."),
            global_batch_size: int = typer.Option(None, min=1, metavar="N",
                                                  help="Elements per optimizer step [default: 64; 32 with "
                                                       "--compress without --images]."),
            compress: bool = typer.Option(False, "--compress",
                                          help="Then compress the trained model (int8, pruned, distilled) "
                                               "into OUTPUT/compress/report.json."),
            regions: int = typer.Option(None, metavar="R",
                                        help="Regions per photograph, 1, 2, 4, 6 or 9: the task has 12 x R "
                                             "classes (1: which photograph, the default; 2: which half of "
                                             "which photograph, 24 classes, the default with --compress)."),
            text: bool = typer.Option(False, "--text",
                                      help="Train on text instead: windows of the Python standard library's "
                                           "sources, which package each comes from (8 classes)."),
            windows: int = typer.Option(None, min=100, metavar="N",
                                        help="With --text: windows per package [default: 400]."),
            ) -> None:
    """Real photos (or, with --text, real text) -> shards -> train inside a memory budget; plot and JSON line."""
    if text:
        _text_demo(ctx, windows=windows, epochs=epochs, memory_budget=memory_budget, output=output,
                   global_batch_size=global_batch_size, compress=compress,
                   image_only={"--images": images, "--regions": regions})
        return
    if windows is not None:
        raise typer.BadParameter("an option of the text demo; add --text", param_hint="--windows")
    memory_budget = memory_budget or "384MiB"
    output = output or "demo_output"
    from ..demo import demo_config, run_demo

    cfg, chosen = demo_config(images=images, epochs=epochs, compress=compress, image_size=image_size,
                              memory_budget=memory_budget, output=output, model=model,
                              global_batch_size=global_batch_size, regions=regions)

    def work() -> dict[str, Any]:
        check_batch_budget(parse_bytes(memory_budget), 0.25, cfg.global_batch_size, image_size,
                           "the data pipeline's quarter of it")
        if chosen:
            print(chosen, flush=True)
        return run_demo(cfg)  # prints its own JSON line last

    run(ctx, work, emit_json=False)


def _text_demo(ctx: typer.Context, *, image_only: dict[str, Any], compress: bool, **given: Any) -> None:
    from ..text_demo import TextDemoConfig, run_text_demo

    for flag, value in image_only.items():
        if value is not None:
            raise typer.BadParameter("an option of the image demo, not of --text (the text demo takes --windows)",
                                     param_hint=flag)
    names = {"windows": "windows_per_class"}
    cfg = TextDemoConfig(compress=compress, **{names.get(k, k): v for k, v in given.items() if v is not None})
    run(ctx, lambda: run_text_demo(cfg), emit_json=False)
