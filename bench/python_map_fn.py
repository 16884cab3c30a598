"""The GIL-bound map function of ``bench/python_map.py`` and its timing rule, with numpy as the only import:
``bench/peers.py`` runs the same function under tf.data and Grain, in environments that have no headrace."""

from __future__ import annotations

import time

import numpy as np

WARMUP = 0.1


def image(i: int) -> np.ndarray:
    return np.random.default_rng(int(i)).integers(0, 256, (64, 64, 3), dtype=np.uint8)


def tone_curve(img: np.ndarray) -> np.ndarray:
    """Pure Python over every pixel (holds the GIL): gamma-like curve and a running checksum."""
    rows = img.tolist()
    out = []
    for row in rows:
        new_row = []
        for r, g, b in row:
            y = (r * 299 + g * 587 + b * 114) // 1000
            k = (y * y) // 255
            new_row.append((min(255, r + k // 4), min(255, g + k // 4), min(255, b + k // 8)))
        out.append(new_row)
    return np.asarray(out, dtype=np.uint8)


def make_and_curve(i):
    return tone_curve(image(int(i)))


def timed(iterable, n: int) -> tuple[int, float]:
    """Elements and seconds after the first ``WARMUP * n`` elements."""
    it = iter(iterable)
    for _ in range(int(n * WARMUP)):
        next(it)
    t0 = time.perf_counter()
    count = sum(1 for _ in it)
    return count, time.perf_counter() - t0
