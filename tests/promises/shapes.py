"""Pipeline shapes for the promise suite: a seeded generator, a builder, and the ids each shape must yield.

A *shape* is a JSON-friendly dict, so it can be handed to a child process and printed when a case fails:

    {"seed": 7, "n": 600, "sizes": {"kind": "skewed", "small": 4096, "large": 4194304, "p_large": 0.1},
     "source": {"kind": "interleave", "files": 8, "cycle_length": 4, "parallel": True, "deterministic": True,
                "block_length": 1},
     "stages": [{"op": "map", "parallel": 2, "deterministic": False, "blowup": 1.0},  # "executor": "process"
                {"op": "shuffle", "buffer": 64}, {"op": "batch", "size": 4, "parallel": None},
                {"op": "prefetch", "buffer": 2}],
     "budget": 67108864}

Every element is ``{"id": int64, "payload": uint8 (s,)}`` with ``s`` a function of the id (so a replay
makes the same sizes) and the payload filled with ``id % 251`` (pages really touched, so the OS counts
them). ``batch`` / ``padded_batch`` turn ``id`` into an ``(b,)`` array; ``unbatch`` turns it back.
``ids(element)`` lists the source ids an element carries: exactly-once means the multiset of ids over the
whole stream equals ``expected_ids(shape)``.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import numpy as np

import headrace as hr
from tests.promises.fns import _Blowup

KiB = 1024
MiB = 1024**2


# ---- element sizes -----------------------------------------------------------------------------------
def size_of(sizes: dict[str, Any], i: int) -> int:
    """Payload bytes of source element ``i`` (deterministic in ``i``)."""
    kind = sizes["kind"]
    if kind == "fixed":
        return int(sizes["small"])
    h = (i * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF
    u = (h >> 11) / float(1 << 53)
    if kind == "skewed":
        return int(sizes["large"] if u < sizes["p_large"] else sizes["small"])
    if kind == "first_small":  # the first element of every run of `period` is tiny, the rest large
        return int(sizes["small"] if i % int(sizes["period"]) == 0 else sizes["large"])
    if kind == "uniform":
        lo, hi = int(sizes["small"]), int(sizes["large"])
        return lo + int(u * (hi - lo))
    raise ValueError(f"unknown size kind {kind!r}")


def make_element(i: Any, sizes: dict[str, Any]) -> dict[str, Any]:
    i = int(i)
    return {"id": np.int64(i), "payload": np.full(size_of(sizes, i), i % 251, np.uint8)}


def ids(element: Any) -> list[int]:
    """The source ids an element carries (-1: padding added by ``padded_batch``, no element)."""
    v = element["id"]
    return [int(v)] if np.ndim(v) == 0 else [int(t) for t in np.asarray(v).reshape(-1) if t >= 0]


def check_payload(element: Any) -> None:
    """The payload still holds what its id wrote (a recycled buffer overwritten too early would not)."""
    ident, payload = element["id"], element["payload"]
    if np.ndim(ident) == 0:
        if payload.size and payload[0] != int(ident) % 251:  # (padded_batch + unbatch leaves zeros at the end)
            raise AssertionError(f"element {int(ident)}: payload does not match its id")
        return
    flat = np.asarray(ident).reshape(-1)
    rows = payload.reshape(len(flat), -1)  # nested batches: one row per id
    for row, i in enumerate(flat):
        if i >= 0 and rows[row].size and rows[row][0] != int(i) % 251:
            raise AssertionError(f"element {int(i)} (row {row}): payload does not match its id")


# ---- building ----------------------------------------------------------------------------------------
def _source(shape: dict[str, Any]) -> hr.Dataset:
    n, sizes, src = shape["n"], shape["sizes"], shape["source"]

    def make(i: Any) -> dict[str, Any]:
        return make_element(i, sizes)

    if src["kind"] == "range":
        return hr.Dataset.range(n).map(make)
    files = int(src["files"])
    per = -(-n // files)

    def open_file(f: Any) -> hr.Dataset:  # one "file" = a contiguous range of ids, read element by element
        start = int(f) * per
        return hr.Dataset.range(start, min(start + per, n)).map(make)

    return hr.Dataset.range(files).interleave(
        open_file, cycle_length=src["cycle_length"], block_length=src.get("block_length", 1),
        num_parallel_calls=hr.AUTOTUNE if src["parallel"] else None, deterministic=src["deterministic"])


def build(shape: dict[str, Any], cache_dir: str | None = None) -> hr.Dataset:
    ds = _source(shape)
    for st in shape["stages"]:
        op = st["op"]
        if op == "map":
            ds = ds.map(_Blowup(st["blowup"], shape["sizes"], st.get("out")), num_parallel_calls=st["parallel"],
                        deterministic=st["deterministic"], executor=st.get("executor"))
        elif op == "shuffle":
            ds = ds.shuffle(st["buffer"], seed=st.get("seed", 0))
        elif op == "batch":
            ds = ds.batch(st["size"], num_parallel_calls=st["parallel"], deterministic=st.get("deterministic"))
        elif op == "padded_batch":  # ids padded with -1 (no element), payload with 0
            ds = ds.padded_batch(st["size"], padding_values={"id": np.int64(-1), "payload": np.uint8(0)})
        elif op == "unbatch":
            ds = ds.unbatch()
        elif op == "prefetch":
            ds = ds.prefetch(st["buffer"])
        elif op == "cache":
            if cache_dir is None:
                raise ValueError("a shape with cache needs cache_dir")
            ds = ds.cache(f"{cache_dir}/cache")
        elif op == "repeat":
            ds = ds.repeat(st["count"])
        else:
            raise ValueError(f"unknown op {op!r}")
    return ds.with_options(hr.Options(memory_budget=shape["budget"]))


def expected_ids(shape: dict[str, Any]) -> Counter[int]:
    repeats = 1
    for st in shape["stages"]:
        if st["op"] == "repeat":
            repeats *= st["count"]
    return Counter({i: repeats for i in range(shape["n"])})


def deterministic(shape: dict[str, Any]) -> bool:
    src = shape["source"]
    if src["kind"] == "interleave" and src["parallel"] and not src["deterministic"]:
        return False
    return all(st.get("deterministic", True) is not False for st in shape["stages"])


def streamed_bytes(shape: dict[str, Any]) -> int:
    outs = [st["out"] for st in shape["stages"] if st["op"] == "map" and st.get("out")]
    if outs:
        return max(outs) * shape["n"]
    blow = max([1.0] + [st["blowup"] for st in shape["stages"] if st["op"] == "map"])
    return int(sum(size_of(shape["sizes"], i) for i in range(shape["n"])) * blow)


# ---- generating --------------------------------------------------------------------------------------
SIZE_MENU = [
    {"kind": "fixed", "small": 64},
    {"kind": "fixed", "small": 64 * KiB},
    {"kind": "fixed", "small": MiB},
    {"kind": "fixed", "small": 4 * MiB},
    {"kind": "fixed", "small": 16 * MiB},
    {"kind": "skewed", "small": 16 * KiB, "large": 4 * MiB, "p_large": 0.1},
    {"kind": "skewed", "small": 256, "large": 12 * MiB, "p_large": 0.05},
    {"kind": "uniform", "small": 1 * KiB, "large": 2 * MiB},
    {"kind": "first_small", "small": 8, "large": 2 * MiB, "period": 8},
]


def random_shape(seed: int, *, max_stream_bytes: int = 1 << 30, budgets: tuple[int, ...] = (32 * MiB, 64 * MiB,
                 128 * MiB, 256 * MiB)) -> dict[str, Any]:
    """A random pipeline shape (see the module docstring); streams about 8x its budget when sizes allow."""
    rng = random.Random(seed)
    sizes = dict(rng.choice(SIZE_MENU))
    budget = rng.choice(budgets)
    mean = np.mean([size_of(sizes, i) for i in range(256)])
    largest = max(sizes.get("large", 0), sizes["small"])
    budget = max(budget, 6 * largest)  # feasible: room for a few of the largest elements
    n = int(min(max(8 * budget / max(mean, 1), 64), max_stream_bytes / max(mean, 1), 5000))
    n = max(n, 16)
    if rng.random() < 0.5:
        source: dict[str, Any] = {"kind": "range"}
    else:
        source = {"kind": "interleave", "files": rng.choice([2, 4, 8, 16]), "cycle_length": rng.choice([1, 2, 4, 16]),
                  "block_length": rng.choice([1, 1, 2]), "parallel": rng.random() < 0.7,
                  "deterministic": rng.random() < 0.6}
    stages: list[dict[str, Any]] = []
    uniform = sizes["kind"] == "fixed"
    for _ in range(rng.randint(1, 4)):
        op = rng.choice(["map", "map", "shuffle", "batch", "prefetch", "prefetch"])
        if op == "map":
            stages.append({"op": "map", "parallel": rng.choice([None, 2, 4, -1]),
                           "deterministic": rng.random() < 0.6, "blowup": rng.choice([1.0, 1.0, 0.5, 3.0])})
        elif op == "shuffle":
            stages.append({"op": "shuffle", "buffer": rng.choice([4, 64, 1000])})
        elif op == "batch":
            size = rng.choice([2, 4, 16])
            if uniform:
                stages.append({"op": "batch", "size": size, "parallel": rng.choice([None, None, 2]),
                               "deterministic": rng.random() < 0.7})
            else:
                stages.append({"op": "padded_batch", "size": size})
            if rng.random() < 0.3:
                stages.append({"op": "unbatch"})
        else:
            stages.append({"op": "prefetch", "buffer": rng.choice([1, 2, 8, hr.AUTOTUNE])})
    # Feasible budgets: the largest thing the pipeline holds at once (a batch of batches of the largest
    # element, blown up by maps; a map holds its input and output) x 6 must fit.
    unit = float(largest)
    worst = unit
    for st in stages:
        if st["op"] in ("batch", "padded_batch"):
            unit *= st["size"]
        elif st["op"] == "unbatch":
            unit /= max(1, max((t["size"] for t in stages if t["op"] in ("batch", "padded_batch")), default=1))
        elif st["op"] == "map":
            worst = max(worst, unit * (1 + st["blowup"]))
            unit *= st["blowup"]
        worst = max(worst, unit)
    budget = max(budget, int(6 * worst))
    return {"seed": seed, "n": n, "sizes": sizes, "source": source, "stages": stages, "budget": int(budget)}


def ctrl_c_case(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A shape with a map on worker processes and the arguments of the ``interrupt`` check that presses Ctrl-C
    at it (SIGINT to the process group, ``group``), a new iterator built after each ``IteratorClosedError`` as a
    notebook user does: ``(shape, args)``, seeded. Spacing: steady (60-120 presses 20-70 ms apart) or in pairs
    (a press once the workers started and compute, then a second press 10-100 ms after it, landing in the close
    the first began; the last pair ends the run)."""
    rng = random.Random(seed)
    map_stage = {"op": "map", "parallel": rng.choice([2, 4, hr.AUTOTUNE]), "deterministic": rng.random() < 0.5,
                 "blowup": 1.0, "executor": rng.choice(["process", "process", "auto"])}
    shape = {"seed": seed, "n": 1_000_000, "sizes": {"kind": "fixed", "small": rng.choice([64, 4 * KiB, 64 * KiB])},
             "source": {"kind": "range"}, "stages": [map_stage], "budget": 256 * MiB}
    if rng.random() < 0.5:
        shape["stages"].append({"op": "prefetch", "buffer": 2})
    if rng.random() < 0.3:
        lo = rng.uniform(0.02, 0.03)
        hi = lo + rng.uniform(0.01, 0.04)
        args = {"min_gap_s": lo, "max_gap_s": hi, "signals": rng.randint(60, 120)}
    else:
        args = {"min_gap_s": 1.2, "max_gap_s": 1.8, "second_gap_s": [0.01, 0.1], "signals": rng.choice([4, 6])}
    return shape, {"group": True, "seed": seed, **args}


def tight_map_shape(seed: int) -> dict[str, Any]:
    """A parallel map whose outputs (4-12 MiB) dwarf its inputs (64 B: a decoder), under a budget with room
    for one output but not two (1.2-1.9 outputs), on threads, processes or ``"auto"``: the calls that start
    before the first output's size is known must not hold two at once (issue 37: 12 MiB outputs under 16 MiB,
    4 calls, tracked peak 24 MiB). On processes a call holds its output twice (the worker's copy while it is
    sent): a clear ``MemoryBudgetError`` refusal is the answer there."""
    rng = random.Random(seed)
    out = rng.choice([4, 8, 12]) * MiB
    stage = {"op": "map", "parallel": rng.choice([2, 4, hr.AUTOTUNE]), "deterministic": rng.random() < 0.5,
             "blowup": 1.0, "out": out, "executor": rng.choice(["thread", "process", "auto"])}
    stages: list[dict[str, Any]] = [stage]
    if rng.random() < 0.3:
        stages.append({"op": "prefetch", "buffer": 1})
    return {"seed": seed, "n": rng.randint(12, 40), "sizes": {"kind": "fixed", "small": 64},
            "source": {"kind": "range"}, "stages": stages, "budget": int(out * rng.uniform(1.2, 1.9))}


def tight_process_map_shape(seed: int) -> dict[str, Any]:
    """A parallel map on worker processes whose outputs (8-24 MiB) dwarf its inputs (64 B), under a budget
    with room for the workers (their interpreters and shared-memory segments) and a few outputs: the calls
    admitted while the first one still starts its worker must be charged their output before they run
    (24 MiB outputs on 4 processes under 128 MiB: tracked peak 130.9 MiB); where one worker, one call and
    one result cannot fit, a clear ``MemoryBudgetError`` refusal (never a stall that overdraws)."""
    rng = random.Random(seed)
    out = rng.choice([8, 16, 24]) * MiB
    stage = {"op": "map", "parallel": rng.choice([2, 4, hr.AUTOTUNE]), "deterministic": rng.random() < 0.5,
             "blowup": 1.0, "out": out, "executor": "process"}
    return {"seed": seed, "n": rng.randint(12, 24), "sizes": {"kind": "fixed", "small": 64},
            "source": {"kind": "range"}, "stages": [stage],
            "budget": int(out * rng.uniform(3.25, 4.5)) + rng.choice([24, 32, 40]) * MiB}
