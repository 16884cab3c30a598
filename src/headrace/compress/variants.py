"""Building and measuring the variants of one compression run (:func:`headrace.compress.run.compress_model`).

Rows, in order (each with ``precision`` ``"fp32"`` / ``"int8"`` and ``runtime`` ``"torch"`` /
``"onnxruntime"`` / ``"torchao"``):

- ``fp32-torch``: the trained model in PyTorch eager mode.
- ``fp32-onnxruntime``: the same model exported to ONNX (the graph the int8 route quantizes), run by ONNX
  Runtime in fp32 with the same thread count: with ``fp32-torch``, the candidates for the speed-up baseline
  (the fastest of them, :func:`headrace.compress.report.speedup_baseline`).
- ``int8``: post-training static (or dynamic) quantization.
- ``pruned``: iterative structured pruning to a MACs target with fine-tuning between rounds (or the older
  one-shot pruning); ``pruned-int8``: that model quantized too (``prune_quantize``).
- ``distilled``: a width-scaled student trained with the knowledge-distillation loss; ``distilled-int8``: that
  student quantized too (``distill_quantize``).

Fine-tuning the pruned model and distillation both use the distillation loss against the fp32 model
(one teacher-logit cache for both), a cosine schedule and early stopping on ``validation_dataset``.
Accuracy is measured variant by variant; latencies at batch 1 and 32 at the end, all variants in alternating
rounds (:func:`headrace.compress.measure.interleaved_latency`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..train._deps import import_torch
from ._data import first_inputs
from .evaluation import as_compressed, evaluate
from .measure import batch_of, interleaved_latency

torch = import_torch()

LATENCY_ROUNDS = 5


class Variants:
    """The state of one run: the options, the data and the variants built so far (``rows`` and the
    models that ran them, by name)."""

    def __init__(self, model: Any, options: Any, *, staging: Path, eval_dataset: Any, calibration_dataset: Any,
                 train_dataset: Any, validation_dataset: Any, train_size: int | None,
                 build_student: Callable[[str], Any], progress: bool, calibration_progress: Any,
                 say: Callable[[str], None]) -> None:
        from .distillation import DistillationLoss

        self.model, self.options, self.staging = model, options, staging
        self.eval_dataset, self.calibration_dataset = eval_dataset, calibration_dataset
        self.train_dataset, self.validation_dataset, self.train_size = train_dataset, validation_dataset, train_size
        self.build_student, self.say, self.calibration_progress = build_student, say, calibration_progress
        self.threads = options.threads or torch.get_num_threads()
        self.example = first_inputs(eval_dataset, "the eval data")
        self.fit_common = {"global_batch_size": options.global_batch_size, "memory_budget": options.memory_budget,
                           "progress": progress, "micro_batch_size": "auto"}
        self.teacher = copy.deepcopy(model).eval()
        self.kd = DistillationLoss(self.teacher, temperature=options.temperature, alpha=options.alpha,
                                   cache_bytes=options.teacher_cache_bytes)
        self.rows: list[dict[str, Any]] = []
        self.models: dict[str, Any] = {}

    def add(self, name: str, model: Any, extra: dict[str, Any], saved: str | None = None) -> None:
        """Measure ``model``'s accuracy (latency comes later, for all rows at once) and append its row."""
        compressed = as_compressed(model, self.example)
        row = {"name": name, **evaluate(compressed, self.eval_dataset, batch_size=self.options.batch_size,
                                        threads=self.threads, latency_batch_sizes=()), **extra}
        if saved:
            row["file"] = saved
        self.rows.append(row)
        self.models[name] = compressed
        low, high = row["accuracy_ci95"]
        self.say(f"{name}: accuracy {100 * row['accuracy']:.2f}% (95% CI {100 * low:.1f}-{100 * high:.1f}) on "
                 f"{row['examples']} eval examples, {row['size_bytes']:,} bytes, {row['parameters']:,} parameters, "
                 f"{row['macs'] / 1e6:.0f} M MACs")

    def build_all(self) -> list[dict[str, Any]]:
        """Every variant the options ask for, then the interleaved latencies; returns the rows."""
        from ._export import onnx_fp32

        o = self.options
        self.say(f"measuring fp32 in PyTorch and in ONNX Runtime ({self.threads} thread(s))")
        self.add("fp32-torch", self.model, {"precision": "fp32", "runtime": "torch"})
        self.add("fp32-onnxruntime", onnx_fp32(self.model, self.example),
                 {"precision": "fp32", "runtime": "onnxruntime"})
        if o.quantize is not None:
            self.quantized("int8", self.model)
        pruned = self.pruned() if (o.prune is not None or o.prune_macs is not None) else None
        if pruned is not None and o.prune_quantize and o.quantize is not None:
            self.quantized("pruned-int8", pruned.model)
        if o.distill_student is not None and o.distill_epochs > 0:
            student = self.distilled()
            if o.distill_quantize and o.quantize is not None:
                self.quantized("distilled-int8", student)
        self.measure_latency()
        return self.rows

    def quantized(self, name: str, model: Any) -> None:
        from .quantization import quantize

        o = self.options
        self.say(f"quantizing {name}: int8 {o.quantize} ({o.backend})")
        q = quantize(model, self.calibration_dataset, method=o.quantize, backend=o.backend,
                     num_calibration_batches=o.num_calibration_batches, batch_size=o.batch_size,
                     progress=self.calibration_progress)
        file = f"{name}.onnx" if q.backend == "onnxruntime" else f"{name}.pt2"
        q.save(self.staging / file)
        self.add(name, q, {"precision": "int8", "runtime": q.backend, "route": q.info.get("route")}, file)

    def _train(self, model: Any, epochs: int, lr: float, optimizer: str = "sgd") -> dict[str, Any]:
        """Fine-tune / distil ``model`` with the KD loss against the fp32 model (module docstring)."""
        from ._training import train

        run = train(model, self.train_dataset, loss_fn=self.kd, epochs=epochs, lr=lr, optimizer=optimizer,
                    validation=self.validation_dataset, patience=self.options.patience, dataset_size=self.train_size,
                    **self.fit_common)
        run.pop("fit_result")
        return run

    def pruned(self) -> Any:
        from .pruning import prune, prune_to_macs

        o = self.options
        if o.prune_macs is not None:
            def finetune(net: Any, k: int, rounds: int) -> dict[str, Any] | None:
                epochs = o.finetune_epochs if k == rounds else max(1, o.finetune_epochs // (2 * rounds))
                if o.finetune_epochs == 0:
                    return None
                self.say(f"pruning round {k}/{rounds}: fine-tuning {epochs} epoch(s) at most (distillation loss)")
                return self._train(net, epochs, o.finetune_lr)

            self.say(f"pruning: structured, to at most {o.prune_macs:.0%} of the MACs in {o.prune_steps} round(s), "
                     f"{o.prune_importance} group importance")
            p = prune_to_macs(self.model, macs_target=o.prune_macs, example_inputs=self.example,
                              steps=o.prune_steps, importance=o.prune_importance, finetune=finetune)
            extra = {"prune_method": "structured", "macs_target": o.prune_macs, "rounds": p.info["rounds"]}
        else:
            self.say(f"pruning: {o.prune_method}, amount {o.prune} (one shot)")
            finetune_opts = ({"dataset": self.train_dataset, "epochs": o.finetune_epochs, "lr": o.finetune_lr,
                              **self.fit_common} if o.finetune_epochs > 0 else None)
            p = prune(self.model, amount=o.prune, structured=o.prune_method == "structured",
                      example_inputs=self.example, finetune=finetune_opts)
            extra = {"prune_method": o.prune_method, "amount": o.prune}
        p.save(self.staging / "pruned.pt2")
        self.add("pruned", p, {"precision": "fp32", "runtime": "torch", **extra}, "pruned.pt2")
        return p

    def distilled(self) -> Any:
        """Train the student (``distilled`` row); returns it (an ``nn.Module``)."""
        from .distillation import student_for_params
        from .model import CompressedModel

        o = self.options
        torch.manual_seed(o.seed)
        teacher_params = sum(p.numel() for p in self.model.parameters())
        target = o.student_target(teacher_params)
        with torch.inference_mode():
            num_classes = int(self.teacher(torch.from_numpy(self.example[:1])).shape[1])
        if o.distill_student in ("small-cnn", "resnet18"):
            student, width = student_for_params(o.distill_student, num_classes, target)
        else:
            student, width = self.build_student(o.distill_student), None
        n = sum(p.numel() for p in student.parameters())
        sized = f"width {width}, {n:,} parameters, target {target:,}" if width is not None else f"{n:,} parameters"
        self.say(f"distilling into {o.distill_student} ({sized}), at most {o.distill_epochs} epoch(s), "
                 f"T={o.temperature}, alpha={o.alpha}, {o.distill_optimizer}")
        facts = self._train(student, o.distill_epochs, o.distill_lr, o.distill_optimizer)
        d = CompressedModel.from_module(student.eval(), "distilled", self.example, facts)
        d.save(self.staging / "distilled.pt2")
        self.add("distilled", d, {"precision": "fp32", "runtime": "torch", "student": o.distill_student,
                                  "student_width": width, "student_params_target": target, **facts},
                 "distilled.pt2")
        return student

    def measure_latency(self) -> None:
        """Latency at batch 1 and 32 of every row, in alternating rounds (module docstring)."""
        saved = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            for m in self.models.values():
                m.set_threads(self.threads)
            predicts = {name: m.predict for name, m in self.models.items()}
            for b, repeats in ((1, max(1, self.options.repeats // LATENCY_ROUNDS)),
                               (32, max(1, self.options.repeats // (4 * LATENCY_ROUNDS)))):
                self.say(f"timing batch {b}: {LATENCY_ROUNDS} alternating rounds of {repeats} call(s) per variant")
                times = interleaved_latency(predicts, batch_of(self.example_batch(b), b), rounds=LATENCY_ROUNDS,
                                            repeats=repeats)
                for row in self.rows:
                    t = times[row["name"]]
                    row[f"latency_ms_batch{b}"] = round(t["p50"], 3)
                    row[f"latency_ms_batch{b}_p90"] = round(t["p90"], 3)
                    row[f"latency_ms_batch{b}_min"] = round(t["min"], 3)
                    row[f"cpu_ms_batch{b}"] = round(t["cpu_p50"], 3)
                    row["threads"] = self.threads
        finally:
            torch.set_num_threads(saved)

    def example_batch(self, size: int) -> Any:
        """Up to ``size`` real eval inputs (cycled by ``batch_of`` if there are fewer)."""
        from ._data import iter_batches

        batches = iter_batches(self.eval_dataset, size, "the eval data")
        try:
            return next(batches)[0]
        finally:
            batches.close()


__all__ = ["Variants"]
