"""Generated cases of the wide promise sweep: any source (``sources.py``), any chain of the API's
transformations (``ops.py``), thread and process maps, tight budgets (below two elements), damaged inputs
with and without ``ignore_errors()``, restore chains, ``to_torch`` under DataLoader workers.

A case is a JSON-friendly dict, printed with its seed when it fails::

    {"seed": 7, "n": 300, "sizes": {"kind": "fixed", "small": 65536},
     "source": {"kind": "parquet", "files": 2, "row_group": 16, "shuffle": False,
                "corrupt": {"id": 37, "ignore": True}},
     "stages": [{"op": "ignore_errors"}, {"op": "map", ...}, {"op": "window", "size": 3, "batch": True}],
     "budget": 33554432, "tight": False, "points": [0.1, 0.1, 0.6], "torch": "spawn"}

``points``: the restore chain, as fractions of the uninterrupted run's length (a repeated point restores twice
in a row without reading). ``build`` gives the dataset and the stream it must yield (``ops.Model``).
``python bench/promises.py --first-seed S --shapes 1`` reruns the case of seed ``S``.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import numpy as np

import headrace as hr
from tests.promises.ops import ADDITIONS, OPS, Model
from tests.promises.shapes import size_of
from tests.promises.sources import FILE_KINDS, KINDS, TEXT_KINDS, build_source, nondeterministic

KiB = 1024
MiB = 1024**2
SIZES = [
    {"kind": "fixed", "small": 64},
    {"kind": "fixed", "small": 4 * KiB},
    {"kind": "fixed", "small": 64 * KiB},
    {"kind": "fixed", "small": MiB},
    {"kind": "fixed", "small": 4 * MiB},
    {"kind": "skewed", "small": 16 * KiB, "large": 2 * MiB, "p_large": 0.1},
    {"kind": "uniform", "small": KiB, "large": MiB},
    {"kind": "first_small", "small": 8, "large": MiB, "period": 8},
]
LATER_KINDS = {7: "csv"}
OP_WEIGHTS = {name: 1.0 for name in OPS} | {"map": 3.0, "prefetch": 2.0, "batch": 1.5, "shuffle": 1.5}
TEXT_SHARE = 0.15  # of the cases read text files (TextLineDataset / FixedLengthRecordDataset)
ADDITION_P = 0.25
"""The share of cases given one of headrace's additions (``ops.ADDITIONS``), drawn from a random stream of
their own so that the tf.data ops' case of every seed stays what it was before the additions joined."""
TIGHT_OPS = ("map", "prefetch", "shuffle", "filter", "interleave", "batch", "cache", "zip", "enumerate", "scan")


def _source(rng: random.Random, kind: str, n: int) -> dict[str, Any]:
    src: dict[str, Any] = {"kind": kind}
    if kind == "tensor_slices":
        src["whole"] = rng.random() < 0.5
    elif kind == "random_access":
        src["shuffle"] = rng.random() < 0.4
    elif kind == "files":
        src.update(files=rng.choice([2, 4, 8]), cycle=rng.choice([1, 2, 4]), block=rng.choice([1, 2]),
                   parallel=rng.random() < 0.7, deterministic=rng.random() < 0.6)
    elif kind == "tfrecord":
        src.update(files=rng.choice([1, 2, 4]), reads=rng.choice([1, 1, 2, 4]))
    elif kind == "parquet":
        src.update(files=rng.choice([1, 2]), row_group=rng.choice([4, 16, 64]), shuffle=rng.random() < 0.3)
    elif kind == "hdf5":
        src["chunk"] = rng.choice([4, 16, 64])
    elif kind == "csv":
        src.update(files=rng.choice([1, 2]), compression=rng.choice(["", "GZIP"]))
    elif kind == "image_folder":
        src.update(side=rng.choice([16, 32, 64, 128]), parallel=rng.choice([None, 2, hr.AUTOTUNE]))
    elif kind in TEXT_KINDS:
        src.update(files=rng.choice([1, 2, 4]), reads=rng.choice([1, 1, 2, 4]),
                   compression=rng.choice(["", "", "GZIP", "ZLIB"]))
        if kind == "fixed_length":
            src.update(header=rng.choice([0, 3, 64]), footer=rng.choice([0, 5]))
    return src


def _model(case: dict[str, Any], order: list[Any] | None, damaged: set[int]) -> Model:
    src, sizes = case["source"], case["sizes"]
    corrupt = src.get("corrupt")
    ids = list(range(case["n"])) if order is None else order
    if corrupt and corrupt["ignore"]:
        ids = [i for i in ids if i not in damaged]
    largest = max(size_of(sizes, i) for i in range(min(case["n"], 512)))
    return Model(order=None if order is None else list(ids), counts=Counter(ids), sizes=sizes,
                 uniform=sizes["kind"] == "fixed",
                 deterministic=not nondeterministic(src), unit=float(largest), worst=float(largest))


def build(case: dict[str, Any], workdir: str, cache_dir: str, write: bool = False) -> tuple[hr.Dataset, Model]:
    """The case's dataset (files under ``workdir``, written when ``write``) and its expected stream."""
    ds, order, damaged = build_source(case["source"], case["n"], case["sizes"], workdir, write)
    m = _model(case, order, damaged)
    for k, st in enumerate(case["stages"]):
        env = {"sizes": case["sizes"], "scale": m.scale, "cache_dir": cache_dir, "k": k}
        ds = OPS[st["op"]][1](ds, st, env)
        OPS[st["op"]][2](m, st)
    return ds.with_options(hr.Options(memory_budget=case["budget"])), m


def random_case(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    drawn = [k for k in KINDS + FILE_KINDS if k not in LATER_KINDS.values() and k not in TEXT_KINDS]
    kind = rng.choice(drawn)  # the file sources twice as often
    text = random.Random(f"tx{seed}")  # (its own stream: the other seeds' cases stay as they were; none of
    #                                    the seeds named in tests/promises turns to text)
    if text.random() < TEXT_SHARE:
        kind = text.choice(TEXT_KINDS)
    kind = LATER_KINDS.get(seed % 13, kind)  # (sources added later take seeds of their own: the draws of the
    # other seeds, named by tests and past sweeps, stay as they were)
    tight = rng.random() < 0.12
    if kind in ("hdf5", "image_folder", "csv", "fixed_length") or tight:
        sizes = {"kind": "fixed", "small": rng.choice([2 * MiB, 4 * MiB]) if tight else rng.choice(
            [64, 4 * KiB, 64 * KiB, MiB])}
    else:
        sizes = dict(rng.choice(SIZES))
    src = _source(rng, kind, 0)
    if kind == "image_folder" and tight:
        src["side"] = 1024
    if kind == "image_folder":
        sizes = {"kind": "fixed", "small": src["side"] ** 2 * 3}
    budget = rng.choice([8, 16, 32, 64]) * MiB
    mean = float(np.mean([size_of(sizes, i) for i in range(256)]))
    n = int(min(max(3 * budget, 4 * MiB), 48 * MiB) / max(mean, 1))
    n = max(16, min(n, 300 if kind == "image_folder" else 2000))
    if tight:
        n = min(n, 24)
    case: dict[str, Any] = {"seed": seed, "n": n, "sizes": sizes, "source": src, "stages": [], "budget": budget,
                            "tight": tight, "torch": None}
    if kind in FILE_KINDS and not tight and rng.random() < 0.3:
        src["corrupt"] = {"id": rng.randrange(n), "ignore": rng.random() < 0.6}
    order = None if src.get("shuffle") or nondeterministic(src) else list(range(n))  # (interleaves: close enough)
    m = _model(case, order, set(src.get("corrupt", {}) and {src["corrupt"]["id"]}))
    if src.get("corrupt", {}).get("ignore"):
        case["stages"].append({"op": "ignore_errors"})
    raises = src.get("corrupt") and not src["corrupt"]["ignore"]  # (no ignore_errors further on either)
    names = [k for k in OPS if (not tight or k in TIGHT_OPS) and not (raises and k == "ignore_errors")
             and k not in ADDITIONS]
    weights = [OP_WEIGHTS[k] for k in names]
    count = rng.randint(0, 2) if tight else rng.randint(1, 5)
    more = random.Random(f"additions:{seed}")
    addition_at = more.randrange(count) if count and not tight and more.random() < ADDITION_P else None
    for k in range(count):
        if k == addition_at:
            name = more.choice(sorted(ADDITIONS))
            st = OPS[name][0](more, m)
            if st is not None:
                case["stages"].append(st)
                OPS[name][2](m, st)
        for _attempt in range(20):
            name = rng.choices(names, weights)[0]
            st = OPS[name][0](rng, m)
            if st is not None and not (tight and st.get("blowup", 1.0) > 1.0):
                break
        else:
            continue
        case["stages"].append(st)
        OPS[name][2](m, st)
    if tight:
        case["budget"] = int(1.5 * size_of(sizes, 0))  # below two elements: run, or refuse clearly
    else:
        case["budget"] = max(budget, int(6 * m.worst))
    case["points"] = sorted(rng.choice([0.0, 0.05, 0.3, 0.5, 0.9, 1.0, rng.random()]) for _ in range(rng.randint(2, 4)))
    if rng.random() < 0.1 and not src.get("corrupt"):
        case["torch"] = rng.choice(["fork", "spawn"])
    return case


def describe(case: dict[str, Any]) -> str:
    """One line: the source, the ops, the budget (for the sweep's list of failures)."""
    src = case["source"]
    extra = {k: v for k, v in src.items() if k not in ("kind", "corrupt")}
    s = f"{src['kind']}{extra if extra else ''}"
    if src.get("corrupt"):
        s += f" damaged at id {src['corrupt']['id']}{' +ignore_errors' if src['corrupt']['ignore'] else ''}"
    ops = " -> ".join(st["op"] + ("(process)" if st.get("executor") == "process" else "") for st in case["stages"])
    size = case["sizes"]
    return (f"n={case['n']} {size['kind']} {size.get('large', size['small']) / MiB:.3g} MiB: {s} -> {ops or '-'} "
            f"budget {case['budget'] / MiB:.3g} MiB{' (tight)' if case['tight'] else ''}"
            f"{' torch ' + case['torch'] if case['torch'] else ''}")
