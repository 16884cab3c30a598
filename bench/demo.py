"""The demo benchmark: ``headrace demo`` end to end, timed, with its targets checked.

Runs ``headrace demo`` (default: 5,000 real-photo JPEGs in class folders -> ``headrace convert`` (Apache
Beam) -> 16 + 2 TFRecord shards -> small ResNet-18 at 96x96, 3 epochs, 384 MiB budget) in a subprocess
and prints each figure next to its target (run it with the Python that has ``headrace[beam]``):

- wall time of the whole command <= 600 s on a 2-core machine;
- final accuracy > 50% (chance: 1/12 = 8.3%);
- peak RSS <= base RSS + memory budget (the process's ``VmHWM`` vs the RSS before data and training).

Usage: ``python bench/demo.py [--images N --epochs E --output DIR]`` (other ``headrace demo`` options pass
through). Writes ``bench/results/demo.json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from headrace._machine import machine_line


def main(argv: list[str]) -> int:
    print(machine_line(), flush=True)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "headrace.cli", "demo", *argv], capture_output=True,
                          text=True, timeout=1800)
    wall = time.perf_counter() - t0
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        return done.returncode
    r = json.loads(done.stdout.strip().splitlines()[-1])
    limit = r["base_rss_bytes"] + r["memory_budget_bytes"]
    checks = [
        ("wall time", f"{wall:.0f} s", "<= 600 s", wall <= 600),
        ("accuracy", f"{100 * r['accuracy']:.1f}%", "> 50%", r["accuracy"] > 0.5),
        ("peak RSS", f"{r['peak_rss_bytes'] / 2**20:.0f} MiB", f"<= base + budget = {limit / 2**20:.0f} MiB",
         r["peak_rss_bytes"] <= limit),
        ("throughput", f"{r['images_per_s']:.1f} images/s", "(reported)", True),
    ]
    for name, value, target, ok in checks:
        print(f"{name:>11}: {value:>14}  target {target:<34} {'ok' if ok else 'MISSED'}")
    out = Path(__file__).with_name("results") / "demo.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({**r, "wall_s": round(wall, 1), "args": argv}, indent=1))
    return 0 if all(ok for *_, ok in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
