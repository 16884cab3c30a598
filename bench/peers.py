"""headrace beside its peers: the same workloads through headrace, tf.data, Grain and the PyTorch DataLoader in
one run, interleaved, plus the bare limit where one exists; the ratios with their acceptance targets.

Workloads (``--workloads``, all by default), the figure of each, and what each contender runs:

1. ``image``, img/s and peak RSS: the seed image pipeline on ``bench/image_pipeline.py``'s data (``--images``
   500x375 JPEGs made from real photographs, in 16 TFRecord shards of ``tf.train.Example``):

   - bare limit: the same decode + resize 224 + scale (``normalize``: float32 / 255) on the JPEG bytes in
     memory, in a plain thread pool (``image_pipeline.run_bare``);
   - headrace: list_files -> interleave(TFRecordDataset) -> map(parse + decode_and_resize 224 + normalize)
     -> shuffle(1000) -> batch(64) -> prefetch, budget 256 MiB (``image_pipeline.run_headrace``);
   - tf.data: the same with tf.io / tf.image ops, AUTOTUNE everywhere (``image_pipeline.run_tensorflow``);
   - DataLoader: a map-style dataset over the same shards (``headrace.io.TFRecordRandomAccess``, via ``.idx``
     files made here), the seeds' parse + decode function, ``shuffle=True``, batch 64, ``cpu_count`` workers;
   - Grain: ``MapDataset.source`` over the same random-access records -> global shuffle -> map(the same
     function) -> ``to_iter_dataset`` (Grain's default ``ReadOptions``: 16 threads, 500-element prefetch)
     -> batch(64).

   img/s is the steady rate (``image_pipeline._timed_epoch``): from the end of the first batch until 1,064
   images before the end of the epoch. A peer's shuffle buffer is filled before the first batch and drained
   from memory after the input ends; timed to the end of the epoch, tf.data's 1,000-image buffer made its last
   1,000 images free (1.29-1.32x its steady rate on 5,000 images, measured); the window times neither.
   ``--quick`` uses 2,560 images: well above the 1,000-element shuffle buffer, so the window is not empty.

   The bare limit's child also measures the **ceiling** (``bench/image_ceiling.py``): the CPU per image, on one
   thread, of the decode + resize + scale and of what every pipeline adds to it (reading the record, parsing the
   Example, stacking the image into its batch), hence the most any map -> shuffle -> batch pipeline can reach of
   the bare limit with no engine cost and every core busy. Each image target is printed with the share of the
   bare limit it asks and whether that is under the ceiling (not judged when the bare limit kept fewer than
   90% of the cores busy: a busy machine).

   ``folder``, img/s and peak RSS: the same work over the same JPEGs as a class-folder tree: headrace
   ``image_folder(image_size=(224, 224))`` (its parallel read + ``decode_and_resize``) -> normalize ->
   shuffle(1000) -> batch(64) -> prefetch (``image_pipeline.run_image_folder``); the DataLoader with 2 and with 3
   workers over a map-style dataset of the files doing the same read + ``decode_and_resize`` + ``normalize``
   (``shuffle=True``, batch 64). Targets: headrace >= 1.05x each.
2. ``overhead``, ns per element of ``range(n) -> map(x * 2) -> batch(32)``: a plain generator (the floor,
   ``bench/overhead.py``), headrace (``bench/overhead.py``), ``DataLoader(num_workers=0)`` over a map-style
   dataset returning ``i * 2``, tf.data (its map traced into a graph) and Grain's ``MapDataset`` (sequential).
3. ``gil``, elements/s of ``bench/python_map.py``'s pure-Python loop over a 64x64 image: sequential (a plain
   loop), headrace ``num_parallel_calls=AUTOTUNE`` with default Options, ``DataLoader`` with 2 workers, a bare
   ``multiprocessing.Pool`` (cpu_count workers, forkserver, ``imap`` chunks of 4: the bare limit), tf.data
   (``tf.numpy_function`` under AUTOTUNE) and Grain (``mp_prefetch`` with cpu_count worker processes). The first
   10% of the elements are not timed (worker start-up), the same for every contender.
4. ``parquet``, rows/s: a Parquet file written here with pyarrow (``--rows`` rows of int64, float64, float32,
   int32 and string columns, row groups of 65,536) -> a per-row Python map -> batch(256). headrace reads it
   with ``headrace.io.ParquetDataset`` (rows); the DataLoader with an ``IterableDataset`` over pyarrow's
   ``iter_batches().to_pylist()`` (0 workers); tf.data with ``from_generator`` over pyarrow's record batches
   (numpy columns) -> ``unbatch`` -> map in graph ops (no tensorflow-io: pyarrow is taken from headrace's
   venv, appended after TensorFlow's packages); Grain with ``grain.experimental.ParquetIterDataset``.
5. ``text``, lines/s: ``TextLineDataset(8 GZIP files) -> batch(1024)`` through headrace, tf.data, a plain Python
   ``gzip.open`` loop and the DataLoader (``bench/peers_text.py``).

Fairness: every contender runs in a child process of its own (a fresh interpreter: importing torch slows pure
Python by ~20%, TensorFlow's threads stay out of the others), one after another in each round, the contenders
in turn and the rounds repeated (``--rounds``); the median of a contender's rounds counts, and its peak RSS
is the largest over its rounds of the whole process tree (the child and its workers, psutil, sampled every
20 ms; interpreter and imports included). The load average before and after is printed: run it on a quiet
machine for figures that mean anything.

Environments: TensorFlow (tf.data) runs in ``.venv-tf`` (``tests/tf_env.py``), Grain in ``.venv-grain``
(``bench/grain-requirements.txt``), both made on first use by ``bench/peers_envs.py``; neither is a headrace
dependency. A peer that cannot be installed or fails to run is printed as such, with the reason.

    python bench/peers.py [--quick] [--workloads image,folder,overhead,gil,parquet,text,csv] [--rounds 3] [--out FILE]

Results go to ``bench/results/peers.json`` (git-ignored) with the machine line and every round.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import image_ceiling
import peers_csv
import peers_envs
import peers_text
import psutil

from headrace._machine import machine_info, machine_line

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
# workload -> (figure key, unit, higher is better, [(contender, display name, environment)])
WORKLOADS: dict[str, tuple[str, str, bool, list[tuple[str, str, str]]]] = {
    "image": ("img_s", "img/s", True, [
        ("bare", "bare limit (thread pool)", "headrace"), ("headrace", "headrace", "headrace"),
        ("tfdata", "tf.data", "tf"), ("dataloader", "DataLoader", "headrace"), ("grain", "Grain", "grain")]),
    "folder": ("img_s", "img/s", True, [
        ("headrace", "headrace", "headrace"), ("dataloader2", "DataLoader(2 workers)", "headrace"),
        ("dataloader3", "DataLoader(3 workers)", "headrace")]),
    "overhead": ("ns_per_element", "ns/element", False, [
        ("plain", "plain generator (floor)", "headrace"), ("headrace", "headrace", "headrace"),
        ("dataloader", "DataLoader(0 workers)", "headrace"), ("tfdata", "tf.data", "tf"),
        ("grain", "Grain", "grain")]),
    "gil": ("elem_s", "elements/s", True, [
        ("sequential", "sequential", "headrace"), ("headrace", "headrace AUTOTUNE", "headrace"),
        ("dataloader", "DataLoader(2 workers)", "headrace"), ("pool", "multiprocessing.Pool (bare limit)",
                                                               "headrace"),
        ("tfdata", "tf.data AUTOTUNE", "tf"), ("grain", "Grain mp_prefetch", "grain")]),
    "parquet": ("rows_s", "rows/s", True, [
        ("headrace", "headrace", "headrace"), ("dataloader", "DataLoader(0 workers)", "headrace"),
        ("tfdata", "tf.data", "tf"), ("grain", "Grain", "grain")]),
}
WORKLOADS["text"] = peers_text.WORKLOAD  # (bench/peers_text.py: TextLineDataset -> batch(1024))
# the acceptance targets: (workload, what, a, b, op, target): "speed" compares the figures (a's over b's, the
# inverse for ns/element: > 1 means a is faster), "rss" the peak RSS (a's over b's)
TARGETS = [
    ("image", "speed", "headrace", "bare", ">=", 0.80),
    ("image", "speed", "headrace", "tfdata", ">=", 1.05),
    ("image", "rss", "headrace", "tfdata", "<=", 0.35),
    ("folder", "speed", "headrace", "dataloader2", ">=", 1.05),
    ("folder", "speed", "headrace", "dataloader3", ">=", 1.05),
    ("parquet", "speed", "headrace", "dataloader", ">=", 1.0),
    ("overhead", "speed", "headrace", "dataloader", ">=", 1.0),
    ("gil", "speed", "headrace", "pool", ">=", 0.85),
    ("gil", "speed", "headrace", "dataloader", ">=", 1.0),
    peers_text.TARGET,
]
WORKLOADS["csv"] = peers_csv.WORKLOAD
TARGETS.append(peers_csv.TARGET)
RSS_RATIOS = {"image", "folder", "parquet"}  # memory tells something here: RSS ratios printed
SIZES = {"full": {"images": 5000, "n_overhead": 1_000_000, "n_gil": 1000, "rows": 2_000_000, "rounds": 3,
                  "text_lines": peers_text.LINES["full"]},
         "quick": {"images": 2560, "n_overhead": 100_000, "n_gil": 200, "rows": 200_000, "rounds": 2,
                   "text_lines": peers_text.LINES["quick"]}}
ROW_GROUP = 65_536
QUIET_SHARE = 0.9  # the bare limit keeps 1.93 of 2 cores busy on a quiet machine; below 90% others took cores


# ---- the environments and the data ----------------------------------------------------------------------
def environments(needed: set[str]) -> dict[str, dict[str, Any]]:
    """``{env: {"python": ..., "pythonpath": [...]}}`` or ``{env: {"unavailable": reason}}``."""
    both = [str(REPO / "src"), str(BENCH)]
    envs: dict[str, dict[str, Any]] = {"headrace": {"python": sys.executable, "pythonpath": both}}
    makers = {"tf": (peers_envs.tf_python, [str(BENCH)]), "grain": (peers_envs.grain_python, both)}
    for name, (make, path) in makers.items():
        if name in needed:
            try:
                envs[name] = {"python": make(), "pythonpath": path}
            except peers_envs.Unavailable as exc:
                envs[name] = {"unavailable": str(exc)}
    return envs


def make_parquet(path: Path, rows: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.exists() and pq.ParquetFile(path).metadata.num_rows == rows:
        return
    rng = np.random.default_rng(0)
    names = np.array([f"item-{i:x}" for i in range(1000)], dtype=object)
    table = pa.table({"id": np.arange(rows, dtype=np.int64), "x": rng.standard_normal(rows),
                      "y": rng.standard_normal(rows).astype(np.float32),
                      "label": rng.integers(0, 1000, rows).astype(np.int32),
                      "name": names[rng.integers(0, 1000, rows)]})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=ROW_GROUP)


def prepare(workloads: list[str], sizes: dict[str, Any], workdir: Path) -> dict[str, dict[str, Any]]:
    """Each workload's parameters for its children; the data written once into ``workdir``."""
    params: dict[str, dict[str, Any]] = {}
    if "image" in workloads or "folder" in workloads:
        import glob

        import image_pipeline as ip

        from headrace.io import build_index

        info = ip.make_data(workdir / f"images-{sizes['images']}", sizes["images"])
        for shard in sorted(glob.glob(info["shards"])):
            if not os.path.exists(shard + ".idx"):
                build_index(shard)
        params["image"] = params["folder"] = {"info": info}
        print(f"image data: {info['n']} JPEGs 500x375 q90, mean {info['mean_jpeg_bytes'] / 1e3:.1f} KB, "
              f"{ip.SHARDS} TFRecord shards in {Path(info['shards']).parent}, the same as a class-folder tree in "
              f"{info['folder']}")
    if "overhead" in workloads:
        params["overhead"] = {"n": sizes["n_overhead"]}
    if "gil" in workloads:
        params["gil"] = {"n": sizes["n_gil"]}
    if "parquet" in workloads:
        import pyarrow

        path = workdir / f"table-{sizes['rows']}.parquet"
        make_parquet(path, sizes["rows"])
        params["parquet"] = {"path": str(path), "rows": sizes["rows"],
                             "pyarrow_from": str(Path(pyarrow.__file__).resolve().parents[1])}
        print(f"parquet data: {sizes['rows']:,} rows x 5 columns (int64, float64, float32, int32, string), row "
              f"groups of {ROW_GROUP:,}, {path.stat().st_size / 1e6:.1f} MB at {path}")
    if "csv" in workloads:
        params["csv"] = peers_csv.prepare(workdir, sizes["rows"])
    if "text" in workloads:
        params["text"] = peers_text.prepare(sizes["text_lines"], workdir)
    return params


# ---- one contender in one child process ---------------------------------------------------------------------
def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass  # a worker that just exited
    return total


def _exception_line(stderr: str) -> str:
    """The traceback's exception line (Grain prints a note after it), else the last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()] or ["(no output)"]
    found = [line for line in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b", line)]
    return (found or lines)[-1][:300]


def run_child(env: dict[str, Any], workload: str, contender: str, params: dict[str, Any],
              timeout_s: float) -> dict[str, Any]:
    """Run ``peers_runs.WORKLOAD_CONTENDER`` in ``env``'s Python; its JSON result plus ``peak_rss_mb`` of the
    process tree, or ``{"error": why}``."""
    cmd = [env["python"], str(BENCH / "peers_runs.py"), workload, contender, json.dumps(params)]
    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(env["pythonpath"])}
    child_env.pop("VIRTUAL_ENV", None)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=child_env, cwd=REPO)
        peak, done = [0], threading.Event()

        def sample() -> None:
            try:
                ps = psutil.Process(proc.pid)
                while not done.is_set():
                    peak[0] = max(peak[0], _tree_rss(ps))
                    done.wait(0.02)
            except psutil.Error:
                pass

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            try:
                for p in psutil.Process(proc.pid).children(recursive=True):
                    p.kill()
            except psutil.Error:
                pass  # gone meanwhile
            proc.kill()
            proc.wait()
            rc = None
        done.set()
        sampler.join()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if rc is None:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    lines = stdout.strip().splitlines()
    if rc != 0 or not lines:
        return {"error": f"exit {rc}: {_exception_line(stderr)}", "stderr_tail": stderr[-3000:]}
    result = json.loads(lines[-1])
    result["peak_rss_mb"] = peak[0] / 1e6
    return result


# ---- the run, round by round ---------------------------------------------------------------------------------
def run_rounds(workloads: list[str], envs: dict[str, dict[str, Any]], params: dict[str, dict[str, Any]],
               rounds: int, timeout_s: float) -> dict[str, dict[str, list[dict[str, Any]]]]:
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {w: {} for w in workloads}
    for r in range(rounds):
        t = time.perf_counter()
        for w in workloads:
            for contender, _, env in WORKLOADS[w][3]:
                if "unavailable" in envs[env]:
                    continue
                runs[w].setdefault(contender, []).append(run_child(envs[env], w, contender, params[w], timeout_s))
        print(f"round {r + 1}/{rounds} done in {time.perf_counter() - t:.0f} s", flush=True)
    return runs


def summarize(workload: str, contenders: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per contender: the median figure over the rounds that worked, the worst peak RSS, or the first error."""
    key = WORKLOADS[workload][0]
    out: dict[str, dict[str, Any]] = {}
    for name, results in contenders.items():
        good = [r for r in results if "error" not in r]
        if not good:
            out[name] = {"error": results[0]["error"]}
            continue
        out[name] = {**good[len(good) // 2], "figure": statistics.median(r[key] for r in good),
                     "runs": [r[key] for r in good], "peak_rss_mb": max(r["peak_rss_mb"] for r in good),
                     "failed_rounds": len(results) - len(good)}
    return out


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def print_workload(workload: str, summary: dict[str, dict[str, Any]], envs: dict[str, dict[str, Any]]) -> None:
    _, unit, higher, contenders = WORKLOADS[workload]
    print(f"\n{workload}: {unit} ({'higher' if higher else 'lower'} is better), median of the rounds "
          f"(runs in brackets), peak RSS of the process tree (worst round)")
    for contender, label, env in contenders:
        s = summary.get(contender)
        if s is None:
            print(f"  {label:<36} not run: {env} unavailable: {envs[env]['unavailable']}")
        elif "error" in s:
            print(f"  {label:<36} FAILED: {s['error']}")
        else:
            extra = "".join(f", {k} {s[k]}" for k in ("executor", "workers", "threads") if k in s)
            failed = f", {s['failed_rounds']} round(s) failed" if s["failed_rounds"] else ""
            print(f"  {label:<36} {_fmt(s['figure']):>10} {unit} [{', '.join(_fmt(x) for x in s['runs'])}]  "
                  f"peak RSS {s['peak_rss_mb']:,.0f} MB{extra}{failed}")
    ceiling = summary.get("bare", {}).get("ceiling")
    if workload == "image" and ceiling:
        print(f"  {image_ceiling.line(ceiling)}")


def _ratio(summary: dict[str, dict[str, Any]], what: str, a: str, b: str, higher: bool) -> float | None:
    sa, sb = summary.get(a, {}), summary.get(b, {})
    if "figure" not in sa or "figure" not in sb:
        return None
    if what == "rss":
        return sa["peak_rss_mb"] / sb["peak_rss_mb"]
    return sa["figure"] / sb["figure"] if higher else sb["figure"] / sa["figure"]


def _reachable(summary: dict[str, dict[str, Any]], what: str, b: str, target: float) -> str | None:
    """For an image speed target: what it asks of the bare limit against this machine's ceiling
    (``image_ceiling``), when the bare limit measured one; else None."""
    ceiling = summary.get("bare", {}).get("ceiling")
    if what != "speed" or not ceiling or "figure" not in summary.get(b, {}):
        return None
    asked = target * summary[b]["figure"] / summary["bare"]["figure"]  # the target as a share of the bare limit
    if ceiling["bare_cores_busy"] < QUIET_SHARE * ceiling["cores"]:
        return (f"asks {asked:.2f} of the bare limit; the ceiling is not judged: the bare limit kept only "
                f"{ceiling['bare_cores_busy']:.2f} of {ceiling['cores']} cores busy, a busy machine")
    top = ceiling["every_core_busy"]
    return (f"asks {asked:.2f} of the bare limit; the ceiling here is {top:.2f}: "
            + ("reachable" if asked <= top else "NOT reachable by any pipeline that reads, parses and stacks"))


def ratios(summaries: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Issue 24's targets, then headrace against every other contender (no target)."""
    ops = {">=": lambda x, t: x >= t, "<=": lambda x, t: x <= t, ">": lambda x, t: x > t}
    rows = []
    for workload, what, a, b, op, target in TARGETS:
        if workload in summaries:
            value = _ratio(summaries[workload], what, a, b, WORKLOADS[workload][2])
            rows.append({"workload": workload, "what": what, "a": a, "b": b, "value": value,
                         "target": f"{op} {target:g}", "met": None if value is None else ops[op](value, target),
                         "reachable": _reachable(summaries[workload], what, b, target)})
    targeted = {(r["workload"], r["what"], r["b"]) for r in rows}
    for workload, summary in summaries.items():
        for b, _, _ in WORKLOADS[workload][3]:
            for what in ("speed", "rss") if workload in RSS_RATIOS else ("speed",):
                if b != "headrace" and (workload, what, b) not in targeted:
                    value = _ratio(summary, what, "headrace", b, WORKLOADS[workload][2])
                    rows.append({"workload": workload, "what": what, "a": "headrace", "b": b, "value": value,
                                 "target": None, "met": None})
    return rows


def print_ratios(rows: list[dict[str, Any]]) -> None:
    names = {w: {c: label for c, label, _ in spec[3]} for w, spec in WORKLOADS.items()}
    print("\nratios (speed: > 1 means headrace is faster; rss: headrace's peak RSS over the other's)")
    for r in rows:
        label = f"{r['workload']} {r['what']}: {names[r['workload']][r['a']]} / {names[r['workload']][r['b']]}"
        if r["value"] is None:
            verdict = "not evaluated (a contender has no figure)"
        elif r["target"] is None:
            verdict = f"{r['value']:.2f} (no target)"
        else:
            verdict = f"{r['value']:.2f}, target {r['target']}: {'MET' if r['met'] else 'NOT MET'}"
            if r.get("reachable"):
                verdict += f" ({r['reachable']})"
        if r["target"] is not None or r["value"] is not None:
            print(f"  {label:<68} {verdict}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes and 2 rounds: a smoke run, not figures")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated: " + ",".join(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=None, help="rounds of every contender (3; 2 with --quick)")
    ap.add_argument("--workdir", default=None, help="where the data is written and kept between runs")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per child process")
    ap.add_argument("--out", default=str(BENCH / "results" / "peers.json"))
    args = ap.parse_args()
    print(machine_line(), flush=True)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workload(s) {unknown}; choose from {','.join(WORKLOADS)}")
    sizes = dict(SIZES["quick" if args.quick else "full"])
    rounds = args.rounds or sizes["rounds"]
    envs = environments({env for w in workloads for _, _, env in WORKLOADS[w][3]})
    for name, env in envs.items():
        print(f"{name}: " + (f"UNAVAILABLE ({env['unavailable']}); its contenders are not run" if "unavailable"
                             in env else env["python"]))
    workdir = Path(args.workdir or Path(tempfile.gettempdir()) / "headrace-bench-peers")
    params = prepare(workloads, sizes, workdir)
    load0 = os.getloadavg()
    print(f"load average before: {load0[0]:.2f}; {rounds} round(s), contenders in turn", flush=True)
    runs = run_rounds(workloads, envs, params, rounds, args.timeout)
    load1 = os.getloadavg()
    summaries = {w: summarize(w, runs[w]) for w in workloads}
    for w in workloads:
        print_workload(w, summaries[w], envs)
    rows = ratios(summaries)
    print_ratios(rows)
    busy = max(load0[0], load1[0]) > 0.5 * (os.cpu_count() or 1)
    print(f"load average: {load0[0]:.2f} before, {load1[0]:.2f} after"
          + (" (a busy machine: these figures are noise)" if busy else ""))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "machine": {**machine_info(), "line": machine_line(), "load_before": load0[0], "load_after": load1[0]},
        "quick": args.quick, "sizes": sizes, "rounds": rounds, "params": params,
        "environments": envs, "runs": runs, "summaries": summaries, "ratios": rows}, indent=2, default=str))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
