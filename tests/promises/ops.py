"""Every transformation of the public Dataset API, for the generated cases (``tests/promises/cases.py``).

Each op is a dict (``{"op": "filter", "mod": 3, "rem": 1}``) with three functions:

- ``gen(rng, model)``: the op's arguments, or ``None`` where it does not apply to the stream so far (an
  element-wise predicate needs scalar ids; ``take`` needs the order to be known to predict its ids);
- ``apply(ds, st, env)``: the transformation itself (every function is a module-level class, so it pickles
  for ``executor="process"`` and spawned DataLoader workers);
- ``update(model, st)``: what the op does to :class:`Model`, the expected stream: its elements in order (ids,
  nested lists for batches) while the order is predictable, else the multiset of ids.

Every op keeps the elements ``{"id", "payload"}`` (through ``map`` back where the op changes the structure:
``zip``, ``enumerate``, ``rejection_resample``, ``unique``), so any op can follow any other.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import headrace as hr
from tests.promises.shapes import _Blowup, make_element

EXTRA = 10_000_000  # ids of the second datasets of concatenate / sample_from_datasets / choose_from_datasets
PAD = {"id": np.int64(-1), "payload": np.uint8(0)}


# ---- the expected stream ------------------------------------------------------------------------------
def flat(e: Any) -> list[int]:
    return [e] if isinstance(e, int) else [i for x in e for i in flat(x)]


@dataclass
class Model:
    order: list[Any] | None          # the elements in order, while predictable
    counts: Counter[int]             # the ids over the whole stream
    depth: int = 0                   # batch nesting of the elements
    uniform: bool = True             # every leaf payload has the same length (batch / rebatch allowed)
    exact: bool = True               # False: counts is an upper bound (rejection_resample)
    deterministic: bool = True       # the same order on every run (reorder is then a failure)
    scale: float = 1.0               # product of the maps' blowups
    unit: float = 0.0                # bytes of the largest element at the current depth
    worst: float = 0.0               # the largest thing a stage holds at once
    sizes: dict[str, Any] = field(default_factory=dict)
    batches: list[int] = field(default_factory=list)  # the batch sizes of the nesting, outermost last

    def set_order(self, order: list[Any] | None) -> None:
        self.order = order
        if order is not None:
            self.counts = Counter(i for e in order for i in flat(e))

    def n_elements(self) -> int | None:
        return None if self.order is None else len(self.order)

    def grow(self, factor: float) -> None:
        self.unit *= factor
        self.worst = max(self.worst, self.unit)


def chunks(order: list[Any], size: int, drop: bool = False) -> list[Any]:
    out = [order[k:k + size] for k in range(0, len(order), size)]
    return [c for c in out if len(c) == size] if drop else out


def sim_interleave(inputs: list[list[Any]], cycle: int, block: int) -> list[Any]:
    """tf.data's deterministic interleave order: a slot that ends moves the cycle on; an empty slot opens the
    next input where it is and reads from it."""
    slots: list[list[Any] | None] = [None] * cycle
    source, out, idx, count, done = iter(inputs), [], 0, 0, False
    while not (done and all(s is None for s in slots)):
        if slots[idx] is None:
            if done:
                idx, count = (idx + 1) % cycle, 0
                continue
            nxt = next(source, None)
            if nxt is None:
                done = True
                continue
            slots[idx] = list(nxt)
        q = slots[idx]
        if not q:
            slots[idx], idx, count = None, (idx + 1) % cycle, 0
            continue
        out.append(q.pop(0))
        count += 1
        if count == block:
            idx, count = (idx + 1) % cycle, 0
    return out


# ---- picklable functions ------------------------------------------------------------------------------
class Make:
    def __init__(self, sizes: dict[str, Any]) -> None:
        self.sizes = sizes

    def __call__(self, i: Any) -> dict[str, Any]:
        return make_element(i, self.sizes)


def make_map(ds: hr.Dataset, sizes: dict[str, Any]) -> hr.Dataset:
    """``ds.map(Make(sizes))``; where sizes vary the payload's length is declared unknown (a spec traced on two
    examples would call it known, and ``ragged_batch`` decides dense or ragged from the spec)."""
    signature = None if sizes["kind"] == "fixed" else {
        "id": hr.TensorSpec((), np.int64), "payload": hr.TensorSpec((None,), np.uint8)}
    return ds.map(Make(sizes), output_signature=signature)


class KeepIf:
    def __init__(self, mod: int, rem: int) -> None:
        self.mod, self.rem = mod, rem

    def __call__(self, x: Any) -> Any:
        return x["id"] % self.mod != self.rem


class IdNot:
    def __init__(self, v: int) -> None:
        self.v = v

    def __call__(self, x: Any) -> Any:
        return x["id"] != self.v


class Copies:
    def __init__(self, k: int) -> None:
        self.k = k

    def __call__(self, x: Any) -> hr.Dataset:
        ds = hr.Dataset.from_tensors(x)
        return ds.repeat(self.k) if self.k > 1 else ds


class Slices:
    def __call__(self, x: Any) -> hr.Dataset:
        return hr.Dataset.from_tensor_slices(x)


class First:
    def __call__(self, a: Any, b: Any) -> Any:
        return a


class Second:
    def __call__(self, a: Any, b: Any) -> Any:
        return b


class ZipWindow:
    def __init__(self, batch: int | None) -> None:
        self.batch = batch

    def __call__(self, w: Any) -> hr.Dataset:
        ds = hr.Dataset.zip(w)
        return ds if self.batch is None else ds.padded_batch(self.batch, padding_values=PAD)


class ScanCount:
    def __call__(self, s: Any, x: Any) -> tuple[Any, Any]:
        return s + 1, x


class IdOnly:
    def __call__(self, x: Any) -> Any:
        return x["id"]


class KeyMod:
    def __init__(self, k: int) -> None:
        self.k = k

    def __call__(self, x: Any) -> Any:
        return np.int64(int(x["id"]) % self.k)


class ReduceBatch:
    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, key: Any, w: hr.Dataset) -> hr.Dataset:
        return w.padded_batch(self.size, padding_values=PAD)


class PayloadLen:
    def __call__(self, x: Any) -> Any:
        return np.int64(x["payload"].shape[-1])


class Mod2:
    def __call__(self, i: Any) -> Any:
        return np.int64(int(i) % 2)


def extra(sizes: dict[str, Any], m: int, scale: float) -> hr.Dataset:
    ds = make_map(hr.Dataset.range(EXTRA, EXTRA + m), sizes)
    return ds if scale == 1.0 else ds.map(_Blowup(scale, sizes))


# ---- the ops: (gen, apply, update) ---------------------------------------------------------------------
Gen = Callable[[random.Random, Model], "dict[str, Any] | None"]
Apply = Callable[[hr.Dataset, "dict[str, Any]", "dict[str, Any]"], hr.Dataset]
Update = Callable[[Model, "dict[str, Any]"], None]
OPS: dict[str, tuple[Gen, Apply, Update]] = {}


def op(name: str, gen: Gen, apply: Apply, update: Update) -> None:
    OPS[name] = (gen, apply, update)


def _same(m: Model, st: dict[str, Any]) -> None:
    return None


def _unordered(m: Model, st: dict[str, Any]) -> None:
    m.set_order(None)


def _gen_map(rng: random.Random, m: Model) -> dict[str, Any]:
    process = rng.random() < 0.3
    parallel = rng.choice([2, 2, -1]) if process else rng.choice([None, 2, 4, -1])
    return {"op": "map", "parallel": parallel, "deterministic": rng.random() < 0.6,
            "executor": "process" if process else "thread", "blowup": rng.choice([1.0, 1.0, 0.5, 2.0])}


def _upd_map(m: Model, st: dict[str, Any]) -> None:
    m.worst = max(m.worst, m.unit * (1 + st["blowup"]))
    m.grow(st["blowup"])
    m.scale *= st["blowup"]
    if st["parallel"] is not None and not st["deterministic"]:
        m.deterministic = False
        m.set_order(None)


op("map", _gen_map,
   lambda ds, st, env: ds.map(_Blowup(st["blowup"], env["sizes"]), num_parallel_calls=st["parallel"],
                              deterministic=st["deterministic"], executor=st["executor"]), _upd_map)


def _depth0(gen: Gen) -> Gen:
    return lambda rng, m: gen(rng, m) if m.depth == 0 else None


def _upd_filter(m: Model, st: dict[str, Any]) -> None:
    keep = KeepIf(st["mod"], st["rem"])
    if m.order is not None:
        m.set_order([i for i in m.order if keep({"id": i})])
    else:
        m.counts = Counter({i: c for i, c in m.counts.items() if keep({"id": i})})


op("filter", _depth0(lambda rng, m: {"op": "filter", "mod": rng.choice([2, 3, 7]), "rem": rng.randint(0, 1)}),
   lambda ds, st, env: ds.filter(KeepIf(st["mod"], st["rem"])), _upd_filter)


def _upd_flat_map(m: Model, st: dict[str, Any]) -> None:
    if st["slices"]:
        m.depth -= 1
        m.unit /= m.batches.pop()
        m.set_order(None if m.order is None else [x for e in m.order for x in e])


op("flat_map", lambda rng, m: {"op": "flat_map", "slices": m.depth > 0},
   lambda ds, st, env: ds.flat_map(Slices() if st["slices"] else Copies(1)), _upd_flat_map)


def _gen_interleave(rng: random.Random, m: Model) -> dict[str, Any]:
    return {"op": "interleave", "copies": rng.choice([1, 2]), "cycle": rng.choice([1, 2, 4]),
            "block": rng.choice([1, 2]), "parallel": rng.random() < 0.5, "deterministic": rng.random() < 0.7}


def _upd_interleave(m: Model, st: dict[str, Any]) -> None:
    if st["parallel"] and not st["deterministic"]:
        m.deterministic = False
        m.counts = Counter({i: c * st["copies"] for i, c in m.counts.items()})
        m.set_order(None)
    elif m.order is not None:
        m.set_order(sim_interleave([[e] * st["copies"] for e in m.order], st["cycle"], st["block"]))
    else:
        m.counts = Counter({i: c * st["copies"] for i, c in m.counts.items()})


op("interleave", _depth0(_gen_interleave),
   lambda ds, st, env: ds.interleave(Copies(st["copies"]), cycle_length=st["cycle"], block_length=st["block"],
                                     num_parallel_calls=hr.AUTOTUNE if st["parallel"] else None,
                                     deterministic=st["deterministic"]), _upd_interleave)


def _gen_batch(rng: random.Random, m: Model) -> dict[str, Any] | None:
    if m.depth >= 2:
        return None
    size = rng.choice([2, 4, 16])
    if not m.uniform or m.depth > 0:  # (batches of batches: the last may hold fewer rows, so they pad)
        return {"op": "padded_batch", "size": size}
    return {"op": "batch", "size": size, "drop": m.order is not None and rng.random() < 0.3,
            "parallel": rng.choice([None, None, 2]), "deterministic": rng.random() < 0.7}


def _upd_batch(m: Model, st: dict[str, Any]) -> None:
    m.depth += 1
    m.batches.append(st["size"])
    m.grow(st["size"])
    if st.get("parallel") and st.get("deterministic") is False:  # batches delivered as they are stacked
        m.deterministic = False
        m.set_order(None)
    if m.order is not None:
        m.set_order(chunks(m.order, st["size"], st.get("drop", False)))


op("batch", _gen_batch,
   lambda ds, st, env: ds.batch(st["size"], drop_remainder=st["drop"], num_parallel_calls=st["parallel"],
                                deterministic=st["deterministic"]), _upd_batch)
op("padded_batch", lambda rng, m: {"op": "padded_batch", "size": rng.choice([2, 4, 16])} if m.depth < 2 else None,
   lambda ds, st, env: ds.padded_batch(st["size"], padding_values=PAD), _upd_batch)


def _upd_unbatch(m: Model, st: dict[str, Any]) -> None:
    m.depth -= 1
    m.unit /= m.batches.pop()
    if m.order is not None:
        m.set_order([x for e in m.order for x in e])


op("unbatch", lambda rng, m: {"op": "unbatch"} if m.depth > 0 else None,
   lambda ds, st, env: ds.unbatch(), _upd_unbatch)


def _upd_rebatch(m: Model, st: dict[str, Any]) -> None:
    m.unit = m.unit / m.batches.pop() * st["size"]
    m.worst = max(m.worst, m.unit)
    m.batches.append(st["size"])
    if m.order is not None:
        m.set_order(chunks([x for e in m.order for x in e], st["size"]))


op("rebatch", lambda rng, m: {"op": "rebatch", "size": rng.choice([3, 8])} if m.depth == 1 and m.uniform else None,
   lambda ds, st, env: ds.rebatch(st["size"]), _upd_rebatch)


def _upd_ragged(m: Model, st: dict[str, Any]) -> None:
    m.worst = max(m.worst, m.unit * st["size"])


op("ragged_batch", lambda rng, m: {"op": "ragged_batch", "size": rng.choice([2, 4])} if m.depth == 0 else None,
   lambda ds, st, env: ds.ragged_batch(st["size"]).unbatch(), _upd_ragged)  # (and back: the payload is ragged)
op("shuffle", lambda rng, m: {"op": "shuffle", "buffer": rng.choice([4, 64, 1000]), "seed": rng.randint(0, 9)},
   lambda ds, st, env: ds.shuffle(st["buffer"], seed=st["seed"]), _unordered)


def _upd_repeat(m: Model, st: dict[str, Any]) -> None:
    if m.order is not None:
        m.set_order(m.order * st["count"])
    else:
        m.counts = Counter({i: c * st["count"] for i, c in m.counts.items()})


op("repeat", lambda rng, m: {"op": "repeat", "count": 2} if sum(m.counts.values()) <= 1500 else None,
   lambda ds, st, env: ds.repeat(st["count"]), _upd_repeat)


def _cut(rng: random.Random, m: Model) -> int:
    return rng.randint(0, max(0, len(m.order or []) - 1))


op("take", lambda rng, m: {"op": "take", "count": _cut(rng, m) + 1} if m.order else None,
   lambda ds, st, env: ds.take(st["count"]), lambda m, st: m.set_order(m.order[:st["count"]]))  # type: ignore
op("skip", lambda rng, m: {"op": "skip", "count": _cut(rng, m)} if m.order else None,
   lambda ds, st, env: ds.skip(st["count"]), lambda m, st: m.set_order(m.order[st["count"]:]))  # type: ignore


def _gen_shard(rng: random.Random, m: Model) -> dict[str, Any] | None:
    k = rng.choice([2, 3])
    return {"op": "shard", "num": k, "index": rng.randrange(k)} if m.order else None


op("shard", _gen_shard, lambda ds, st, env: ds.shard(st["num"], st["index"]),
   lambda m, st: m.set_order(m.order[st["index"]::st["num"]]))  # type: ignore
op("zip", lambda rng, m: {"op": "zip"},
   lambda ds, st, env: hr.Dataset.zip(ds, hr.Dataset.range(10**9)).map(First()), _same)


def _upd_concatenate(m: Model, st: dict[str, Any]) -> None:
    more = [EXTRA + k for k in range(st["count"])]
    m.uniform = m.uniform and m.scale == 1.0 and m.sizes.get("kind") == "fixed"
    if m.order is not None:
        m.set_order(m.order + more)
    else:
        m.counts.update(more)


op("concatenate", _depth0(lambda rng, m: {"op": "concatenate", "count": rng.choice([1, 5, 20])}),
   lambda ds, st, env: ds.concatenate(extra(env["sizes"], st["count"], env["scale"])), _upd_concatenate)
op("enumerate", lambda rng, m: {"op": "enumerate", "start": rng.choice([0, 5])},
   lambda ds, st, env: ds.enumerate(st["start"]).map(Second()), _same)


def _upd_window(m: Model, st: dict[str, Any]) -> None:
    if st["batch"]:
        _upd_batch(m, {"size": st["size"]})


op("window", _depth0(lambda rng, m: {"op": "window", "size": rng.choice([2, 3, 5]), "batch": rng.random() < 0.5}),
   lambda ds, st, env: ds.window(st["size"]).flat_map(ZipWindow(st["size"] if st["batch"] else None)),
   _upd_window)
op("scan", lambda rng, m: {"op": "scan"}, lambda ds, st, env: ds.scan(np.int64(0), ScanCount()), _same)
op("cache", lambda rng, m: {"op": "cache", "file": rng.random() < 0.7},
   lambda ds, st, env: ds.cache(f"{env['cache_dir']}/c{env['k']}" if st["file"] else ""), _same)
op("prefetch", lambda rng, m: {"op": "prefetch", "buffer": rng.choice([1, 2, 8, hr.AUTOTUNE])},
   lambda ds, st, env: ds.prefetch(st["buffer"]), _same)
op("ignore_errors", lambda rng, m: {"op": "ignore_errors"}, lambda ds, st, env: ds.ignore_errors(), _same)


def _gen_take_while(rng: random.Random, m: Model) -> dict[str, Any] | None:
    return {"op": "take_while", "stop": flat(m.order[_cut(rng, m)])[0]} if m.order and m.depth == 0 else None


def _upd_take_while(m: Model, st: dict[str, Any]) -> None:
    assert m.order is not None
    if st["stop"] in m.order:  # (not when the damage of a file took it)
        m.set_order(m.order[:m.order.index(st["stop"])])


op("take_while", _gen_take_while, lambda ds, st, env: ds.take_while(IdNot(st["stop"])), _upd_take_while)


def _upd_unique(m: Model, st: dict[str, Any]) -> None:
    if m.order is not None:
        m.set_order(list(dict.fromkeys(m.order)))
    else:
        m.counts = Counter(set(m.counts))
    m.scale = 1.0
    m.uniform = m.sizes.get("kind") == "fixed"


op("unique", _depth0(lambda rng, m: {"op": "unique"}),
   lambda ds, st, env: make_map(ds.map(IdOnly()).unique(), env["sizes"]), _upd_unique)


def _upd_grouped(m: Model, st: dict[str, Any]) -> None:
    _upd_batch(m, {"size": st["size"]})
    m.set_order(None)


op("group_by_window", _depth0(lambda rng, m: {"op": "group_by_window", "keys": rng.choice([2, 3]),
                                              "size": rng.choice([2, 4])}),
   lambda ds, st, env: ds.group_by_window(KeyMod(st["keys"]), ReduceBatch(st["size"]), window_size=st["size"]),
   _upd_grouped)


def _gen_bucket(rng: random.Random, m: Model) -> dict[str, Any] | None:
    return {"op": "bucket_by_sequence_length", "boundary": int(m.unit / max(m.scale, 1e-9) / 2) + 1,
            "size": rng.choice([2, 4])} if m.depth == 0 else None


op("bucket_by_sequence_length", _gen_bucket,
   lambda ds, st, env: ds.bucket_by_sequence_length(PayloadLen(), [st["boundary"]], [st["size"], st["size"]],
                                                    padding_values=PAD), _upd_grouped)


def _upd_two(m: Model, st: dict[str, Any]) -> None:
    _upd_concatenate(m, st)
    m.set_order(None)


def _sample(ds: hr.Dataset, st: dict[str, Any], env: dict[str, Any]) -> hr.Dataset:
    return hr.Dataset.sample_from_datasets([ds, extra(env["sizes"], st["count"], env["scale"])], [0.7, 0.3],
                                           seed=st["seed"], stop_on_empty_dataset=False)


def _choose(ds: hr.Dataset, st: dict[str, Any], env: dict[str, Any]) -> hr.Dataset:
    choice = hr.Dataset.range(2 * (st["n"] + st["count"]) + 2).map(Mod2())
    return hr.Dataset.choose_from_datasets([ds, extra(env["sizes"], st["count"], env["scale"])], choice,
                                           stop_on_empty_dataset=False)


op("sample_from_datasets", _depth0(lambda rng, m: {"op": "sample_from_datasets", "count": rng.choice([5, 30]),
                                                   "seed": rng.randint(0, 9)}), _sample, _upd_two)
op("choose_from_datasets", _depth0(lambda rng, m: {"op": "choose_from_datasets", "count": rng.choice([5, 30]),
                                                   "n": sum(m.counts.values())}), _choose, _upd_two)


def _upd_resample(m: Model, st: dict[str, Any]) -> None:
    m.exact = False
    m.set_order(None)


op("rejection_resample", _depth0(lambda rng, m: {"op": "rejection_resample", "seed": rng.randint(0, 9)}),
   lambda ds, st, env: ds.rejection_resample(KeyMod(2), [0.5, 0.5], seed=st["seed"]).map(Second()),
   _upd_resample)


# ---- headrace's additions (drawn apart: ``cases.ADDITION_P``) ----------------------------------------------
ADDITIONS = {"pack"}
SEQUENCE = {"id": hr.TensorSpec((), np.int64), "payload": hr.TensorSpec((None,), np.uint8)}


class ToSequence:
    """``pack``'s input: one uint8 sequence, the id's 8 bytes and then the payload."""

    def __call__(self, x: Any) -> Any:
        return np.concatenate([np.asarray(x["id"], np.int64).reshape(1).view(np.uint8), x["payload"]])


class Listed:
    def __init__(self, elements: list[Any]) -> None:
        self.elements = elements

    def __call__(self) -> Any:
        return iter(self.elements)


class Unpack:
    """A packed row back to its elements ``{"id", "payload"}``, one per segment (a payload longer than the row
    comes back truncated: its first byte still says its id)."""

    def __call__(self, packed: Any, segment_ids: Any, positions: Any) -> hr.Dataset:
        out = []
        for k in range(1, int(segment_ids.max(initial=0)) + 1):
            seq = packed[segment_ids == k]
            out.append({"id": seq[:8].copy().view(np.int64)[0], "payload": seq[8:].copy()})
        return hr.Dataset.from_generator(Listed(out), output_signature=SEQUENCE)


def _upd_pack(m: Model, st: dict[str, Any]) -> None:
    m.worst = max(m.worst, (st["bins"] + 2) * st["length"] * 9.0)  # open rows, the row built, the row unpacked
    m.unit = min(m.unit, float(st["length"]))
    m.uniform = False  # payloads truncated to the row
    m.set_order(None)  # first fit reorders (deterministically)


op("pack", _depth0(lambda rng, m: {"op": "pack", "length": rng.choice([64, 4096, 65536]),
                                   "bins": rng.choice([1, 2, 4])}),
   lambda ds, st, env: ds.map(ToSequence()).pack(st["length"], num_packing_bins=st["bins"]).flat_map(Unpack()),
   _upd_pack)
