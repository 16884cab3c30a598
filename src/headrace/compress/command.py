"""The work behind ``headrace compress`` (the command's flags are in :mod:`headrace.cli.compress`).

``headrace compress CHECKPOINT EVAL_DATA [--quantize static] [--prune-macs 0.5] [--distill-student small-cnn]
--train-data PATH --output DIR``: loads the trained model, builds the fp32 (PyTorch and ONNX Runtime), int8,
pruned and distilled variants, prints one table (size, accuracy with its 95% interval, latency, speed-up
against the fastest fp32) and writes ``report.json`` and
``report.png`` (see :mod:`headrace.compress.run`). Data are TFRecord shards of image Examples
(``image/encoded``, ``image/class/label``), as ``headrace train`` reads them.

CHECKPOINT: a ``headrace train`` / ``fit`` checkpoint directory (its newest checkpoint), a ``ckpt-*.pt``
file, or a file holding a plain ``model.state_dict()``. ``--model`` names the architecture: ``resnet18``,
``small-cnn`` or ``package.module:function`` (called with ``num_classes``, returns an ``nn.Module``).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from ._deps import require


def build_named_model(name: str, num_classes: int) -> Any:
    """``resnet18`` / ``small-cnn`` (:func:`headrace.train.build_model`) or ``module:function``."""
    from ..train.models import MODEL_NAMES, build_model

    if name in MODEL_NAMES:
        return build_model(name, num_classes)
    if ":" not in name:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODEL_NAMES)} or give "
                         "package.module:function (called with num_classes)")
    module_name, _, attr = name.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--model {name}: cannot import {attr!r} from {module_name!r} ({exc})") from exc
    return factory(num_classes)


def checkpoint_file(path: str) -> str:
    """The file CHECKPOINT names: ``path`` itself, or a directory's newest ``ckpt-*.pt``.

    Raises:
        FileNotFoundError: no such file or directory, or a directory without a checkpoint.
    """
    from ..train.checkpoint import latest_checkpoint

    if os.path.isdir(path):
        found = latest_checkpoint(path)
        if found is None:
            raise FileNotFoundError(f"{path}: no checkpoint (ckpt-*.pt) in this directory")
        path = found
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such checkpoint file or directory")
    return path


def load_state_dict(path: str) -> dict[str, Any]:
    """The model weights in CHECKPOINT (module docstring). Raises ``FileNotFoundError`` / ``ValueError``."""
    torch = require("torch", "headrace compress")

    path = checkpoint_file(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"{path}: not a readable PyTorch checkpoint ({type(exc).__name__}: {exc})") from exc
    state = payload.get("model", payload) if isinstance(payload, dict) else None
    if not isinstance(state, dict) or not all(hasattr(v, "shape") for v in state.values()):
        raise ValueError(f"{path}: holds no model state dict (expected a headrace checkpoint or "
                         "torch.save(model.state_dict()))")
    return state


def infer_num_classes(state: dict[str, Any], path: str) -> int:
    """Output classes: the rows of the last 2-D weight (the classifier) in the state dict."""
    last = [v for k, v in state.items() if k.endswith("weight") and getattr(v, "ndim", 0) == 2]
    if not last:
        raise ValueError(f"{path}: cannot tell the number of classes (no Linear weight); pass --num-classes")
    return int(last[-1].shape[0])


def load_model(checkpoint: str, model: str, num_classes: int | None) -> Any:
    """Build ``model`` and load CHECKPOINT's weights into it (strict). Raises ``ValueError`` on a mismatch."""
    state = load_state_dict(checkpoint)
    classes = num_classes or infer_num_classes(state, checkpoint)
    net = build_named_model(model, classes)
    try:
        net.load_state_dict(state)
    except RuntimeError as exc:
        detail = " ".join(str(exc).split())[:300]
        raise ValueError(f"{checkpoint} does not fit --model {model} with {classes} classes ({detail}); pass the "
                         "--model (and --num-classes) it was trained with") from exc
    return net.eval()


def _dataset(path: str, image_size: int | tuple[int, int], *, training: bool, seed: int = 0) -> Any:
    from ..train.data import find_tfrecords, image_classification_dataset

    return image_classification_dataset(find_tfrecords(path), image_size, training=training, seed=seed)


def run_compress(checkpoint: str, eval_data: str, *, model: str = "resnet18", num_classes: int | None = None,
                 image_size: int | tuple[int, int] = 96, train_data: str | None = None,
                 calibration_data: str | None = None, output: str = "compress_output", progress: bool | None = None,
                 hold_out: float = 0.125, **options: Any) -> dict[str, Any]:
    """The command's work (``options``: :class:`headrace.compress.run.CompressOptions` fields; ``hold_out``:
    the share of the training shards held out for early stopping, :func:`headrace.compress.demo.split_files`).
    """
    if not 0.0 <= hold_out < 1.0:
        raise ValueError(f"--hold-out {hold_out}: the share of training shards held out for early stopping "
                         "must be in [0, 1) (0: no early stopping)")
    torch = require("torch", "headrace compress")

    from ._data import first_inputs
    from .run import CompressOptions, compress_model

    checkpoint_file(checkpoint)  # a missing checkpoint is the first thing to say
    opts = CompressOptions(**options)
    opts.validate(train_data is not None)
    torch.manual_seed(opts.seed)
    net = load_model(checkpoint, model, num_classes)
    classes = infer_num_classes(net.state_dict(), checkpoint) if num_classes is None else num_classes
    eval_ds = _dataset(eval_data, image_size, training=False)
    first_inputs(eval_ds, f"EVAL_DATA {eval_data}")  # an empty eval set fails here, before any work
    calib_ds = _dataset(calibration_data, image_size, training=False) if calibration_data else eval_ds
    train_ds = validation = train_size = None
    if train_data:
        from ..io.tfrecord import TFRecordDataset
        from ..train.data import find_tfrecords, image_classification_dataset
        from .demo import split_files

        train_files, held_out = split_files(find_tfrecords(train_data), hold_out)
        train_size = sum(1 for f in train_files for _ in TFRecordDataset(f))  # the schedule's length
        train_ds = image_classification_dataset(train_files, image_size, training=True, seed=opts.seed)
        validation = image_classification_dataset(held_out, image_size, training=False) if held_out else None
    report = compress_model(net, eval_dataset=eval_ds, calibration_dataset=calib_ds, train_dataset=train_ds,
                            build_student=lambda name: build_named_model(name, classes), output=output,
                            options=opts, progress=progress, validation_dataset=validation,
                            train_size=train_size)
    return {"output": output, "variants": report["variants"]}


__all__ = ["build_named_model", "checkpoint_file", "load_model", "run_compress"]
