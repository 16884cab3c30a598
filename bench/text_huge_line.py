"""A text file with one line larger than the memory budget: refused in one line, RSS within the budget.

The acceptance shape of issue 38: a 1 GB text file whose middle holds one 64 MiB line, read by
``TextLineDataset(path).batch(1024)`` under a 32 MiB budget in a child process. It must stop with a one-line
``MemoryBudgetError`` naming the file and the line, and the child's RSS growth (psutil, with its children,
sampled every 2 ms from before the first read) must stay within budget x 1.1 + 64 MiB. Prints the figure, the
limit and the machine. (``tests/io/test_text_reader.py`` checks a smaller shape on every run.)

    python bench/text_huge_line.py [--gb 1.0] [--line-mib 64] [--budget-mib 32] [--keep]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "io"))  # the child and the RSS sampling of tests/io/test_text_reader.py
sys.path.insert(0, str(REPO))

from rss_child import cap, run_child  # noqa: E402

from headrace._machine import machine_line  # noqa: E402
from tests.io.test_text_reader import HUGE_LINE_CHILD  # noqa: E402

MiB = 1024**2


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
        out, growth = run_child(HUGE_LINE_CHILD, str(path), str(budget), "1024")
        limit = cap(budget)
        named = out["error"] is not None and f"line {number} of" in out["error"] and str(path) in out["error"]
        print(f"read {out['rows']:,} lines in {time.perf_counter() - t:.1f} s; error: {out['error']}")
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
