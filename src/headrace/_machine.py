"""Where a figure was measured, read at run time: the CPU model and the instruction-set extensions that change
the speed of decoding, numpy and int8 kernels, cores, load, Python and numpy versions.

Every benchmark in ``bench/`` prints :func:`machine_line` first and stores :func:`machine_info` with its
results, so a figure in the docs names the machine it came from (never a typed claim about hardware).
"""

from __future__ import annotations

import os
import platform
from typing import Any

SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni",
              "amx_tile", "amx_int8", "amx_bf16", "asimd", "sve")
"""The ``/proc/cpuinfo`` flags reported (x86 and Arm): those that select different kernels in the libraries we
measure (libjpeg-turbo / OpenCV SIMD paths, numpy's dispatch, ONNX Runtime's int8 kernels)."""


def _cpuinfo() -> tuple[str | None, set[str]]:
    model: str | None = None
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if model is None and key in ("model name", "Model", "cpu model"):
                    model = value.strip()
                elif not flags and key in ("flags", "Features"):
                    flags = set(value.split())
    except OSError:  # not Linux: the platform module's answer
        pass
    return model, flags


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity mask; ``os.cpu_count()`` where there is none): what
    AUTOTUNE scales to and what the benchmarks report."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def machine_info() -> dict[str, Any]:
    """``{"cpu", "simd", "arch", "system", "cpu_count", "usable_cpus", "load_average", "python", "numpy"}``:
    the CPU model string, the present :data:`SIMD_FLAGS` (in that order), ``platform.machine()``,
    ``platform.system()``, ``os.cpu_count()``, the CPUs this process may run on, the 1/5/15-minute load
    averages, and versions."""
    import numpy as np

    model, flags = _cpuinfo()
    usable = cpu_count()
    return {"cpu": model or platform.processor() or platform.machine(),
            "simd": [f for f in SIMD_FLAGS if f in flags], "arch": platform.machine(), "system": platform.system(),
            "cpu_count": os.cpu_count(), "usable_cpus": usable,
            "load_average": [round(v, 2) for v in os.getloadavg()], "python": platform.python_version(),
            "numpy": np.__version__}


def machine_line(info: dict[str, Any] | None = None) -> str:
    """:func:`machine_info` in one line, e.g. ``machine: AMD EPYC 9B14 (x86_64; avx2 avx512f ...), 2 CPUs,
    load 0.31 0.40 0.52, Linux, Python 3.11.7, numpy 2.4.6``."""
    m = info or machine_info()
    simd = " ".join(m["simd"]) or "no SIMD flags read"
    load = " ".join(f"{v:.2f}" for v in m["load_average"])
    return (f"machine: {m['cpu']} ({m['arch']}; {simd}), {m['usable_cpus']} CPUs, load {load}, {m['system']}, "
            f"Python {m['python']}, numpy {m['numpy']}")
