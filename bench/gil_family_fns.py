"""The generated family of GIL-bound map functions of ``bench/gil_family.py``: stdlib and numpy only, so
worker processes (headrace's, a bare ``multiprocessing.Pool``'s, the DataLoader's) import them cheaply.

Each function takes an element index and a *work* count (loop rounds) and returns a small result; the
bench calibrates *work* so one call takes the wanted milliseconds on this machine.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

_WORD = re.compile(r"[a-z]+")
_TEXT = ("the quick brown fox jumps over the lazy dog while a pipeline reads tokens and counts words "
         "so that every call holds the interpreter lock from its first to its last bytecode ") * 2


def arithmetic(i: int, work: int) -> int:
    """A pure-Python integer loop."""
    acc = i
    for k in range(work * 100):
        acc = (acc * 1103515245 + k) % 2147483648
    return acc


def words(i: int, work: int) -> int:
    """str, dict and regex: lower-case, split with a regex, count words in a dict."""
    counts: dict[str, int] = {}
    for k in range(work):
        for w in _WORD.findall(f"{i} {k} {_TEXT}".lower()):
            counts[w] = counts.get(w, 0) + 1
    return len(counts)


def json_records(i: int, work: int) -> int:
    """json dumps / loads of small records."""
    total = 0
    for k in range(work):
        rec = {"id": i, "k": k, "name": f"user-{i}-{k}", "tags": ["a", "b", str(k)], "score": k * 0.5}
        total += len(json.loads(json.dumps(rec))["tags"])
    return total


SHAPES: dict[str, Callable[[int, int], int]] = {"arithmetic": arithmetic, "words": words, "json": json_records}


def calibrate(shape: str, target_ms: float) -> int:
    """The *work* count that makes one call of ``shape`` take about ``target_ms`` here (median of 5 calls)."""
    fn = SHAPES[shape]
    work = 1
    while True:
        t0 = time.perf_counter()
        fn(0, work)
        dt = time.perf_counter() - t0
        if dt >= 0.002:
            break
        work *= 2
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn(0, work)
        samples.append(time.perf_counter() - t0)
    per_work = sorted(samples)[2] / work
    return max(1, round(target_ms / 1000 / per_work))


class Call:
    """``fn(i, work)`` as a picklable one-argument function."""

    def __init__(self, shape: str, work: int) -> None:
        self.shape, self.work = shape, work

    def __call__(self, i: int) -> int:
        return SHAPES[self.shape](int(i), self.work)


class Items:
    """A map-style dataset of ``call(i)`` for ``i < n`` (what a DataLoader indexes)."""

    def __init__(self, call: Call, n: int) -> None:
        self.call, self.n = call, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return self.call(i)
