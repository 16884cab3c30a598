"""Training checkpoints: written atomically, restored exactly (model, optimizer, scaler, RNGs, data position).

Layout in ``checkpoint_dir`` (a local directory or an fsspec URL)::

    ckpt-000000120.pt     torch.save of the payload below (written as a temp file, then renamed)
    latest.json           {"path": "ckpt-000000120.pt", "step": 120} (also written then renamed)

Payload (loadable with ``torch.load(weights_only=True)``: tensors, numbers, strings, lists and dicts only):
``format``, ``version``, ``step`` (optimizer steps done), ``epoch`` (the epoch in progress),
``model`` / ``optimizer`` / ``scaler`` state dicts, ``rng`` (python, numpy, torch, CUDA generator states),
``data_states`` (one JSON string per rank: that rank's ``Iterator.get_state()`` after the last batch
consumed, or ``null`` at an epoch boundary), ``world_size``, ``micro_batch_size`` and ``progress`` (a JSON
string: the run's clock, its per-epoch history and, mid-epoch, the epoch's counts so far, which a resumed
run's ``history`` and ``metrics.jsonl`` ``time_s`` go on from; absent in older checkpoints).

A crash (even SIGKILL) leaves either the previous checkpoint or the new one, never a partial file under a
final name. Only the newest ``keep`` checkpoints are kept.
"""

from __future__ import annotations

import json
import os
import random
import re
from typing import Any

import numpy as np

from .._errors import StateError
from .._versioned import check_versioned
from ..io import files
from ._deps import import_torch

torch = import_torch()

FORMAT = "headrace.train.checkpoint"
VERSION = 1
_NAME_RE = re.compile(r"ckpt-(\d+)\.pt$")


def capture_rng() -> dict[str, Any]:
    """The state of Python's, numpy's, torch's and (if initialized) CUDA's global generators."""
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": {"bit_generator": np_state["bit_generator"],
                  "key": torch.from_numpy(np.asarray(np_state["state"]["key"], dtype=np.int64)),
                  "pos": int(np_state["state"]["pos"]), "has_gauss": int(np_state["has_gauss"]),
                  "gauss": float(np_state["gauss"])},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng`."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state({"bit_generator": n["bit_generator"],
                         "state": {"key": n["key"].numpy().astype(np.uint32), "pos": n["pos"]},
                         "has_gauss": n["has_gauss"], "gauss": n["gauss"]})
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(directory: str | os.PathLike[str], payload: dict[str, Any], keep: int = 2) -> str:
    """Write ``payload`` as ``ckpt-<step>.pt`` atomically, point ``latest.json`` at it, prune old ones.

    Returns the checkpoint's path. Raises ``OSError`` naming the path if it cannot be written.
    """
    directory = os.fspath(directory)
    if not files.is_remote(directory):
        os.makedirs(directory, exist_ok=True)
    step = int(payload["step"])
    name = f"ckpt-{step:09d}.pt"
    path = files.join(directory, name)
    full = {"format": FORMAT, "version": VERSION, **payload}
    files.write_atomic(path, lambda f: torch.save(full, f))
    latest = json.dumps({"path": name, "step": step}).encode()
    files.write_atomic(files.join(directory, "latest.json"), latest)
    old = sorted(p for p in files.glob(files.join(directory, "ckpt-*.pt")) if _NAME_RE.search(p))
    for stale in old[:-keep] if keep > 0 else []:
        if not files.is_remote(stale):
            try:
                os.remove(stale)
            except OSError:
                pass
    return path


def latest_checkpoint(directory: str | os.PathLike[str]) -> str | None:
    """The newest checkpoint in ``directory`` (from ``latest.json``, else the highest step), or None."""
    directory = os.fspath(directory)
    try:
        with files.open_file(files.join(directory, "latest.json"), "rb") as f:
            name = json.loads(f.read())["path"]
        return files.join(directory, name)
    except (FileNotFoundError, OSError, ValueError, KeyError):
        pass
    found = sorted(p for p in files.glob(files.join(directory, "ckpt-*.pt")) if _NAME_RE.search(p))
    return found[-1] if found else None


def load_checkpoint(path: str, map_location: Any = "cpu") -> dict[str, Any]:
    """Load and validate a checkpoint written by :func:`save_checkpoint`.

    Raises:
        StateError: the file is not a headrace checkpoint or has an unsupported version.
    """
    with files.open_file(path, "rb") as f:
        try:
            payload = torch.load(f, map_location=map_location, weights_only=True)
        except Exception as exc:
            raise StateError(f"{path}: not a readable headrace checkpoint ({type(exc).__name__}: {exc}); "
                             "delete it or point checkpoint_dir elsewhere") from exc
    return check_versioned(payload, fmt=FORMAT, version=VERSION, source=str(path), what="training checkpoint",
                           error=StateError, fix="delete it or point checkpoint_dir elsewhere")


__all__ = ["capture_rng", "latest_checkpoint", "load_checkpoint", "restore_rng", "save_checkpoint"]
