"""The comparison report: ``report.json``, a printed table and a PNG (accuracy against size and latency).

``report.json``::

    {"variants": [{"name": "fp32" | "int8" | "pruned" | "distilled", "size_bytes": int, "parameters": int,
                   "macs": int, "accuracy": float (0-1), "latency_ms_batch1": float,
                   "latency_ms_batch32": float, "threads": int, "speedup_batch32": float,
                   "size_ratio": float, ...}, ...],
     "threads": int, "eval_examples": int, "machine": {...}, "created": "...", "options": {...}}

``speedup_batch32`` and ``size_ratio`` are the fp32 row's latency at batch 32 / size divided by the row's.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from .._memory import format_bytes
from ._deps import require
from .model import atomic_write


def machine() -> dict[str, Any]:
    """Where the figures were measured: :func:`headrace._machine.machine_info` plus the versions of torch and
    the compression libraries."""
    from importlib.metadata import PackageNotFoundError, version

    torch = require("torch", "headrace compress")

    from .._machine import machine_info

    versions = {"torch": torch.__version__}
    for name in ("onnxruntime", "torch-pruning", "torchao"):
        try:
            versions[name] = version(name)
        except PackageNotFoundError:  # not installed: not reported
            pass
    return {**machine_info(), **versions}


def add_ratios(variants: list[dict[str, Any]]) -> None:
    """Add ``speedup_batch32`` / ``speedup_batch1`` and ``size_ratio`` against the ``fp32`` row, in place."""
    base = next((v for v in variants if v["name"] == "fp32"), None)
    if base is None:
        return
    for v in variants:
        for b in (1, 32):
            key = f"latency_ms_batch{b}"
            if v.get(key):
                v[f"speedup_batch{b}"] = round(base[key] / v[key], 3)
        v["size_ratio"] = round(base["size_bytes"] / max(v["size_bytes"], 1), 3)


def table_rows(variants: list[dict[str, Any]]) -> list[list[str]]:
    """Rows of the printed table: name, size, x smaller, params, MACs, accuracy, latency b1 / b32, speedup."""
    rows = []
    for v in variants:
        rows.append([v["name"], format_bytes(v["size_bytes"]), f"{v.get('size_ratio', 1.0):.2f}x",
                     f"{v['parameters'] / 1e6:.2f} M", f"{v['macs'] / 1e6:.0f} M", f"{100 * v['accuracy']:.2f}%",
                     f"{v['latency_ms_batch1']:.1f}", f"{v['latency_ms_batch32']:.1f}",
                     f"{v.get('speedup_batch32', 1.0):.2f}x"])
    return rows


HEADERS = ["variant", "size", "smaller", "params", "MACs", "accuracy", "ms @1", "ms @32", "speedup @32"]


def print_table(variants: list[dict[str, Any]], threads: int, say: Any = print) -> None:
    """The table as aligned text lines, one call of ``say`` per line."""
    rows = table_rows(variants)
    title = f"compressed variants (latency p50 per batch, {threads} thread(s))"
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]
    say(title)
    say("  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(HEADERS, widths))))
    for r in rows:
        say("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))


def plot(path: str | os.PathLike[str], variants: list[dict[str, Any]], threads: int) -> None:
    """Two panels: accuracy against size on disk, and against latency at batch 32 (written atomically)."""
    matplotlib = require("matplotlib", "the compress report's plot")
    matplotlib.use("Agg")
    plt = require("matplotlib.pyplot", "the compress report's plot")

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, label in ((axes[0], "size_bytes", "size on disk (MB)"),
                           (axes[1], "latency_ms_batch32", f"latency per batch of 32 (ms, {threads} thread(s))")):
        for i, v in enumerate(variants):
            x = v[key] / 1e6 if key == "size_bytes" else v[key]
            ax.scatter([x], [100 * v["accuracy"]], s=60)
            ax.annotate(v["name"], (x, 100 * v["accuracy"]), textcoords="offset points",
                        xytext=(6, 6 + 12 * (i % 3)) if i % 2 == 0 else (6, -14 - 12 * (i % 3)))
        ax.set_xlabel(label)
        ax.set_ylabel("eval accuracy (%)")
        ax.set_xlim(left=0)
        ax.set_ylim(top=min(100.5, ax.get_ylim()[1]))
        ax.grid(alpha=0.3)
    axes[0].set_title("accuracy vs size")
    axes[1].set_title("accuracy vs latency")
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)


def write_report(directory: Path, variants: list[dict[str, Any]], *, threads: int, options: dict[str, Any],
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``report.json`` and ``report.png`` into ``directory``; returns the report."""
    report = {"variants": variants, "threads": threads,
              "eval_examples": variants[0].get("examples") if variants else 0, "machine": machine(),
              "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "options": options, **(extra or {})}
    plot(directory / "report.png", variants, threads)
    text = json.dumps(report, indent=1, default=str)
    atomic_write(directory / "report.json", lambda tmp: Path(tmp).write_text(text))
    return report


__all__ = ["add_ratios", "machine", "plot", "print_table", "write_report"]
