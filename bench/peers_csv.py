"""The CSV workload of ``bench/peers.py``: ``CsvDataset(4 typed columns) -> batch(1024)``, rows/s.

The data: one CSV file of ``rows`` records ``int32,int64,float32,string`` (``12,-483920117,0.618034,w417``) made
here. The contenders (each in a child process of its own, ``bench/peers_runs.py``):

- headrace: ``hr.io.CsvDataset(path, [np.int32, np.int64, np.float32, bytes]).batch(1024)``;
- tf.data: ``tf.data.experimental.CsvDataset(path, [tf.int32, tf.int64, tf.float32, tf.string]).batch(1024)``;
- plain Python: ``csv.reader`` over the file, the fields converted with ``int`` / ``float`` / ``encode`` and
  gathered into numpy arrays of 1,024 rows;
- DataLoader: an ``IterableDataset`` yielding those rows, ``batch_size=1024``, 0 workers (its default collate).

Target (issue 38): headrace >= 3.0x tf.data's rows/s.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

BATCH = 1024
WORKLOAD = ("rows_s", "rows/s", True, [
    ("headrace", "headrace", "headrace"), ("tfdata", "tf.data", "tf"), ("python", "plain Python csv loop", "headrace"),
    ("dataloader", "DataLoader(0 workers)", "headrace")])
TARGET = ("csv", "speed", "headrace", "tfdata", ">=", 3.0)


def prepare(workdir: Path, rows: int) -> dict[str, Any]:
    """Write the CSV file once (kept between runs) and return the contenders' parameters."""
    import numpy as np

    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"table-{rows}.csv"
    if not path.exists():
        rng = np.random.default_rng(0)
        a = rng.integers(-2**31, 2**31, rows)
        b = rng.integers(-2**40, 2**40, rows)
        c = rng.random(rows)
        d = rng.integers(0, 1000, rows)
        tmp = path.with_suffix(".tmp")
        with tmp.open("w") as f:
            f.writelines(f"{a[i]},{b[i]},{c[i]:.6f},w{d[i]}\n" for i in range(rows))
        tmp.rename(path)
    print(f"csv data: {rows:,} rows x 4 columns (int32, int64, float32, string), {path.stat().st_size / 1e6:.1f} MB "
          f"at {path}")
    return {"path": str(path), "rows": rows}


def _rows_per_s(batches: Any, rows: int) -> dict[str, Any]:
    t0, count = time.perf_counter(), 0
    for b in batches:
        count += len(b[0])
    if count != rows:
        raise RuntimeError(f"expected {rows} rows, got {count}")
    return {"rows_s": rows / (time.perf_counter() - t0)}


def csv_headrace(p: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    import headrace as hr

    return _rows_per_s(hr.io.CsvDataset(p["path"], [np.int32, np.int64, np.float32, bytes]).batch(BATCH), p["rows"])


def csv_tfdata(p: dict[str, Any]) -> dict[str, Any]:
    import tensorflow as tf

    ds = tf.data.experimental.CsvDataset(p["path"], [tf.int32, tf.int64, tf.float32, tf.string]).batch(BATCH)
    return _rows_per_s(ds.as_numpy_iterator(), p["rows"])


def _python_rows(path: str) -> Any:
    import csv

    with open(path, newline="") as f:
        for a, b, c, d in csv.reader(f):
            yield int(a), int(b), float(c), d.encode()


def csv_python(p: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    def batches() -> Any:
        rows: list[Any] = []
        for r in _python_rows(p["path"]):
            rows.append(r)
            if len(rows) == BATCH:
                yield _columns(rows, np)
                rows = []
        if rows:
            yield _columns(rows, np)

    return _rows_per_s(batches(), p["rows"])


def _columns(rows: list[Any], np: Any) -> tuple[Any, ...]:
    a, b, c, d = zip(*rows)
    return (np.array(a, np.int32), np.array(b, np.int64), np.array(c, np.float32), np.array(d, dtype=object))


def csv_dataloader(p: dict[str, Any]) -> dict[str, Any]:
    import torch.utils.data as tud

    class Rows(tud.IterableDataset):  # type: ignore[type-arg]
        def __iter__(self) -> Any:
            return _python_rows(p["path"])

    return _rows_per_s(tud.DataLoader(Rows(), batch_size=BATCH, num_workers=0, collate_fn=lambda b: list(zip(*b))),
                       p["rows"])
