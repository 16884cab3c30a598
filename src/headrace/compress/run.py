"""One compression run: fp32 baseline, int8, pruned and distilled variants of a model, measured on the same
eval data with the same thread count, written to ``report.json`` / ``report.png`` (used by ``headrace
compress`` and ``headrace demo --compress``).

Output directory: every file is first written into ``OUTPUT/.staging-<pid>/`` and moved into ``OUTPUT``
only when every variant succeeded (``report.json`` last), so a failed run leaves no new file under a
final name (and removes its staging folder).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..train._deps import import_torch
from .report import add_ratios, print_table, write_report

torch = import_torch()

QUANTIZE_CHOICES = ("static", "dynamic")
PRUNE_METHODS = ("structured", "unstructured")
STUDENT_ARCHS = ("small-cnn", "resnet18")
OUTPUT_FILES = ("report.json", "report.png", "int8.onnx", "int8.pt2", "pruned.pt2", "pruned-int8.onnx", "distilled.pt2",
                "distilled-int8.onnx")
OPTIMIZERS = ("sgd", "adamw")


@dataclass(frozen=True)
class CompressOptions:
    """What to build and how to measure it (the ``headrace compress`` options).

    ``prune_macs``: iterative structured pruning to at most this fraction of the MACs (``prune_steps``
    rounds, each fine-tuned; :func:`headrace.compress.pruning.prune_to_macs`); ``prune``: the older one-shot
    pruning of that fraction of channels (or weights, ``prune_method="unstructured"``); at most one of
    the two. ``distill_student``: ``small-cnn`` / ``resnet18`` width-scaled to ``student_params`` (a
    fraction of the teacher's parameters if <= 1, else a count), or any name ``build_student`` knows.
    Fine-tuning and distillation use the knowledge-distillation loss against the fp32 model, a cosine
    schedule and early stopping (``patience`` epochs) on a held-out split of the training data; SGD (Nesterov
    momentum), or AdamW (weight decay 0.01) for the student with ``distill_optimizer="adamw"`` (Transformers).
    ``distill_quantize``: the student quantized too (``distilled-int8``, as ``quantize`` asks).
    """

    quantize: str | None = "static"
    backend: str = "onnxruntime"
    prune: float | None = None
    prune_method: str = "structured"
    prune_macs: float | None = 0.5
    prune_steps: int = 2
    prune_importance: str = "l2"
    prune_quantize: bool = False
    finetune_epochs: int = 3
    finetune_lr: float = 0.01
    distill_student: str | None = "small-cnn"
    student_params: float = 0.25
    distill_epochs: int = 20
    distill_lr: float = 0.02
    distill_optimizer: str = "sgd"
    distill_quantize: bool = False
    temperature: float = 4.0
    alpha: float = 0.9
    patience: int = 5
    teacher_cache_bytes: int = 64 * 2**20
    num_calibration_batches: int = 8
    batch_size: int = 32
    global_batch_size: int = 64
    memory_budget: str | None = None
    threads: int | None = None
    repeats: int = 20
    seed: int = 0

    def validate(self, has_train_data: bool) -> None:
        """Raise ``ValueError`` naming the flag for any bad option, before any work is done."""
        from .pruning import IMPORTANCES

        if self.quantize is not None and self.quantize not in QUANTIZE_CHOICES:
            raise ValueError(f"--quantize {self.quantize!r}: choose static or dynamic (or leave it out)")
        if self.backend not in ("onnxruntime", "torchao"):
            raise ValueError(f"--backend {self.backend!r}: choose onnxruntime or torchao")
        for flag, v in (("--prune", self.prune), ("--prune-macs", self.prune_macs)):
            if v is not None and (isinstance(v, bool) or not 0.0 < float(v) < 1.0):
                raise ValueError(f"{flag} {v}: must be a fraction in (0, 1), e.g. {flag} 0.5")
        if self.prune is not None and self.prune_macs is not None:
            raise ValueError(f"--prune {self.prune} and --prune-macs {self.prune_macs}: choose one (one-shot "
                             "pruning of a channel fraction, or iterative pruning to a MACs target)")
        if self.prune_method not in PRUNE_METHODS:
            raise ValueError(f"--prune-method {self.prune_method!r}: choose structured or unstructured")
        if self.distill_optimizer not in OPTIMIZERS:
            raise ValueError(f"distill_optimizer={self.distill_optimizer!r}: choose {' or '.join(OPTIMIZERS)}")
        if self.prune_importance not in IMPORTANCES:
            raise ValueError(f"--prune-importance {self.prune_importance!r}: choose {' or '.join(IMPORTANCES)}")
        if not 1 <= self.prune_steps <= 20:
            raise ValueError(f"--prune-steps {self.prune_steps} must be in 1..20")
        if not self.student_params > 0:
            raise ValueError(f"--student-params {self.student_params} must be > 0: a fraction of the teacher's "
                             "parameters (e.g. 0.25) or a count (e.g. 500000)")
        for flag, v in (("--distill-lr", self.distill_lr), ("--finetune-lr", self.finetune_lr)):
            if not v > 0:
                raise ValueError(f"{flag} {v} must be > 0 (the peak learning rate of the cosine schedule)")
        for flag, v in (("--finetune-epochs", self.finetune_epochs), ("--distill-epochs", self.distill_epochs)):
            if v < 0:
                raise ValueError(f"{flag} {v} must be >= 0")
        for flag, v in (("--num-calibration-batches", self.num_calibration_batches),
                        ("--batch-size", self.batch_size), ("--global-batch-size", self.global_batch_size),
                        ("--repeats", self.repeats), ("--patience", self.patience)):
            if v < 1:
                raise ValueError(f"{flag} {v} must be >= 1")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"--threads {self.threads} must be >= 1")
        prunes = self.prune is not None or self.prune_macs is not None
        needs_train = (prunes and self.finetune_epochs > 0) or (
            self.distill_student is not None and self.distill_epochs > 0)
        if needs_train and not has_train_data:
            raise ValueError("fine-tuning the pruned model and distillation train on the training data: pass "
                             "--train-data PATH (or --finetune-epochs 0 and --distill-student none)")

    def student_target(self, teacher_parameters: int) -> int:
        """The student's parameter budget: ``student_params`` x the teacher's (<= 1) or the count itself."""
        if self.student_params <= 1:
            return int(self.student_params * teacher_parameters)
        return int(self.student_params)


def _say(text: str) -> None:
    print(text, flush=True)


def _calibration_progress(show: bool) -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        if show:
            sys.stderr.write(f"\rcalibrating: batch {done}/{total}")
            if done == total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif done == total:
            _say(f"calibration: {done} batch(es) read")

    return report


def compress_model(model: Any, *, eval_dataset: Any, calibration_dataset: Any, train_dataset: Any,
                   build_student: Callable[[str], Any], output: str | os.PathLike[str],
                   options: CompressOptions, progress: bool | None = None, validation_dataset: Any = None,
                   train_size: int | None = None, say: Callable[[str], None] = _say) -> dict[str, Any]:
    """Build and measure the variants ``options`` asks for; write the report into ``output``.

    Args:
        model: the trained fp32 ``torch.nn.Module`` (not modified; pruning works on a copy).
        eval_dataset: headrace ``Dataset`` of ``(inputs, int label)``: accuracy and latency inputs (never
            trained or early-stopped on).
        calibration_dataset: headrace ``Dataset`` for int8 calibration (e.g. the eval shards).
        train_dataset: headrace ``Dataset`` of ``(inputs, label)`` for fine-tuning and distillation (or None
            when neither runs).
        build_student: ``name -> nn.Module`` for a ``distill_student`` other than small-cnn / resnet18.
        output: directory for ``report.json``, ``report.png`` and the saved variants.
        progress: progress bars on stderr (default: when stderr is a terminal).
        validation_dataset: held out from the training data, for early stopping (None: no early stopping).
        train_size: elements in ``train_dataset`` (the learning-rate schedule's length), if known.

    Returns:
        the report (module :mod:`headrace.compress.report`).
    """
    from .variants import Variants

    options.validate(train_dataset is not None)
    show = sys.stderr.isatty() if progress is None else bool(progress)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    staging = out / f".staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        built = Variants(model, options, staging=staging, eval_dataset=eval_dataset,
                         calibration_dataset=calibration_dataset, train_dataset=train_dataset,
                         validation_dataset=validation_dataset, train_size=train_size, build_student=build_student,
                         progress=show, calibration_progress=_calibration_progress(show), say=say)
        variants = built.build_all()
        baseline = add_ratios(variants)
        report = write_report(staging, variants, threads=built.threads, options=asdict(options),
                              extra={"speedup_baseline": baseline})
        print_table(variants, report, say)
        _publish(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    say(f"wrote {out / 'report.json'} and {out / 'report.png'}")
    return report


def _publish(staging: Path, out: Path) -> None:
    """Move the staged files into ``out``; ``report.json`` last (its presence means a complete run)."""
    names = sorted(p.name for p in staging.iterdir())
    for name in [n for n in names if n != "report.json"] + ["report.json"]:
        os.replace(staging / name, out / name)


__all__ = ["OPTIMIZERS", "OUTPUT_FILES", "CompressOptions", "compress_model"]
