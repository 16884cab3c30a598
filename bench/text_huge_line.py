"""A text file with one line larger than the memory budget: refused in one line, RSS within the budget.

The acceptance shape of issue 38: a 1 GB text file whose middle holds one 64 MiB line, read by
``TextLineDataset(path).batch(1024)`` under a 32 MiB budget in a child process. It must stop with a one-line
``MemoryBudgetError`` naming the file and the line, and the child's RSS growth (psutil, with its children,
sampled every 2 ms from before the first read) must stay within budget x 1.1 + 64 MiB. Prints the figure, the
limit and the machine. (``tests/io/test_text.py`` checks a smaller shape on every run.)

    python bench/text_huge_line.py [--gb 1.0] [--line-mib 64] [--budget-mib 32] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from headrace._machine import machine_line

MiB = 1024**2
REPO = Path(__file__).resolve().parents[1]
_CHILD = r"""
import json, sys
import headrace as hr
path, budget = sys.argv[1], int(sys.argv[2])
ds = hr.io.TextLineDataset(path).batch(1024).with_options(hr.Options(memory_budget=budget))
print("ready", flush=True)
sys.stdin.readline()
out = {"lines": 0, "error": None}
try:
    for b in ds:
        out["lines"] += len(b)
except hr.MemoryBudgetError as e:
    out["error"] = str(e)
print(json.dumps(out), flush=True)
"""


def write_file(path: Path, total: int, line: int) -> int:
    """Short lines around one ``line``-byte line in the middle; returns that line's number (1-based)."""
    block = b"".join(b"line %08d of the text around the long one\n" % i for i in range(20000))
    half = (total - line) // 2
    n = 0
    with open(path, "wb") as f:
        written = 0
        while written < half:
            f.write(block)
            written += len(block)
            n += 20000
        f.write(b"x" * line + b"\n")
        while written < total - line:
            f.write(block)
            written += len(block)
    return n + 1


def run(path: Path, budget: int) -> tuple[dict, int]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(path), str(budget)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None and child.stdin is not None
    if child.stdout.readline().strip() != "ready":
        raise RuntimeError("the child did not start")
    proc = psutil.Process(child.pid)

    def rss() -> int:
        total = 0
        for p in [proc, *proc.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    base, peak, done = rss(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss())
            done.wait(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    child.stdin.write("go\n")
    child.stdin.flush()
    line = child.stdout.readline()
    done.set()
    sampler.join(5)
    child.wait(60)
    return json.loads(line), peak[0] - base


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--line-mib", type=int, default=64)
    ap.add_argument("--budget-mib", type=int, default=32)
    ap.add_argument("--keep", action="store_true", help="keep the file (in the temp directory)")
    args = ap.parse_args()
    print(machine_line())
    budget = args.budget_mib * MiB
    path = Path(tempfile.gettempdir()) / f"headrace-huge-line-{args.gb}g-{args.line_mib}m.txt"
    t = time.perf_counter()
    number = write_file(path, int(args.gb * 1e9), args.line_mib * MiB)
    print(f"file: {path} ({path.stat().st_size / 1e9:.2f} GB, line {number} is {args.line_mib} MiB), written in "
          f"{time.perf_counter() - t:.1f} s")
    try:
        t = time.perf_counter()
        out, growth = run(path, budget)
        limit = budget * 1.1 + 64 * MiB
        named = out["error"] is not None and f"line {number} of" in out["error"] and str(path) in out["error"]
        print(f"read {out['lines']:,} lines in {time.perf_counter() - t:.1f} s; error: {out['error']}")
        print(f"RSS growth {growth / MiB:.1f} MiB, limit {limit / MiB:.1f} MiB (budget {args.budget_mib} MiB x 1.1 "
              f"+ 64 MiB): {'OK' if growth <= limit else 'OVER'}; refusal names the file and line: "
              f"{'OK' if named else 'NO'}; one line: {'OK' if named and chr(10) not in out['error'] else 'NO'}")
        if growth > limit or not named:
            sys.exit(1)
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
