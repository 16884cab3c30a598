"""TFRecord and tf.train.Example throughput.

Targets (issue 3):
- raw read with both CRC32C checks, records of ~100 KB: >= 1.0 GB/s on one core;
- ``parse_example`` on a batch clearly faster per record than ``parse_single_example``.

Measures, on one core (single-threaded):
- read: ``TFRecordDataset`` over a file of 100 KB records (GB/s, records/s), and of 100-byte records;
- write: ``TFRecordWriter`` on the same records;
- parse: a 2-feature image record (~50 KB JPEG-sized bytes + int64 label) and a 20-feature tabular
  record, ``parse_single_example`` per record vs ``parse_example`` on batches of 64, in microseconds per
  record, next to protobuf's own ``Example.FromString`` on the same bytes (the floor for anything built on
  protobuf) and to a hand-written pure-Python wire decoder (to decide protobuf vs hand-written).

Usage: ``python bench/tfrecord.py [--mb 200] [--out bench/results/tfrecord.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from headrace._machine import machine_info, machine_line
from headrace.io import TFRecordDataset, TFRecordWriter
from headrace.io import example as ex
from headrace.io._proto import messages as pb

TARGET_READ_GB_S = 1.0
BATCH = 64


def best_of(fn: Callable[[], Any], repeats: int = 3) -> float:
    """Fastest wall time of ``repeats`` runs, seconds."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def bench_io(directory: Path, record_bytes: int, total_mb: int) -> dict[str, float]:
    n = max(1, total_mb * 1_000_000 // record_bytes)
    rng = np.random.default_rng(0)
    pool = [rng.bytes(record_bytes) for _ in range(16)]
    records = [pool[i % 16] for i in range(n)]
    path = str(directory / f"r{record_bytes}.tfrecord")

    def write() -> None:
        with TFRecordWriter(path) as w:
            for r in records:
                w.write(r)

    write_s = best_of(write, 2)
    ds = TFRecordDataset(path)
    count = sum(1 for _ in ds)  # warm the page cache
    if count != n:
        raise RuntimeError(f"read {count} records, wrote {n}")
    read_s = best_of(lambda: sum(1 for _ in ds))
    size = os.path.getsize(path)
    os.remove(path)
    return {"record_bytes": record_bytes, "records": n, "read_GB_s": size / read_s / 1e9,
            "read_records_s": n / read_s, "write_GB_s": size / write_s / 1e9, "write_records_s": n / write_s}


# ---- a hand-written wire decoder, for comparison only -----------------------------------------------------
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def hand_decode(buf: bytes) -> dict[str, Any]:
    """Example bytes -> {key: numpy values / list of bytes}; packed lists only (what TF writes)."""
    out: dict[str, Any] = {}
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = _varint(buf, pos)
        n, pos = _varint(buf, pos)
        if tag != 0x0A:
            pos += n
            continue
        fend = pos + n
        while pos < fend:
            _, pos = _varint(buf, pos)
            n2, pos = _varint(buf, pos)
            eend, key, span = pos + n2, "", (0, 0)
            while pos < eend:
                t3, pos = _varint(buf, pos)
                n3, pos = _varint(buf, pos)
                if t3 == 0x0A:
                    key = buf[pos:pos + n3].decode()
                elif t3 == 0x12:
                    span = (pos, pos + n3)
                pos += n3
            fp, fe = span
            if fp == fe:
                continue
            kind, fp = _varint(buf, fp)
            ln, fp = _varint(buf, fp)
            out[key] = _hand_list(buf, kind >> 3, fp, fp + ln)
    return out


def _hand_list(buf: bytes, kind: int, pos: int, end: int) -> Any:
    if kind == 1:  # bytes_list: repeated bytes
        items = []
        while pos < end:
            _, pos = _varint(buf, pos)
            n, pos = _varint(buf, pos)
            items.append(buf[pos:pos + n])
            pos += n
        return items
    if pos == end:
        return np.empty(0, np.float32 if kind == 2 else np.int64)
    _, pos = _varint(buf, pos)  # packed field tag
    n, pos = _varint(buf, pos)
    if kind == 2:
        return np.frombuffer(buf, "<f4", n // 4, pos)
    vals = []
    stop = pos + n
    while pos < stop:
        v, pos = _varint(buf, pos)
        vals.append(v - (1 << 64) if v >= 1 << 63 else v)
    return np.array(vals, np.int64)


# ---- parse benchmarks ---------------------------------------------------------------------------------------
def image_records(n: int) -> tuple[list[bytes], dict[str, Any]]:
    rng = np.random.default_rng(1)
    recs = [ex.encode({"image/encoded": rng.bytes(50_000), "label": int(rng.integers(1000))}) for _ in range(n)]
    return recs, {"image/encoded": ex.FixedLenFeature([], "string"), "label": ex.FixedLenFeature([], "int64")}


def tabular_records(n: int) -> tuple[list[bytes], dict[str, Any]]:
    rng = np.random.default_rng(2)
    recs, spec = [], {}
    for i in range(n):
        feats: dict[str, Any] = {}
        for j in range(8):
            feats[f"float_{j}"] = float(rng.random())
            feats[f"int_{j}"] = int(rng.integers(-(10**6), 10**6))
        feats |= {"vec": rng.random(16).astype(np.float32), "tags": ex.Int64List(rng.integers(0, 100, i % 4)),
                  "city": b"city-%d" % (i % 50), "country": b"xx"}
        recs.append(ex.encode(feats))
    for j in range(8):
        spec[f"float_{j}"] = ex.FixedLenFeature([], "float32")
        spec[f"int_{j}"] = ex.FixedLenFeature([], "int64")
    spec |= {"vec": ex.FixedLenFeature([16], "float32"), "tags": ex.VarLenFeature("int64"),
             "city": ex.FixedLenFeature([], "string"), "country": ex.FixedLenFeature([], "string")}
    return recs, spec


def each(items: list[Any], fn: Callable[[Any], Any]) -> None:
    for x in items:
        fn(x)


def bench_parse(name: str, recs: list[bytes], spec: dict[str, Any]) -> dict[str, Any]:
    n = len(recs)
    batches = [recs[i:i + BATCH] for i in range(0, n, BATCH)]
    # Both sides keep one batch of results alive at a time, as map(parse).batch(64) and
    # batch(64).map(parse_example) do (the single side is not even stacked into arrays).
    us = {
        "parse_single_example": best_of(lambda: each(batches, lambda b: [ex.parse_single_example(r, spec)
                                                                         for r in b])),
        f"parse_example(batch={BATCH})": best_of(lambda: each(batches, lambda b: ex.parse_example(b, spec))),
        "protobuf Example.FromString only": best_of(lambda: each(recs, pb.Example.FromString)),
        "hand-written Python decoder": best_of(lambda: each(recs, hand_decode)),
    }
    out = {k: v / n * 1e6 for k, v in us.items()}
    return {"record": name, "features": len(spec), "record_bytes": len(recs[0]), "us_per_record": out,
            "batch_speedup": out["parse_single_example"] / out[f"parse_example(batch={BATCH})"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=200, help="MB of records per read/write run")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "tfrecord.json"))
    args = ap.parse_args()
    print(machine_line(), flush=True)
    with tempfile.TemporaryDirectory() as d:
        io_results = [bench_io(Path(d), 100_000, args.mb), bench_io(Path(d), 100, max(1, args.mb // 10))]
    parse_results = [bench_parse("image (2 features)", *image_records(2048)),
                     bench_parse("tabular (20 features)", *tabular_records(4096))]
    for r in io_results:
        print(f"records of {r['record_bytes']:>7} B: read {r['read_GB_s']:.2f} GB/s "
              f"({r['read_records_s']:,.0f} rec/s), write {r['write_GB_s']:.2f} GB/s "
              f"({r['write_records_s']:,.0f} rec/s)")
    big = io_results[0]["read_GB_s"]
    print(f"raw read with CRC, 100 KB records: {big:.2f} GB/s (target >= {TARGET_READ_GB_S} GB/s on one core): "
          f"{'PASS' if big >= TARGET_READ_GB_S else 'FAIL'}")
    for r in parse_results:
        print(f"{r['record']}, {r['record_bytes']} B:")
        for k, v in r["us_per_record"].items():
            print(f"  {k:36s} {v:8.2f} us/record")
        print(f"  batched parse is {r['batch_speedup']:.1f}x faster per record than single")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": machine_info(),
                                          "io": io_results, "parse": parse_results}, indent=1))


if __name__ == "__main__":
    main()
