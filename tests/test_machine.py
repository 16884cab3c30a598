"""Figures name the machine they were measured on, read at run time: ``headrace._machine`` and every bench."""

from __future__ import annotations

import re
from pathlib import Path

from headrace._machine import SIMD_FLAGS, machine_info, machine_line

REPO = Path(__file__).resolve().parents[1]  # (not from conftest: tests/service has a conftest of its own)


def test_machine_info_reads_the_cpu_and_its_flags_at_run_time() -> None:
    m = machine_info()
    assert m["cpu"] and isinstance(m["cpu"], str)
    assert set(m["simd"]) <= set(SIMD_FLAGS) and m["simd"] == [f for f in SIMD_FLAGS if f in m["simd"]]
    cpuinfo = Path("/proc/cpuinfo").read_text()
    for flag in m["simd"]:
        assert re.search(rf"\b{flag}\b", cpuinfo), flag
    assert 1 <= m["usable_cpus"] <= m["cpu_count"] and len(m["load_average"]) == 3
    line = machine_line(m)
    assert line.startswith(f"machine: {m['cpu']} (") and f"{m['usable_cpus']} CPUs" in line


def test_every_benchmark_prints_the_machine_first() -> None:
    for bench in sorted((REPO / "bench").glob("*.py")):
        text = bench.read_text()
        if "def main(" not in text:
            continue  # a helper the benchmarks import or start (bench/peers_runs.py, peers_envs.py, python_map_fn.py)
        main = text[text.index("def main("):]
        first_print = main.index("print(")
        assert main[first_print:].startswith("print(machine_line()"), f"{bench.name}: print machine_line() first"
