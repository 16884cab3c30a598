"""The contenders of ``bench/peers.py``, one per call, each run in a child process of its own environment.

``python bench/peers_runs.py WORKLOAD CONTENDER PARAMS_JSON`` runs ``WORKLOAD_CONTENDER(params)`` and prints
its result as one JSON line. Imports are inside the functions: this module is loaded in headrace's venv, in
TensorFlow's ``.venv-tf`` (which has no headrace) and in ``.venv-grain``. Each result holds the workload's
figure (``img_s``, ``ns_per_element``, ``elem_s`` or ``rows_s``) and what else the contender tells.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from typing import Any

BATCH_OVERHEAD = 32
BATCH_PARQUET = 256


# ---- 1. the seed image pipeline: bench/image_pipeline.py's data, pipeline and timing ---------------------
def _image_pipeline() -> Any:
    """``bench/image_pipeline.py``, with the decoders imported before any thread uses them: ``headrace._deps.
    require`` hands out a module found in ``sys.modules`` even while another thread is still importing it, so
    threads that call ``decode_and_resize`` for the first time at once can meet a half-imported ``cv2``
    ("partially initialized module 'cv2' has no attribute 'resize'")."""
    import cv2  # noqa: F401
    import image_pipeline
    import simplejpeg  # noqa: F401

    return image_pipeline


def image_bare(p: dict[str, Any]) -> dict[str, Any]:
    """The bare limit, and (``image_ceiling``) the most any map -> shuffle -> batch pipeline reaches of it here."""
    import image_ceiling

    from headrace._machine import cpu_count

    result = _image_pipeline().run_bare(p["info"])
    return {**result, "ceiling": image_ceiling.measure(p["info"], result["cores_busy"], cpu_count())}


def image_headrace(p: dict[str, Any]) -> dict[str, Any]:
    return _image_pipeline().run_headrace(p["info"])


def image_tfdata(p: dict[str, Any]) -> dict[str, Any]:
    import image_pipeline as ip

    return ip.run_tensorflow(p["info"])


def _indexed_records(info: dict[str, Any]) -> Any:
    """The TFRecord shards as one random-access source (their ``.idx`` files are made by bench/peers.py)."""
    import glob

    from headrace.io import TFRecordRandomAccess

    return TFRecordRandomAccess(sorted(glob.glob(info["shards"])))


def image_dataloader(p: dict[str, Any]) -> dict[str, Any]:
    import torch.utils.data as tud

    from headrace._machine import cpu_count

    ip = _image_pipeline()
    source, fn = _indexed_records(p["info"]), ip._parse_fn(True)

    class Records(tud.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return len(source)

        def __getitem__(self, i: int) -> Any:
            return fn(source[i])

    return _timed_loader(Records(), cpu_count())


def _timed_loader(dataset: Any, workers: int) -> dict[str, Any]:
    """``dataset`` through a DataLoader (``shuffle=True``, seeded, batch 64, ``workers`` worker processes, one
    torch thread each), timed as every image contender is (``image_pipeline._timed_epoch``)."""
    import torch
    import torch.utils.data as tud

    ip = _image_pipeline()
    torch.set_num_threads(1)
    loader = tud.DataLoader(dataset, batch_size=ip.BATCH, shuffle=True, num_workers=workers,
                            generator=torch.Generator().manual_seed(0))
    return {**ip._timed_epoch(loader), "workers": workers}


def folder_headrace(p: dict[str, Any]) -> dict[str, Any]:
    """``image_folder(image_size=224)`` (its parallel read + ``decode_and_resize``) -> normalize -> shuffle ->
    batch -> prefetch, the seed pipeline's work over the class-folder tree."""
    return _image_pipeline().run_image_folder(p["info"])


def _folder_dataloader(p: dict[str, Any], workers: int) -> dict[str, Any]:
    """The same work in a DataLoader: a map-style dataset over the files (read, ``decode_and_resize`` 224,
    ``normalize``; the label from the class folder), ``shuffle=True``, batch 64, ``workers`` worker processes."""
    from pathlib import Path

    import torch.utils.data as tud

    from headrace import image as himg

    ip = _image_pipeline()
    paths = sorted(Path(p["info"]["folder"]).rglob("*.jpg"))
    classes = {c: i for i, c in enumerate(sorted({q.parent.name for q in paths}))}

    class Files(tud.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return len(paths)

        def __getitem__(self, i: int) -> Any:
            image = himg.decode_and_resize(paths[i].read_bytes(), ip.SIZE)
            return himg.normalize(image), classes[paths[i].parent.name]

    return _timed_loader(Files(), workers)


def folder_dataloader2(p: dict[str, Any]) -> dict[str, Any]:
    return _folder_dataloader(p, 2)


def folder_dataloader3(p: dict[str, Any]) -> dict[str, Any]:
    return _folder_dataloader(p, 3)


def image_grain(p: dict[str, Any]) -> dict[str, Any]:
    import grain

    ip = _image_pipeline()
    ds = (grain.MapDataset.source(_indexed_records(p["info"])).shuffle(seed=0).map(ip._parse_fn(True))
          .to_iter_dataset(grain.ReadOptions()).batch(ip.BATCH))
    return ip._timed_epoch(ds)


# ---- 2. per-element overhead: range(n) -> map(x * 2) -> batch(32) ----------------------------------------
def _ns_per_element(batches: Any, n: int) -> dict[str, Any]:
    t0, count = time.perf_counter(), 0
    for b in batches:
        count += len(b)
    elapsed = time.perf_counter() - t0
    if count != n:
        raise RuntimeError(f"expected {n} elements, got {count}")
    return {"ns_per_element": elapsed / n * 1e9}


def overhead_plain(p: dict[str, Any]) -> dict[str, Any]:
    import overhead

    return {"ns_per_element": overhead.run_plain(p["n"])}


def overhead_headrace(p: dict[str, Any]) -> dict[str, Any]:
    import overhead

    return {"ns_per_element": overhead.run_headrace(p["n"])}


def overhead_dataloader(p: dict[str, Any]) -> dict[str, Any]:
    import torch.utils.data as tud

    class Doubled(tud.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return p["n"]

        def __getitem__(self, i: int) -> int:
            return i * 2

    return _ns_per_element(tud.DataLoader(Doubled(), batch_size=BATCH_OVERHEAD, num_workers=0), p["n"])


def overhead_tfdata(p: dict[str, Any]) -> dict[str, Any]:
    import tensorflow as tf

    ds = tf.data.Dataset.range(p["n"]).map(lambda x: x * 2).batch(BATCH_OVERHEAD)
    return _ns_per_element(ds.as_numpy_iterator(), p["n"])


def overhead_grain(p: dict[str, Any]) -> dict[str, Any]:
    import grain

    return _ns_per_element(grain.MapDataset.range(p["n"]).map(lambda x: x * 2).batch(BATCH_OVERHEAD), p["n"])


# ---- 3. a GIL-bound map: bench/python_map.py's pure-Python function ---------------------------------------
def _rate(iterable: Any, n: int, **extra: Any) -> dict[str, Any]:
    from python_map_fn import timed

    count, dt = timed(iterable, n)
    return {"elem_s": count / dt, **extra}


def gil_sequential(p: dict[str, Any]) -> dict[str, Any]:
    from python_map_fn import make_and_curve

    return _rate(map(make_and_curve, range(p["n"])), p["n"])


def gil_headrace(p: dict[str, Any]) -> dict[str, Any]:
    import python_map

    import headrace as hr

    rate, chosen = python_map.rate_headrace(p["n"], hr.AUTOTUNE, None)
    return {"elem_s": rate, "executor": chosen}


def gil_dataloader(p: dict[str, Any]) -> dict[str, Any]:
    import python_map

    return {"elem_s": python_map.rate_dataloader(p["n"], 2), "workers": 2}


def gil_pool(p: dict[str, Any]) -> dict[str, Any]:
    import multiprocessing as mp
    import os

    from python_map_fn import make_and_curve

    workers = len(os.sched_getaffinity(0))
    with mp.get_context("forkserver").Pool(workers) as pool:
        return _rate(pool.imap(make_and_curve, range(p["n"]), chunksize=4), p["n"], workers=workers)


def gil_tfdata(p: dict[str, Any]) -> dict[str, Any]:
    import tensorflow as tf
    from python_map_fn import make_and_curve

    ds = (tf.data.Dataset.range(p["n"])
          .map(lambda i: tf.numpy_function(make_and_curve, [i], tf.uint8), num_parallel_calls=tf.data.AUTOTUNE)
          .prefetch(tf.data.AUTOTUNE))
    return _rate(ds.as_numpy_iterator(), p["n"])


def gil_grain(p: dict[str, Any]) -> dict[str, Any]:
    import os

    import grain
    from python_map_fn import make_and_curve

    workers = len(os.sched_getaffinity(0))
    ds = (grain.MapDataset.range(p["n"]).map(make_and_curve).to_iter_dataset()
          .mp_prefetch(grain.MultiprocessingOptions(num_workers=workers)))
    return _rate(ds, p["n"], workers=workers)


# ---- 4. a Parquet tabular pipeline: rows -> map -> batch(256) ----------------------------------------------
def row_fn(r: dict[str, Any]) -> dict[str, Any]:
    """The per-row map, the same Python for every contender but tf.data (whose map is graph ops)."""
    return {"f": r["x"] * 2.0 + r["y"], "label": r["label"], "n": len(r["name"])}


def _rows_per_s(batches: Any, rows: int) -> dict[str, Any]:
    t0, count = time.perf_counter(), 0
    for b in batches:
        count += len(b["f"])
    if count != rows:
        raise RuntimeError(f"expected {rows} rows, got {count}")
    return {"rows_s": rows / (time.perf_counter() - t0)}


def parquet_headrace(p: dict[str, Any]) -> dict[str, Any]:
    from headrace.io import ParquetDataset

    return _rows_per_s(ParquetDataset(p["path"]).map(row_fn).batch(BATCH_PARQUET), p["rows"])


def parquet_dataloader(p: dict[str, Any]) -> dict[str, Any]:
    import pyarrow.parquet as pq
    import torch.utils.data as tud

    class Rows(tud.IterableDataset):  # type: ignore[type-arg]
        def __iter__(self) -> Any:
            for batch in pq.ParquetFile(p["path"]).iter_batches():
                yield from map(row_fn, batch.to_pylist())

    return _rows_per_s(tud.DataLoader(Rows(), batch_size=BATCH_PARQUET, num_workers=0), p["rows"])


def parquet_tfdata(p: dict[str, Any]) -> dict[str, Any]:
    import tensorflow as tf

    sys.path.append(p["pyarrow_from"])  # after TensorFlow's own packages: .venv-tf pins only TensorFlow
    import pyarrow.parquet as pq

    def record_batches() -> Any:
        for batch in pq.ParquetFile(p["path"]).iter_batches():
            yield {name: batch.column(name).to_numpy(zero_copy_only=False) for name in batch.schema.names}

    spec = {"id": tf.int64, "x": tf.float64, "y": tf.float32, "label": tf.int32, "name": tf.string}
    ds = (tf.data.Dataset.from_generator(record_batches, output_signature={
        k: tf.TensorSpec([None], v) for k, v in spec.items()}).unbatch()
          .map(lambda r: {"f": r["x"] * 2.0 + tf.cast(r["y"], tf.float64), "label": r["label"],
                          "n": tf.strings.length(r["name"])})
          .batch(BATCH_PARQUET))
    return _rows_per_s(ds.as_numpy_iterator(), p["rows"])


def parquet_grain(p: dict[str, Any]) -> dict[str, Any]:
    import grain

    ds = grain.experimental.ParquetIterDataset(p["path"]).map(row_fn).batch(BATCH_PARQUET)
    return _rows_per_s(ds, p["rows"])


def run_one() -> None:
    """The child's entry: no machine line here (bench/peers.py prints it; .venv-tf has no headrace)."""
    workload, contender, params = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    name = f"{workload}_{contender}"
    run = globals().get(name) or getattr(importlib.import_module(f"peers_{workload}"), name)  # peers_<workload>.py
    out = run(params)
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    run_one()
