"""Run a reader in a child process and measure its RSS growth from outside (psutil, with its children).

The child (``code``, run with ``python -c code *args`` and this checkout's ``src`` first on ``PYTHONPATH``)
prints ``ready``, waits for a line on stdin, does its work and prints one line of JSON; RSS is sampled every
2 ms between the two lines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import psutil

MiB = 1024**2


_READER = r"""
import json, sys
import headrace as hr
from headrace.io import {reader}
path, budget, batch_size = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
ds = {make}.with_options(hr.Options(memory_budget=budget))
print("ready", flush=True)
sys.stdin.readline()
out = {{"rows": 0, "error": None}}
try:
    with iter(ds) as it:
        for el in it:
            out["rows"] += len({rows}) if batch_size else 1
        stats = it.memory_stats()
    out.update(peak=stats["peak_bytes"], overdraft=stats["overdraft_bytes"],
               buffers=max((v["peak_bytes"] for k, v in stats["stages"].items() if k.endswith("buffers")), default=0))
except hr.MemoryBudgetError as e:
    out["error"] = str(e)
print(json.dumps(out), flush=True)
"""


def reader_child(reader: str, make: str, rows: str) -> str:
    """The child code of a reader test: ``make`` builds ``reader``'s dataset from ``path`` and ``batch_size``
    (argv: path, budget bytes, JSON batch size), ``rows`` counts the rows of a batch ``el``; it prints rows
    read, tracked peak, overdraft, the ``buffers`` account's peak, or the MemoryBudgetError's text."""
    return _READER.format(reader=reader, make=make, rows=rows)


def cap(budget: int) -> float:
    """The RSS growth allowed under ``budget``: 10 % over it plus 64 MiB of interpreter and library slack."""
    return budget * 1.1 + 64 * MiB


def run_child(code: str, *args: str) -> tuple[dict, int]:
    """(the child's JSON result, its RSS growth from 'ready' to the end)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                                       os.environ.get("PYTHONPATH", "")]))
    child = subprocess.Popen([sys.executable, "-c", code, *args],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "ready"
        proc = psutil.Process(child.pid)

        def rss() -> int:
            total = 0
            for p in [proc, *proc.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            return total

        base = rss()
        peak = [base]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.002):
                peak[0] = max(peak[0], rss())

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        child.stdin.write("go\n")
        child.stdin.flush()
        line = child.stdout.readline()
        done.set()
        sampler.join(5)
        assert child.wait(timeout=60) == 0
        return json.loads(line), peak[0] - base
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
