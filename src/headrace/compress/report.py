"""The comparison report: ``report.json``, a printed table and a PNG (accuracy against size and latency).

``report.json``::

    {"variants": [{"name": "fp32-torch" | "fp32-onnxruntime" | "int8" | "pruned" | "pruned-int8" | "distilled",
                   "precision": "fp32" | "int8", "runtime": "torch" | "onnxruntime" | "torchao",
                   "size_bytes": int, "parameters": int, "macs": int, "accuracy": float (0-1),
                   "accuracy_ci95": [low, high], "examples": int, "correct": int, "latency_ms_batch1": float,
                   "latency_ms_batch32": float, "cpu_ms_batch32": float, "threads": int, "speedup_batch32": float,
                   "size_ratio": float, "accuracy_delta_points": float, ...}, ...],
     "threads": int, "eval_examples": int, "speedup_baseline": "fp32-...", "accuracy_interval": "...",
     "machine": {"cpu": ..., "int8_isa": ..., "simd": [...], "load_average": [...], ...}, "created": "...",
     "options": {...}}

``speedup_batch32`` and ``size_ratio`` are the latency at batch 32 / size of the fastest fp32 row
(``speedup_baseline``: ``fp32-torch`` or ``fp32-onnxruntime``) divided by the row's; ``accuracy_ci95`` is the
95% Wilson score interval of the accuracy; ``cpu_ms_batch32`` the median CPU time of the process per call
(:func:`headrace.compress.measure.interleaved_latency`); ``machine["int8_isa"]`` the instructions ONNX
Runtime's int8 kernels use on this CPU (read from its flags at run time).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from .._memory import format_bytes
from ._deps import require
from .model import ORT_SESSION_SETTINGS, atomic_write


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
    info = machine_info()
    return {**info, "int8_isa": int8_isa(info["simd"]), **versions}


def wilson_interval(correct: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``correct / n`` (default: 95%, ``z`` = 1.96), as
    fractions in [0, 1]. Raises ``ValueError`` for ``n`` < 1 or ``correct`` outside 0..n."""
    if n < 1 or not 0 <= correct <= n:
        raise ValueError(f"correct={correct}, n={n}: need n >= 1 and 0 <= correct <= n")
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def int8_isa(simd: list[str]) -> str:
    """The instructions ONNX Runtime's int8 (U8S8) kernels run on this CPU, from its ``/proc/cpuinfo``
    flags (``machine_info()["simd"]``), in MLAS's order of preference: ``"AMX"``, ``"AVX-512 VNNI"``,
    ``"AVX-VNNI"``, ``"AVX-512"`` (no VNNI), ``"AVX2"``, ``"NEON"`` or ``"SSE"``."""
    flags = set(simd)
    for flag, name in (("amx_int8", "AMX"), ("avx512_vnni", "AVX-512 VNNI"), ("avx_vnni", "AVX-VNNI"),
                       ("avx512bw", "AVX-512"), ("avx2", "AVX2"), ("asimd", "NEON")):
        if flag in flags:
            return name
    return "SSE"


def speedup_baseline(variants: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fastest uncompressed fp32 row at batch 32 (named ``fp32...`` with ``precision == "fp32"``:
    ``fp32-torch`` or ``fp32-onnxruntime``; pruned and distilled rows are fp32 too but never the baseline),
    the baseline of every speed-up and size ratio; None when there is no such row."""
    fp32 = [v for v in variants if v.get("precision") == "fp32" and str(v["name"]).startswith("fp32")
            and v.get("latency_ms_batch32")]
    return min(fp32, key=lambda v: v["latency_ms_batch32"]) if fp32 else None


def add_ratios(variants: list[dict[str, Any]]) -> str | None:
    """Add ``speedup_batch32`` / ``speedup_batch1``, ``size_ratio`` and ``accuracy_delta`` (points) against
    :func:`speedup_baseline`, in place; returns the baseline's name."""
    base = speedup_baseline(variants)
    if base is None:
        return None
    for v in variants:
        for b in (1, 32):
            key = f"latency_ms_batch{b}"
            if v.get(key) and base.get(key):
                v[f"speedup_batch{b}"] = round(base[key] / v[key], 3)
        v["size_ratio"] = round(base["size_bytes"] / max(v["size_bytes"], 1), 3)
        v["accuracy_delta_points"] = round(100 * (v["accuracy"] - base["accuracy"]), 2)
    return str(base["name"])


def table_rows(variants: list[dict[str, Any]]) -> list[list[str]]:
    """Rows of the printed table: name, size, x smaller, params, MACs, accuracy (95% CI), latency b1 / b32,
    speed-up at batch 32 (against :func:`speedup_baseline`)."""
    rows = []
    for v in variants:
        low, high = v.get("accuracy_ci95", (v["accuracy"], v["accuracy"]))
        rows.append([v["name"], format_bytes(v["size_bytes"]), f"{v.get('size_ratio', 1.0):.2f}x",
                     f"{v['parameters'] / 1e6:.2f} M", f"{v['macs'] / 1e6:.0f} M",
                     f"{100 * v['accuracy']:.1f}% ({100 * low:.1f}-{100 * high:.1f})",
                     f"{v.get('latency_ms_batch1', 0.0):.2f}", f"{v.get('latency_ms_batch32', 0.0):.1f}",
                     f"{v.get('speedup_batch32', 1.0):.2f}x"])
    return rows


HEADERS = ["variant", "size", "smaller", "params", "MACs", "accuracy (95% CI)", "ms @1", "ms @32", "speed-up @32"]


def print_table(variants: list[dict[str, Any]], report: dict[str, Any], say: Any = print) -> None:
    """The table as aligned text lines, one call of ``say`` per line, under a line naming the CPU, the int8
    kernels' ISA, the threads and the speed-up baseline."""
    rows = table_rows(variants)
    m = report.get("machine", {})
    say(f"CPU: {m.get('cpu')}; int8 kernels: {m.get('int8_isa')}; {report['threads']} thread(s); latency p50 per "
        f"batch, alternating rounds; speed-up and size against the fastest fp32 ({report.get('speedup_baseline')}); "
        f"accuracy on {report.get('eval_examples')} eval examples, 95% Wilson interval; ONNX Runtime sessions: "
        f"{report.get('onnxruntime_session', ORT_SESSION_SETTINGS)}")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]
    say("  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(HEADERS, widths))))
    for r in rows:
        say("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))


MARKERS = "osD^vP*Xh<>p"


def plot(path: str | os.PathLike[str], variants: list[dict[str, Any]], threads: int, title: str = "") -> None:
    """Two panels: accuracy (with its 95% interval as an error bar) against size on disk and against latency
    at batch 32; each variant has its own colour and marker, named in one legend below the panels (no
    label sits next to a point, so none can overlap another). Written atomically."""
    matplotlib = require("matplotlib", "the compress report's plot")
    matplotlib.use("Agg")
    plt = require("matplotlib.pyplot", "the compress report's plot")

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, key, label in ((axes[0], "size_bytes", "size on disk (MB)"),
                           (axes[1], "latency_ms_batch32", f"latency per batch of 32 (ms, {threads} thread(s))")):
        for i, v in enumerate(variants):
            x = v[key] / 1e6 if key == "size_bytes" else v.get(key, 0.0)
            acc = 100 * v["accuracy"]
            low, high = v.get("accuracy_ci95", (v["accuracy"], v["accuracy"]))
            ax.errorbar([x], [acc], yerr=[[acc - 100 * low], [100 * high - acc]], fmt=MARKERS[i % len(MARKERS)],
                        color=colors[i % len(colors)], ms=8, capsize=3, label=v["name"], alpha=0.85)
        ax.set_xlabel(label)
        ax.set_ylabel("eval accuracy (%, 95% CI)")
        ax.set_xlim(left=0, right=ax.get_xlim()[1] * 1.05)
        ax.grid(alpha=0.3)
    axes[0].set_title("accuracy vs size")
    axes[1].set_title("accuracy vs latency")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), frameon=False)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95 if title else 1))
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)


def write_report(directory: Path, variants: list[dict[str, Any]], *, threads: int, options: dict[str, Any],
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``report.json`` and ``report.png`` into ``directory``; returns the report."""
    m = machine()
    report = {"variants": variants, "threads": threads,
              "eval_examples": variants[0].get("examples") if variants else 0, "machine": m,
              "accuracy_interval": "95% Wilson score interval", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "options": options, "onnxruntime_session": ORT_SESSION_SETTINGS, **(extra or {})}
    plot(directory / "report.png", variants, threads,
         title=f"{m['cpu']}, int8 kernels {m['int8_isa']}; {report['eval_examples']} eval examples")
    text = json.dumps(report, indent=1, default=str)
    atomic_write(directory / "report.json", lambda tmp: Path(tmp).write_text(text))
    return report


__all__ = ["add_ratios", "int8_isa", "machine", "plot", "print_table", "speedup_baseline", "wilson_interval",
           "write_report"]
