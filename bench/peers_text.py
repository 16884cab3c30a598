"""The ``text`` workload of ``bench/peers.py``: lines/s of ``TextLineDataset(8 GZIP files) -> batch(1024)``.

Data: 8 gzip files of short English-like lines (3 to 14 words, ~45 bytes; ``--quick``: 50,000 lines a file,
full: 250,000), written once into the work directory. Contenders, each counting the lines of every batch:

- headrace: ``headrace.io.TextLineDataset(files, compression_type="GZIP").batch(1024)``;
- tf.data: ``tf.data.TextLineDataset(files, compression_type="GZIP").batch(1024)`` through ``as_numpy_iterator``;
- plain Python: ``for line in gzip.open(f)`` over the files, lines gathered into lists of 1024 (``rstrip``'d);
- DataLoader: an ``IterableDataset`` yielding the lines of ``gzip.open``, ``batch_size=1024``,
  ``collate_fn=list``, 0 workers.

Target (issue 38): headrace >= 2.0x tf.data. This module is imported by ``bench/peers.py`` (``prepare``,
``WORKLOAD``, ``TARGET``) and, in the child processes, by ``bench/peers_runs.py`` (``text_<contender>``; it
has no headrace import at the top: ``.venv-tf`` has no headrace).
"""

from __future__ import annotations

import gzip
import random
import time
from pathlib import Path
from typing import Any

FILES = 8
BATCH = 1024
LINES = {"full": 250_000, "quick": 50_000}
WORKLOAD = ("lines_s", "lines/s", True, [
    ("headrace", "headrace", "headrace"), ("tfdata", "tf.data", "tf"), ("python", "plain Python gzip loop", "headrace"),
    ("dataloader", "DataLoader(0 workers)", "headrace")])
TARGET = ("text", "speed", "headrace", "tfdata", ">=", 2.0)
_WORDS = [w.encode() for w in ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs",
                                "far", "away", "from", "here"]]


def prepare(per_file: int, workdir: Path) -> dict[str, Any]:
    """The files (``per_file`` lines each, written once) and the line count, for the children."""
    d = workdir / f"text-{FILES}x{per_file}"
    d.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    paths = []
    for i in range(FILES):
        p = d / f"part-{i}.txt.gz"
        if not p.exists():
            lines = (b" ".join(rng.choice(_WORDS) for _ in range(rng.randrange(3, 15))) for _ in range(per_file))
            tmp = p.with_suffix(".tmp")
            tmp.write_bytes(gzip.compress(b"\n".join(lines) + b"\n", 6))
            tmp.rename(p)
        paths.append(str(p))
    size = sum(Path(p).stat().st_size for p in paths)
    print(f"text data: {FILES} GZIP files of {per_file:,} lines ({size / 1e6:.1f} MB compressed) in {d}")
    return {"files": paths, "lines": FILES * per_file}


def _lines_per_s(batches: Any, lines: int) -> dict[str, Any]:
    t = time.perf_counter()
    n = sum(len(b) for b in batches)
    dt = time.perf_counter() - t
    if n != lines:
        raise RuntimeError(f"read {n} lines, expected {lines}")
    return {"lines_s": n / dt, "lines": n, "seconds": dt}


def text_headrace(p: dict[str, Any]) -> dict[str, Any]:
    import headrace as hr

    return _lines_per_s(hr.io.TextLineDataset(p["files"], compression_type="GZIP").batch(BATCH), p["lines"])


def text_tfdata(p: dict[str, Any]) -> dict[str, Any]:
    import tensorflow as tf

    ds = tf.data.TextLineDataset(p["files"], compression_type="GZIP").batch(BATCH)
    return _lines_per_s(ds.as_numpy_iterator(), p["lines"])


def _python_lines(files: list[str]) -> Any:
    for f in files:
        with gzip.open(f) as lines:
            for line in lines:
                yield line.rstrip(b"\r\n")


def text_python(p: dict[str, Any]) -> dict[str, Any]:
    def batches() -> Any:
        batch: list[bytes] = []
        for line in _python_lines(p["files"]):
            batch.append(line)
            if len(batch) == BATCH:
                yield batch
                batch = []
        if batch:
            yield batch

    return _lines_per_s(batches(), p["lines"])


def text_dataloader(p: dict[str, Any]) -> dict[str, Any]:
    import torch.utils.data as tud

    class Lines(tud.IterableDataset):
        def __iter__(self) -> Any:
            return _python_lines(p["files"])

    return _lines_per_s(tud.DataLoader(Lines(), batch_size=BATCH, collate_fn=list, num_workers=0), p["lines"])
