"""``headrace demo``: the whole job on real photographs, inside a memory budget.

1. In a separate process (data preparation is a job of its own): make ``images`` JPEGs (500 x 375,
   crops of the twelve photographs bundled in scikit-image's wheel; the class is *which photograph*, 12
   classes, chance level 8.3% (``regions=1``, the default without ``compress``); with ``compress`` the
   default is ``regions=2``: *which half (left or right) of which photograph*, 24 classes, chance 4.2%, crops
   of the two halves overlapping, a task that does not saturate, so compression losses show) as image folders
   ``output/photos/{train,eval}/<class>/`` (90% /
   10%) and convert each with :func:`headrace.convert.convert` (Apache Beam, DirectRunner) into
   ``num_shards`` / ``num_shards // 8`` TFRecord shards of ``tf.train.Example`` (``image/encoded``,
   ``image/class/label``, ...) with a ``dataset.json`` manifest: ``output/data/{train,eval}/``.
2. Stream the shards through a headrace pipeline (parallel decode + resize to ``image_size``) and train
   the small ResNet-18 with :func:`headrace.train.fit` under ``memory_budget``: the data pipeline gets a
   quarter of it, the micro-batch is chosen automatically to fit the rest, and gradient accumulation keeps
   the global batch.
3. Print accuracy per epoch, throughput and peak RSS against the budget; write ``demo.png`` (loss and RSS
   over time) and ``metrics.jsonl`` to ``output``; end with one JSON line::

       {"accuracy": ..., "images_per_s": ..., "peak_rss_bytes": ..., "memory_budget_bytes": ..., ...}

``peak_rss_bytes`` is the training process's resident high-water mark from the start of step 2 to the
end (the kernel's ``VmHWM``); ``base_rss_bytes`` is its RSS before step 2 (Python, torch, the model). The budget
holds if ``peak_rss_bytes <= base_rss_bytes + memory_budget_bytes``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._args import image_hw
from ._deps import require
from ._errors import ConvertError, MissingDependencyError
from ._memory import format_bytes, parse_bytes

SOURCE_SIZE = (500, 375)  # (width, height) of the generated JPEGs
SPLITS = ("train", "eval")
DEMO_MARKER = "demo.json"
IN_PROCESS_BEAM = ("direct_running_mode=in_memory", "direct_num_workers=1")
MIN_IMAGE_SIDE = 16  # pixels a side: the smallest training resolution the demo takes


@dataclass(frozen=True)
class DemoConfig:
    """The demo's knobs (the CLI's options)."""

    images: int = 5000
    epochs: int = 3
    image_size: int | tuple[int, int] = 96  # S (S x S) or (height, width), >= MIN_IMAGE_SIDE pixels a side
    memory_budget: int | str = "384MiB"
    output: str = "demo_output"
    global_batch_size: int = 64
    model: str = "resnet18"
    seed: int = 0
    eval_fraction: float = 0.1
    num_shards: int = 16
    learning_rate: float = 0.05
    progress: bool | None = None
    compress: bool = False  # then int8 / pruned / distilled variants in output/compress (headrace.compress)
    regions: int | None = None  # regions per photograph (headrace.image.photos.REGION_GRIDS); None: 2 with
    # compress (24 classes, a task that does not saturate), else 1 (12 classes)
    quick_compress: bool = False  # the compression budget of QUICK_COMPRESS (see demo_config)

    @property
    def task_regions(self) -> int:
        """``regions``, or its default: 2 with ``compress``, else 1."""
        return self.regions if self.regions is not None else (2 if self.compress else 1)

    @property
    def num_classes(self) -> int:
        """``12 * task_regions``: the classes of the generated task."""
        return 12 * self.task_regions

    def validate(self) -> None:
        for name in ("images", "epochs", "global_batch_size", "num_shards"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r} must be an int >= 1")
        image_hw(self.image_size, minimum=MIN_IMAGE_SIDE)
        n_eval = int(self.images * self.eval_fraction)
        if self.images - n_eval < self.global_batch_size or n_eval < 1:
            raise ValueError(f"images={self.images} is too few: the demo needs at least one global batch "
                             f"({self.global_batch_size}) of training images plus 10% for evaluation; "
                             f"use --images {max(2 * self.global_batch_size, 24)} or more")
        parse_bytes(self.memory_budget)
        from .image.photos import photo_classes

        photo_classes(self.task_regions)  # raises ValueError naming the allowed values


# `headrace demo --compress` without --images: 2,000 photos, 15% (300) held out for evaluation, 3 epochs at a
# global batch of 32 (twice the optimizer steps of 64 for the same compute: 1,700 images x 3 epochs reached
# 77% at 32, 60% at 64); the compression budget: pruning to the MACs target in one round then 1 epoch of
# fine-tuning (distillation loss; 2 epochs gave +1.7 pt, the first alone matched the teacher on held-out
# data), and at most 24 epochs of distillation with early stopping (it stopped after 17 at -0.3 points; a
# 16-epoch schedule ended 5.0 points short, 8 epochs 7.7). Instead of 2 rounds + 3 epochs and 20 epochs.
# 9 min 17 s on 2 cores with nothing else running (docs/how-to/compression.md).
QUICK_COMPRESS = {"images": 2000, "eval_fraction": 0.15, "epochs": 3, "global_batch_size": 32}
QUICK_COMPRESS_OPTIONS = {"prune_steps": 1, "finetune_epochs": 1, "distill_epochs": 24}


def demo_config(*, images: int | None = None, epochs: int | None = None, global_batch_size: int | None = None,
                compress: bool = False, **settings: Any) -> tuple[DemoConfig, str | None]:
    """The demo's config from the command line's values (``None``: not given), and the line that tells
    the user which defaults were chosen for them (``None`` when none were).

    Without ``compress`` the defaults are :class:`DemoConfig`'s (5,000 images, 3 epochs). With ``compress``
    and no ``images``, the quick profile :data:`QUICK_COMPRESS` (2,000 images, 300 of them held out for
    evaluation, global batch 32) with the compression budget :data:`QUICK_COMPRESS_OPTIONS`; a value given
    explicitly always wins, and ``images`` given keeps the full compression budget and the plain defaults.
    Raises nothing itself (:meth:`DemoConfig.validate` checks the values)."""
    base = DemoConfig()
    quick = compress and images is None
    chosen: dict[str, Any] = {}
    if images is None:
        chosen["images"] = QUICK_COMPRESS["images"] if quick else base.images
    for name, value in (("epochs", epochs), ("global_batch_size", global_batch_size)):
        if value is None:
            chosen[name] = QUICK_COMPRESS[name] if quick else getattr(base, name)
    extra: dict[str, Any] = {"eval_fraction": QUICK_COMPRESS["eval_fraction"], "quick_compress": True} if quick else {}
    cfg = DemoConfig(images=chosen["images"] if images is None else images,
                     epochs=chosen["epochs"] if epochs is None else epochs,
                     global_batch_size=chosen["global_batch_size"] if global_batch_size is None else global_batch_size,
                     compress=compress, **extra, **settings)
    if not quick:
        return cfg, None
    parts = [f"--{k.replace('_', '-')} {v}" for k, v in chosen.items()]
    o = QUICK_COMPRESS_OPTIONS
    parts[0] += f" ({int(cfg.images * cfg.eval_fraction)} held out for evaluation)"
    parts.append(f"pruning in {o['prune_steps']} round(s) + {o['finetune_epochs']} fine-tuning epoch(s), "
                 f"{o['distill_epochs']} distillation epoch(s)")
    import dataclasses

    from .compress.run import CompressOptions

    full = {f.name: f.default for f in dataclasses.fields(CompressOptions) if f.name in o}  # the one home
    return cfg, ("defaults for --compress (not given on the command line): " + ", ".join(parts) +
                 f"; pass --images N for the full compression budget ({full['prune_steps']} pruning rounds + "
                 f"{full['finetune_epochs']} epochs, {full['distill_epochs']} distillation epochs)")


def _say(text: str) -> None:
    print(text, flush=True)


def _split(cfg: DemoConfig) -> set[int]:
    """Indices of the generated photos that go to the eval split (seeded, ``eval_fraction`` of them)."""
    n_eval = int(cfg.images * cfg.eval_fraction)
    return set(np.random.default_rng(cfg.seed + 1).choice(cfg.images, n_eval, replace=False).tolist())


def write_photos(cfg: DemoConfig, photo_dir: Path) -> int:
    """Write the generated JPEGs as ``photo_dir/{train,eval}/<class>/<index:06d>.jpg``; returns their bytes.

    Every class folder exists in both splits (empty ones too), so the image-folder source's labels
    (sorted class folder names) are the ``photo_classes(cfg.task_regions)`` indices the generator assigned. Earlier
    photos in ``photo_dir/{train,eval}`` are removed first.
    """
    from .image.photos import iter_photo_jpegs, photo_classes

    names = photo_classes(cfg.task_regions)
    for split in SPLITS:
        shutil.rmtree(photo_dir / split, ignore_errors=True)
        for name in names:
            (photo_dir / split / name).mkdir(parents=True)
    eval_ids = _split(cfg)
    jpeg_bytes = 0
    photos = iter_photo_jpegs(cfg.images, SOURCE_SIZE, seed=cfg.seed, regions=cfg.task_regions)
    for i, (jpeg, label) in enumerate(photos):
        split = "eval" if i in eval_ids else "train"
        (photo_dir / split / names[label] / f"{i:06d}.jpg").write_bytes(jpeg)
        jpeg_bytes += len(jpeg)
    return jpeg_bytes


def _convert_split(photo_dir: Path, data_dir: Path, split: str, num_shards: int,
                   regions: int) -> dict[str, Any]:
    """``headrace.convert.convert`` of one split's image folder into ``data_dir/split/split-*.tfrecord``.

    Beam's DirectRunner runs in this process (one worker): for a few thousand images that is faster than
    starting worker processes, and the shards are byte-identical either way. Raises ``RuntimeError`` if
    the converter's labels are not the generator's (``photo_classes(regions)`` order).
    """
    from .convert import convert
    from .image.photos import photo_classes

    manifest = convert(photo_dir / split, data_dir / split, num_shards=num_shards, prefix=split,
                       overwrite=True, beam_options=IN_PROCESS_BEAM)
    want = list(photo_classes(regions))
    if manifest["source"]["class_names"] != want:
        raise RuntimeError(f"the converter labelled {photo_dir / split} by {manifest['source']['class_names']}, "
                           f"not the generator's classes {want}; remove {photo_dir} and retry")
    return manifest


def _reusable(data_dir: Path, want: dict[str, Any]) -> dict[str, Any] | None:
    """The ``demo.json`` of an earlier preparation with the same settings whose shards are all there."""
    from .convert import ManifestError, verify

    marker = data_dir / DEMO_MARKER
    if not marker.exists():
        return None
    info = json.loads(marker.read_text())
    if info.get("config") != want:
        return None
    try:
        for split in SPLITS:
            verify(data_dir / split, checksums=False)
    except ManifestError:
        return None
    return info


def reuse_or_reset(data_dir: Path, want: dict[str, Any], what: str) -> dict[str, Any] | None:
    """An earlier preparation's ``demo.json`` when it is reusable (:func:`_reusable`; said, naming its
    ``what``), else ``None`` with ``data_dir`` made and its old ``demo.json`` removed, ready for a new one."""
    info = _reusable(data_dir, want)
    if info is not None:
        _say(f"reusing {info['train_records']} + {info['eval_records']} {what} in {data_dir}/{{train,eval}}")
        return info
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / DEMO_MARKER).unlink(missing_ok=True)
    return None


def write_dataset(cfg: DemoConfig, output: Path) -> dict[str, Any]:
    """Generate the photos into ``output/photos/{train,eval}/<class>/`` and convert them with
    :func:`headrace.convert.convert` (Apache Beam) into ``output/data/{train,eval}/`` (``train-*.tfrecord``,
    ``eval-*.tfrecord``, each split with its ``dataset.json`` manifest); reused if ``output/data/demo.json``
    records the same settings and the shards are complete.

    Returns ``demo.json``'s contents: the settings, ``train_records``, ``eval_records``, ``jpeg_bytes``,
    ``decoded_bytes``, ``seconds``. Raises ``MissingDependencyError`` without Apache Beam (``pip install
    'headrace[beam]'``) and :class:`headrace.convert.ConvertError` if a photo cannot be converted.
    """
    data_dir, photo_dir = output / "data", output / "photos"
    want = {"images": cfg.images, "seed": cfg.seed, "size": list(SOURCE_SIZE), "num_shards": cfg.num_shards,
            "eval_fraction": cfg.eval_fraction, "layout": "convert", "regions": cfg.task_regions}
    info = reuse_or_reset(data_dir, want, "records")
    if info is not None:
        return info
    for old in [*data_dir.glob("*.tfrecord*"), data_dir / "dataset.json"]:  # an older demo's flat layout
        old.unlink(missing_ok=True)
    t0 = time.perf_counter()
    jpeg_bytes = write_photos(cfg, photo_dir)
    t1 = time.perf_counter()
    shards = {"train": cfg.num_shards, "eval": max(1, cfg.num_shards // 8)}
    manifests = {split: _convert_split(photo_dir, data_dir, split, n, cfg.task_regions) for split, n in shards.items()}
    info = {"config": want, "train_records": manifests["train"]["records"],
            "eval_records": manifests["eval"]["records"], "jpeg_bytes": jpeg_bytes,
            "decoded_bytes": cfg.images * SOURCE_SIZE[0] * SOURCE_SIZE[1] * 3,
            "seconds": time.perf_counter() - t0}
    (data_dir / DEMO_MARKER).write_text(json.dumps(info))
    _say(f"wrote {cfg.images} JPEGs ({format_bytes(jpeg_bytes)}) to {photo_dir}/{{train,eval}} in {t1 - t0:.1f} s; "
         f"converted them with headrace.convert (Apache Beam, DirectRunner) to {info['train_records']} + "
         f"{info['eval_records']} records in {shards['train']} + {shards['eval']} TFRecord shards in "
         f"{info['seconds'] - (t1 - t0):.1f} s -> {data_dir}/{{train,eval}}")
    return info


class Recorder:
    """Collects (time, step, loss, RSS) for the plot."""

    def __init__(self, budget: int, base: int) -> None:
        self.budget = budget
        self.base = base
        self.t0 = time.perf_counter()
        self.rows: list[tuple[float, int, float, int]] = []

    def on_step_end(self, info: Any) -> None:
        self.rows.append((time.perf_counter() - self.t0, info.step, info.loss, info.rss_bytes))


def plot(path: Path, recorder: Recorder, budget: int, base: int) -> None:
    """Loss per step and RSS over time (with the budget line) as a PNG."""
    matplotlib = require("matplotlib", "headrace demo")
    matplotlib.use("Agg")
    plt = require("matplotlib.pyplot", "headrace demo")

    t = [r[0] for r in recorder.rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot([r[1] for r in recorder.rows], [r[2] for r in recorder.rows], lw=0.8)
    ax1.set_xlabel("optimizer step")
    ax1.set_ylabel("training loss")
    ax1.set_title("loss")
    ax2.plot(t, [r[3] / 2**20 for r in recorder.rows], lw=0.8, label="process RSS")
    ax2.axhline((base + budget) / 2**20, color="r", ls="--", label="base + memory budget")
    ax2.axhline(base / 2**20, color="gray", ls=":", label="base (python + torch + model)")
    ax2.set_xlabel("seconds")
    ax2.set_ylabel("MiB")
    ax2.set_title("memory")
    ax2.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


PREPARE_TIMEOUT_S = 3600


def _prepare_main(config_json: str, output: str) -> None:
    """Entry point of the data-preparation subprocess."""
    write_dataset(DemoConfig(**json.loads(config_json)), Path(output))


def _prepare_in_subprocess(cfg: Any, output: Path, module: str = "headrace.demo") -> dict[str, Any]:
    """Run ``module._prepare_main`` (here: :func:`write_dataset`) with the dataclass ``cfg`` in a fresh Python
    process (its memory, Beam's included, is not the trainer's); returns ``output/data/demo.json``."""
    if importlib.util.find_spec("apache_beam") is None:
        from .convert._beam import INSTALL_HINT

        raise MissingDependencyError(f"the demo builds its shards with headrace convert, which runs on Apache "
                                     f"Beam; install it with: {INSTALL_HINT}")
    code = f"import sys; from {module} import _prepare_main; _prepare_main(sys.argv[1], sys.argv[2])"
    done = subprocess.run([sys.executable, "-c", code, json.dumps(dataclasses.asdict(cfg)), str(output)],
                          capture_output=True, text=True, timeout=PREPARE_TIMEOUT_S)
    if done.stdout:
        _say(done.stdout.rstrip("\n"))
    if done.returncode != 0:
        log = output / "prepare.log"
        log.write_text(done.stderr)
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ConvertError(f"preparing the demo dataset in {output} failed: {last} (its whole output: {log})")
    return json.loads((output / "data" / DEMO_MARKER).read_text())


def _import_pipeline_modules() -> None:
    """Import what the pipeline uses (OpenCV, simplejpeg, protobuf...) so the base RSS includes them."""
    simplejpeg = require("simplejpeg", "headrace demo")

    from . import image
    from .io import example, tfrecord

    image.decode_and_resize(simplejpeg.encode_jpeg(np.zeros((16, 16, 3), np.uint8), colorspace="RGB"), (8, 8))
    del example, tfrecord


def run_demo(cfg: DemoConfig) -> dict[str, Any]:
    """Run the demo (module docstring); returns the final JSON record (also printed as the last line)."""
    cfg.validate()
    budget = parse_bytes(cfg.memory_budget)
    torch = require("torch", "headrace demo")

    from .train import fit
    from .train.data import image_classification_dataset
    from .train.memory import PeakRSS, release_free_memory, rss_bytes
    from .train.models import build_model
    from .train.schedule import one_cycle

    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    # Step 1 is data preparation, a job of its own (as a Beam conversion would be): a separate process, so
    # the training process's memory is only what training needs.
    info = _prepare_in_subprocess(cfg, out)
    _import_pipeline_modules()
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, cfg.num_classes)
    release_free_memory()
    base = rss_bytes()
    with PeakRSS() as peak:
        train_files = sorted(str(p) for p in (out / "data" / "train").glob("*.tfrecord"))
        eval_files = sorted(str(p) for p in (out / "data" / "eval").glob("*.tfrecord"))
        train_ds = image_classification_dataset(train_files, cfg.image_size, training=True, seed=cfg.seed)
        eval_ds = image_classification_dataset(eval_files, cfg.image_size, training=False)
        steps_per_epoch = info["train_records"] // cfg.global_batch_size
        optimizer = torch.optim.SGD(model.parameters(), lr=cfg.learning_rate, momentum=0.9, nesterov=True,
                                    weight_decay=5e-4)
        scheduler = one_cycle(optimizer, max_lr=cfg.learning_rate, total_steps=max(1, steps_per_epoch * cfg.epochs))
        recorder = Recorder(budget, base)
        height, width = image_hw(cfg.image_size, minimum=MIN_IMAGE_SIDE)
        train_bytes = info["train_records"] * height * width * 3  # what the model reads: uint8 (H, W, 3)
        _say(f"training {cfg.model} on {info['train_records']} images at {width}x{height}, "
             f"{cfg.epochs} epoch(s), global batch {cfg.global_batch_size}; memory budget "
             f"{format_bytes(budget)} above the base RSS {format_bytes(base)}; the decoded training set at "
             f"{width}x{height} would take {format_bytes(train_bytes)} (uint8)")
        result = fit(model, train_ds, loss_fn=torch.nn.CrossEntropyLoss(), optimizer=optimizer,
                     global_batch_size=cfg.global_batch_size, micro_batch_size="auto", epochs=cfg.epochs,
                     memory_budget=cfg.memory_budget, eval_dataset=eval_ds, callbacks=[recorder],
                     metrics_path=out / "metrics.jsonl", progress=cfg.progress, log_every=5,
                     base_rss_bytes=base, lr_scheduler=scheduler, dataset_size=info["train_records"])
    plot_path = out / "demo.png"
    plot(plot_path, recorder, budget, base)
    accuracy = result.history[-1]["eval_accuracy"] if result.history else 0.0
    record = {"accuracy": round(accuracy, 4), "images_per_s": round(result.samples_per_s, 2),
              "peak_rss_bytes": peak.peak_bytes, "memory_budget_bytes": budget, "base_rss_bytes": base,
              "within_budget": peak.peak_bytes <= base + budget,
              "accuracy_per_epoch": [round(r["eval_accuracy"], 4) for r in result.history],
              "micro_batch_size": result.micro_batch_size, "accumulation_steps": result.accumulation_steps,
              "decoded_training_set_bytes": train_bytes, "images": cfg.images, "epochs": cfg.epochs,
              "image_size": height if height == width else f"{width}x{height}", "plot": str(plot_path),
              "classes": cfg.num_classes}
    _say(f"accuracy {100 * accuracy:.1f}% after {cfg.epochs} epoch(s) ({cfg.num_classes} classes, chance "
         f"{100 / cfg.num_classes:.1f}%); "
         f"{result.samples_per_s:.1f} images/s; peak RSS {format_bytes(peak.peak_bytes)} = base "
         f"{format_bytes(base)} + {format_bytes(peak.peak_bytes - base)} of the {format_bytes(budget)} budget; "
         f"plot {plot_path}")
    if cfg.compress:
        from .compress.demo import compress_demo

        record["compress"] = compress_demo(model, out, image_size=cfg.image_size, memory_budget=budget,
                                           global_batch_size=cfg.global_batch_size, num_classes=cfg.num_classes,
                                           seed=cfg.seed, progress=cfg.progress,
                                           train_records=info["train_records"],
                                           overrides=QUICK_COMPRESS_OPTIONS if cfg.quick_compress else None)
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()
    return record


__all__ = ["QUICK_COMPRESS", "QUICK_COMPRESS_OPTIONS", "DemoConfig", "demo_config", "run_demo"]
