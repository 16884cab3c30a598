"""The most any ``map -> shuffle -> batch`` pipeline can reach of the bare limit on this machine (issue 24).

The bare limit (``image_pipeline.run_bare``) runs only ``normalize(decode_and_resize(jpeg))`` on JPEG bytes in
memory. The seed pipeline must also read each record from its TFRecord shard (framing and CRC-32C), parse the
``tf.train.Example`` and stack 64 images into a batch (a copy of 602 KB per float32 image that no pipeline can
skip: the elements come out of the user's function as separate arrays and the shuffle between map and batch
decides only later which batch each one joins). On a machine whose cores are the limit, each of these costs
CPU time the bare limit does not spend, so even an engine that costs nothing and keeps every core busy reaches
at most::

    ceiling = work / (work + read + parse + stack) * (cores / cores the bare limit kept busy)

of the bare limit, where each cost is CPU time per image on one thread (``time.thread_time``, the least of
``REPEATS`` alternating repetitions: other jobs only ever add time). tf.data, Grain and the DataLoader do the same
three things and meet the same ceiling. Run by ``bench/peers.py`` in the bare limit's child process
(``peers_runs.image_bare``), which prints it beside issue 24's ">= 92% of the bare limit" target.
"""

from __future__ import annotations

import glob
import time
from typing import Any

REPEATS = 7
IMAGES = 128  # per repetition: enough for a stable least time, short enough for ~5 s in all


def _least(fn: Any, count: int) -> float:
    """Milliseconds of CPU per item of ``fn`` (which handles ``count`` items), the least of ``REPEATS``."""
    best = float("inf")
    for _ in range(REPEATS):
        t = time.thread_time()
        fn()
        best = min(best, (time.thread_time() - t) / count * 1e3)
    return best


def measure(info: dict[str, Any], bare_cores_busy: float, cores: int) -> dict[str, Any]:
    """The per-image CPU costs (ms) and the ceiling, for ``image_pipeline``'s data ``info``.

    ``bare_cores_busy``: the cores the bare limit kept busy (process CPU seconds over wall seconds of its run);
    ``cores``: the cores a pipeline may use. Raises ``ValueError`` when the shards hold fewer than 64 records.
    """
    import image_pipeline as ip
    import numpy as np

    from headrace import image as himg
    from headrace.io import FixedLenFeature, TFRecordDataset, parse_single_example

    spec = {"image/encoded": FixedLenFeature([], "string"), "image/class/label": FixedLenFeature([], "int64")}
    shard = sorted(glob.glob(info["shards"]))[0]
    records = list(TFRecordDataset(shard))[:IMAGES]
    if len(records) < ip.BATCH:
        raise ValueError(f"image_ceiling: {shard} holds {len(records)} records, fewer than a batch of {ip.BATCH}; "
                         "make the data with more images (--images)")
    jpegs = [parse_single_example(r, spec)["image/encoded"] for r in records]
    images = [himg.normalize(himg.decode_and_resize(j, ip.SIZE)) for j in jpegs[:ip.BATCH]]
    out = np.empty((ip.BATCH, *images[0].shape), images[0].dtype)  # a reused buffer, as headrace's batch

    def work() -> None:
        for j in jpegs:
            himg.normalize(himg.decode_and_resize(j, ip.SIZE))

    def read() -> None:
        for _ in zip(range(len(records)), TFRecordDataset(shard)):
            pass

    def parse() -> None:
        for r in records:
            parse_single_example(r, spec)

    def stack() -> None:
        for _ in range(2):
            np.stack(images, out=out)

    costs = {"work": _least(work, len(jpegs)), "read": _least(read, len(records)),
             "parse": _least(parse, len(records)), "stack": _least(stack, 2 * ip.BATCH)}
    share = costs["work"] / sum(costs.values())
    return {"ms_per_image": costs, "same_utilization": share,
            "every_core_busy": share * cores / max(bare_cores_busy, 1e-9) if bare_cores_busy > 0 else share,
            "bare_cores_busy": bare_cores_busy, "cores": cores}


def line(ceiling: dict[str, Any]) -> str:
    """One line for ``bench/peers.py``: the costs and both ceilings."""
    c = ceiling["ms_per_image"]
    return (f"ceiling of any map->shuffle->batch pipeline here: {ceiling['every_core_busy']:.3f} of the bare limit "
            f"with every core busy ({ceiling['same_utilization']:.3f} at the bare limit's "
            f"{ceiling['bare_cores_busy']:.2f} busy cores); CPU per image on one thread: decode+resize+normalize "
            f"{c['work']:.3f} ms, read {c['read']:.3f} ms, parse {c['parse']:.3f} ms, stack {c['stack']:.3f} ms")
