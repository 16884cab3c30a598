"""``headrace demo --text``: training on real text inside a memory budget.

1. In a separate process (as in :mod:`headrace.demo`): cut the Python standard library's own sources (every
   installation ships them; nothing is downloaded) into windows of ``lines_per_window`` consecutive non-blank
   lines, labelled by the package they come from (:data:`PACKAGES`: 8 classes), ``windows_per_class`` each,
   written as one text file per package and split (``output/text/{train,eval}/<package>.txt``, one window a
   line: ``<label>\\t<lines joined by " ␤ ">``; a block of 20 windows in every 200 goes to eval), then converted
   by :func:`headrace.convert.convert` (Apache Beam, the text source: :class:`headrace.io.TextLineDataset`
   reads each file; ``to="text"``) into GZIP-compressed text shards ``output/data/{train,eval}/*.txt.gz``, one
   window a line.
2. Train a byte-level BPE tokenizer (:func:`headrace.text.train_tokenizer`) on the training shards only, then
   ``TextLineDataset(shards) -> shuffle -> batch -> map(parse + tokenize, AUTOTUNE threads) -> unbatch -> pack
   -> map(segment_examples) -> shuffle`` (:mod:`headrace.train.text_data`) into :func:`headrace.train.fit`
   (which batches and prefetches) under ``memory_budget``, training
   :class:`headrace.train.text.PackedTextClassifier`: which package does each window come from.
3. Print per epoch the held-out accuracy beside chance, tokens/s (non-padding tokens trained on per second),
   the packing efficiency (non-padding share of the rows trained on) and the peak RSS against the budget;
   write ``demo_text.png`` and ``metrics.jsonl``; end with one JSON line (``accuracy``, ``chance``,
   ``tokens_per_s``, ``packing_efficiency``, ``peak_rss_bytes``, ``memory_budget_bytes``, ...).

The budget holds when ``peak_rss_bytes <= base_rss_bytes + memory_budget_bytes * 1.1 + 64 MiB``: the resident
high-water mark of the training process (the pipeline runs on its threads; it starts no child process) from
after the model is built to the end; ``base_rss_bytes`` is its RSS then (Python, torch, tokenizer, model).
"""

from __future__ import annotations

import json
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._deps import require
from ._memory import format_bytes, parse_bytes
from .demo import DEMO_MARKER, IN_PROCESS_BEAM, SPLITS, Recorder, _prepare_in_subprocess, _say, plot, reuse_or_reset

PACKAGES = ("asyncio", "email", "unittest", "multiprocessing", "xml", "importlib", "http", "logging")
"""The classes: standard-library packages with at least ~4,000 non-blank source lines (their tests left out)."""
LINE_JOIN = " \u2424 "
EVAL_BLOCK, EVAL_EVERY = 20, 200
RSS_SLACK = 64 * 2**20
MIN_EFFICIENCY = 0.95


@dataclass(frozen=True)
class TextDemoConfig:
    """The text demo's knobs (``headrace demo --text``'s options)."""

    windows_per_class: int = 400
    lines_per_window: int = 2
    epochs: int = 3
    sequence_length: int = 128
    max_segments: int = 24
    vocab_size: int = 2000
    memory_budget: int | str = "256MiB"
    output: str = "demo_text_output"
    global_batch_size: int = 16
    learning_rate: float = 3e-3
    d_model: int = 128
    num_layers: int = 2
    num_shards: int = 8
    seed: int = 0
    progress: bool | None = None
    compress: bool = False  # then the int8 model beside the fp32 ones in output/compress (headrace.compress)
    # with compress: also a student of this width distilled and quantized (None: none; at 64, half the width, it
    # scored 8.8 points below the model after the same 3 epochs: it does not pay by default)
    student_d_model: int | None = None

    def validate(self) -> None:
        for name in ("windows_per_class", "lines_per_window", "epochs", "sequence_length", "max_segments",
                     "vocab_size", "global_batch_size", "d_model", "num_layers", "num_shards"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r} must be an int >= 1")
        if self.windows_per_class < EVAL_EVERY // 2:
            raise ValueError(f"windows_per_class={self.windows_per_class} is too few: at least {EVAL_EVERY // 2}, "
                             f"so each class has held-out windows (one block of {EVAL_BLOCK} in {EVAL_EVERY})")
        if self.student_d_model is not None and (isinstance(self.student_d_model, bool)
                                                 or not isinstance(self.student_d_model, int)
                                                 or self.student_d_model < 1):
            raise ValueError(f"student_d_model={self.student_d_model!r} must be an int >= 1 (or None: no student)")
        parse_bytes(self.memory_budget)


def package_windows(package: str, lines_per_window: int, limit: int) -> list[str]:
    """Up to ``limit`` windows of ``lines_per_window`` consecutive non-blank lines (stripped, joined by
    ``LINE_JOIN``) of the standard library package ``package``'s sources (sorted files, tests left out).

    Raises:
        FileNotFoundError: the package is not in this Python's standard library (names the folder).
    """
    root = Path(sysconfig.get_paths()["stdlib"]) / package
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: the standard library package {package!r} is not installed here")
    windows: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if {"test", "tests", "idle_test"} & set(path.relative_to(root).parts):
            continue
        lines = [s for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if (s := line.strip())]
        for i in range(0, len(lines) - lines_per_window + 1, lines_per_window):
            windows.append(LINE_JOIN.join(lines[i:i + lines_per_window]).replace("\t", " "))
            if len(windows) == limit:
                return windows
    return windows


def write_text(cfg: TextDemoConfig, text_dir: Path) -> dict[str, int]:
    """``text_dir/{train,eval}/<package>.txt``, one ``<label>\\t<window>`` a line; returns windows per split."""
    counts = dict.fromkeys(SPLITS, 0)
    for split in SPLITS:
        (text_dir / split).mkdir(parents=True, exist_ok=True)
    for label, package in enumerate(PACKAGES):
        windows = package_windows(package, cfg.lines_per_window, cfg.windows_per_class)
        parts: dict[str, list[str]] = {split: [] for split in SPLITS}
        for i, window in enumerate(windows):
            parts["eval" if i % EVAL_EVERY < EVAL_BLOCK else "train"].append(f"{label}\t{window}\n")
        for split, rows in parts.items():
            (text_dir / split / f"{package}.txt").write_text("".join(rows), encoding="utf-8")
            counts[split] += len(rows)
    return counts


def write_dataset(cfg: TextDemoConfig, output: Path) -> dict[str, Any]:
    """Step 1 (module docstring): the windows, converted by Beam into ``output/data/{train,eval}/``; reused when
    ``output/data/demo.json`` records the same settings and the shards are complete. Returns ``demo.json``."""
    from .convert import convert

    data_dir = output / "data"
    want = {"text": True, "to": "text", "windows_per_class": cfg.windows_per_class,
            "lines_per_window": cfg.lines_per_window, "num_shards": cfg.num_shards, "packages": list(PACKAGES)}
    info = reuse_or_reset(data_dir, want, "windows")
    if info is not None:
        return info
    t0 = time.perf_counter()
    counts = write_text(cfg, output / "text")
    shards = {"train": cfg.num_shards, "eval": max(1, cfg.num_shards // 4)}
    manifests = {split: convert(output / "text" / split, data_dir / split, source_format="text", to="text",
                                num_shards=n, compression="GZIP", prefix=split, overwrite=True,
                                beam_options=IN_PROCESS_BEAM)
                 for split, n in shards.items()}
    info = {"config": want, "train_records": manifests["train"]["records"],
            "eval_records": manifests["eval"]["records"], "seconds": time.perf_counter() - t0}
    if [info["train_records"], info["eval_records"]] != [counts["train"], counts["eval"]]:
        raise RuntimeError(f"the conversion wrote {info['train_records']} + {info['eval_records']} records, not the "
                           f"{counts['train']} + {counts['eval']} windows written; remove {output} and retry")
    (data_dir / DEMO_MARKER).write_text(json.dumps(info))
    _say(f"cut {counts['train'] + counts['eval']} windows of {cfg.lines_per_window} lines from {len(PACKAGES)} "
         f"standard-library packages; converted them with headrace.convert (Apache Beam) to GZIP text shards "
         f"({shards['train']} + {shards['eval']}) in {info['seconds']:.1f} s -> {data_dir}/{{train,eval}}")
    return info


def _prepare_main(config_json: str, output: str) -> None:
    """Entry point of the data-preparation subprocess."""
    write_dataset(TextDemoConfig(**json.loads(config_json)), Path(output))


class TokenCounter:
    """Counts the non-padding and all tokens of the rows trained on, per epoch (an ``on_step_end`` callback)."""

    def __init__(self) -> None:
        self.tokens: dict[int, int] = {}
        self.slots: dict[int, int] = {}

    def on_step_end(self, info: Any) -> None:
        segment_ids = info.batch[0][:, 1]
        self.tokens[info.epoch] = self.tokens.get(info.epoch, 0) + int((segment_ids > 0).sum())
        self.slots[info.epoch] = self.slots.get(info.epoch, 0) + int(segment_ids.numel())

    def efficiency(self) -> float:
        return sum(self.tokens.values()) / max(1, sum(self.slots.values()))


class EpochReport:
    """Prints each epoch's line (accuracy beside chance, tokens/s, packing efficiency, peak RSS vs budget)."""

    def __init__(self, counter: TokenCounter, chance: float, budget: int, base: int) -> None:
        self.counter, self.chance, self.budget, self.base = counter, chance, budget, base
        self.rows: list[dict[str, Any]] = []

    def on_epoch_end(self, record: dict[str, Any]) -> None:
        e = record["epoch"]
        tokens, slots = self.counter.tokens.get(e, 0), self.counter.slots.get(e, 0)
        row = {"epoch": e, "accuracy": record.get("eval_accuracy", 0.0), "tokens_per_s": tokens / record["time_s"],
               "packing_efficiency": tokens / max(1, slots), "peak_rss_bytes": record["peak_rss_bytes"]}
        self.rows.append(row)
        _say(f"epoch {e}: held-out accuracy {100 * row['accuracy']:.1f}% (chance {100 * self.chance:.1f}%), "
             f"{row['tokens_per_s']:.0f} tokens/s, packing efficiency {100 * row['packing_efficiency']:.1f}%, "
             f"peak RSS {format_bytes(row['peak_rss_bytes'])} = base {format_bytes(self.base)} + "
             f"{format_bytes(row['peak_rss_bytes'] - self.base)} of the {format_bytes(self.budget)} budget")


def _chance(directory: Path) -> float:
    """The majority class's share of a split's windows (always guessing it scores this)."""
    from .train.text_data import count_labels, labelled_lines

    counts = count_labels(labelled_lines(directory))
    return float(counts.max() / max(1, counts.sum()))


def run_text_demo(cfg: TextDemoConfig) -> dict[str, Any]:
    """Run the text demo (module docstring); returns the final JSON record (also printed as the last line)."""
    cfg.validate()
    budget = parse_bytes(cfg.memory_budget)
    torch = require("torch", "headrace demo --text")
    from . import text
    from .train import fit
    from .train.memory import PeakRSS, release_free_memory, rss_bytes
    from .train.schedule import cosine_schedule
    from .train.text import PackedTextClassifier, segment_cross_entropy
    from .train.text_data import labelled_lines, packed_text_dataset, texts_of

    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    info = _prepare_in_subprocess(cfg, out, module="headrace.text_demo")
    data = out / "data"
    t0 = time.perf_counter()
    tok = text.train_tokenizer(texts_of(labelled_lines(data / "train")), vocab_size=cfg.vocab_size)
    tok.save(str(out / "tokenizer.json"))
    _say(f"trained a byte-level BPE tokenizer ({tok.get_vocab_size()} tokens) on the training shards in "
         f"{time.perf_counter() - t0:.1f} s -> {out / 'tokenizer.json'}")
    encoder = text.Encoder(tok, eos="[EOS]", max_length=cfg.sequence_length)
    chance = _chance(data / "eval")
    torch.manual_seed(cfg.seed)
    model = PackedTextClassifier(tok.get_vocab_size(), len(PACKAGES), sequence_length=cfg.sequence_length,
                                 max_segments=cfg.max_segments, d_model=cfg.d_model, num_heads=4,
                                 num_layers=cfg.num_layers, dropout=0.1)
    release_free_memory()
    base = rss_bytes()
    with PeakRSS() as peak:
        shape = {"sequence_length": cfg.sequence_length, "max_segments": cfg.max_segments, "seed": cfg.seed}
        train_ds = packed_text_dataset(labelled_lines(data / "train"), encoder, training=True, **shape)
        eval_ds = packed_text_dataset(labelled_lines(data / "eval"), encoder, training=False, **shape)
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=0.01)
        # rows per epoch are known only after packing, and each epoch's shuffle packs them a little differently:
        # one pass counts the first epoch's (the schedule's length; it stays at its end if a later epoch has more)
        rows = sum(len(targets) for _, targets in train_ds.batch(256))
        total = max(1, rows // cfg.global_batch_size * cfg.epochs)
        scheduler = cosine_schedule(optimizer, total, warmup_steps=total // 10)
        recorder, counter = Recorder(budget, base), TokenCounter()
        report = EpochReport(counter, chance, budget, base)
        _say(f"training a {cfg.num_layers}-layer Transformer (d_model {cfg.d_model}) on {info['train_records']} "
             f"windows packed into rows of {cfg.sequence_length} tokens, {cfg.epochs} epoch(s), global batch "
             f"{cfg.global_batch_size} rows; memory budget {format_bytes(budget)} above the base RSS "
             f"{format_bytes(base)}")
        result = fit(model, train_ds, loss_fn=segment_cross_entropy, optimizer=optimizer,
                     global_batch_size=cfg.global_batch_size, micro_batch_size="auto", epochs=cfg.epochs,
                     memory_budget=cfg.memory_budget, eval_dataset=eval_ds, callbacks=[recorder, counter, report],
                     metrics_path=out / "metrics.jsonl", progress=cfg.progress, log_every=10, base_rss_bytes=base,
                     lr_scheduler=scheduler, dataset_size=rows)
    plot_path = out / "demo_text.png"
    plot(plot_path, recorder, budget, base)
    accuracy = report.rows[-1]["accuracy"] if report.rows else 0.0
    limit = int(base + budget * 1.1 + RSS_SLACK)
    tokens_per_s = sum(counter.tokens.values()) / max(1e-9, sum(r["time_s"] for r in result.history))
    record = {"accuracy": round(accuracy, 4), "chance": round(chance, 4), "tokens_per_s": round(tokens_per_s, 1),
              "packing_efficiency": round(counter.efficiency(), 4), "peak_rss_bytes": peak.peak_bytes,
              "memory_budget_bytes": budget, "base_rss_bytes": base, "rss_limit_bytes": limit,
              "within_budget": peak.peak_bytes <= limit,
              "efficiency_ok": counter.efficiency() >= MIN_EFFICIENCY,
              "accuracy_per_epoch": [round(r["accuracy"], 4) for r in report.rows],
              "tokens_per_s_per_epoch": [round(r["tokens_per_s"], 1) for r in report.rows],
              "micro_batch_size": result.micro_batch_size, "accumulation_steps": result.accumulation_steps,
              "windows": info["train_records"] + info["eval_records"], "epochs": cfg.epochs,
              "sequence_length": cfg.sequence_length, "classes": len(PACKAGES), "vocab_size": tok.get_vocab_size(),
              "plot": str(plot_path)}
    _say(f"accuracy {100 * accuracy:.1f}% after {cfg.epochs} epoch(s) ({len(PACKAGES)} classes, chance "
         f"{100 * chance:.1f}%); {tokens_per_s:.0f} tokens/s; packing efficiency {100 * counter.efficiency():.1f}%; "
         f"peak RSS {format_bytes(peak.peak_bytes)} (limit base + budget x 1.1 + 64 MiB = {format_bytes(limit)}); "
         f"plot {plot_path}")
    if cfg.compress:
        student = None
        if cfg.student_d_model:
            torch.manual_seed(cfg.seed)
            student = PackedTextClassifier(tok.get_vocab_size(), len(PACKAGES), sequence_length=cfg.sequence_length,
                                           max_segments=cfg.max_segments, d_model=cfg.student_d_model,
                                           num_heads=max(1, cfg.student_d_model // 32), num_layers=cfg.num_layers,
                                           dropout=0.1)
        record["compress"] = compress_text_model(
            model, out, eval_ds, budget, student=student, train_ds=train_ds, train_size=rows,
            distill_epochs=cfg.epochs, distill_lr=cfg.learning_rate, global_batch_size=cfg.global_batch_size,
            progress=cfg.progress)
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()
    return record


INT8_TARGETS = {"smaller": 2.0, "faster": 1.5, "points": 1.0}
"""``--compress``'s targets for the int8 row: at least 2x smaller and 1.5x faster (median latency at batch 32)
than the fastest fp32 row, and at most 1 accuracy point below it."""


def compress_text_model(model: Any, output: Path, eval_ds: Any, memory_budget: int, repeats: int = 80, *,
                        student: Any = None, train_ds: Any = None, train_size: int | None = None,
                        distill_epochs: int = 0, distill_lr: float = 3e-3, global_batch_size: int = 16,
                        progress: bool | None = False) -> dict[str, Any]:
    """``--compress``: the trained model as fp32 (PyTorch, ONNX Runtime) and int8 (ONNX Runtime dynamic
    quantization of its Linear and Embedding weights, :func:`headrace.compress.quantize`), measured on the
    held-out rows by :func:`headrace.compress.run.compress_model` into ``output/compress/report.json``.
    ``repeats``: timed calls per variant at batch 1 (a quarter as many at batch 32, in 5 alternating rounds).

    With ``student`` (an untrained smaller :class:`~headrace.train.text.PackedTextClassifier`) and
    ``distill_epochs`` > 0, also the rows ``distilled`` (the student trained on ``train_ds``, ``train_size``
    rows, with the distillation loss against the model: AdamW, cosine schedule, ``global_batch_size``) and
    ``distilled-int8`` (the student quantized the same way).

    Returns the variants' sizes, accuracies (with 95% intervals) and latencies for the JSON line, and
    ``targets``: the int8 row against :data:`INT8_TARGETS` (also printed)."""
    from .compress.demo import summary
    from .compress.run import CompressOptions, compress_model

    distil = student is not None and distill_epochs > 0
    options = CompressOptions(quantize="dynamic", prune_macs=None, distill_student="text-student" if distil else None,
                              distill_epochs=distill_epochs, distill_lr=distill_lr, distill_optimizer="adamw",
                              distill_quantize=True, teacher_cache_bytes=0, global_batch_size=global_batch_size,
                              memory_budget=str(memory_budget), repeats=repeats)
    report = compress_model(model.eval(), eval_dataset=eval_ds, calibration_dataset=eval_ds,
                            train_dataset=train_ds if distil else None, build_student=lambda name: student,
                            output=output / "compress", options=options, progress=progress, train_size=train_size)
    result = summary(report, output / "compress")
    result["targets"] = {v["name"]: int8_targets(report, v["name"]) for v in report["variants"]
                         if v["precision"] == "int8"}
    return result


def int8_targets(report: dict[str, Any], name: str = "int8") -> dict[str, Any]:
    """The int8 row ``name`` of a compression ``report`` against :data:`INT8_TARGETS` (printed as one line):
    ``smaller`` / ``faster`` (x, against the fastest fp32 row, ``baseline``; median and ``faster_best`` best of
    N at batch 32), ``less_cpu`` (the baseline's CPU time per batch of 32 over the row's, which other processes
    on the machine change much less), ``accuracy_delta_points`` and ``met`` (judged on the median)."""
    rows = {v["name"]: v for v in report["variants"]}
    q, base = rows[name], rows[report["speedup_baseline"]]
    result = {"baseline": base["name"], "smaller": q["size_ratio"], "faster": q["speedup_batch32"],
              "faster_best": round(base["latency_ms_batch32_min"] / q["latency_ms_batch32_min"], 3),
              "less_cpu": round(base["cpu_ms_batch32"] / max(q["cpu_ms_batch32"], 1e-9), 3),
              "accuracy_delta_points": q["accuracy_delta_points"]}
    checks = [result["smaller"] >= INT8_TARGETS["smaller"], result["faster"] >= INT8_TARGETS["faster"],
              result["accuracy_delta_points"] >= -INT8_TARGETS["points"]]
    result["met"] = all(checks)
    marks = ["met" if ok else "NOT met" for ok in checks]
    _say(f"{name} against {base['name']} (the fastest fp32 row): {result['smaller']:.2f}x smaller (target >= "
         f"{INT8_TARGETS['smaller']:g}x: {marks[0]}), {result['faster']:.2f}x faster at batch 32, median "
         f"({result['faster_best']:.2f}x best of N, {result['less_cpu']:.2f}x less CPU time; target >= "
         f"{INT8_TARGETS['faster']:g}x: {marks[1]}), "
         f"{result['accuracy_delta_points']:+.1f} accuracy points (target within {INT8_TARGETS['points']:g}: "
         f"{marks[2]})")
    return result


__all__ = ["INT8_TARGETS", "PACKAGES", "TextDemoConfig", "compress_text_model", "int8_targets", "package_windows",
           "run_text_demo"]
