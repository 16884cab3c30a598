"""The sequential batch's one call per batch (``runs.fill_one_by_one``) and ``map``'s fused loop in it (tf.data's
map-and-batch fusion, ``static_optimizations.MapAndBatch``), and ``range`` made in chunks: across generated cases
of element kinds (numpy scalars of several dtypes, Python ints, arrays whose size grows mid-batch, tuples, dicts,
bytes), function errors and input errors at random positions, batch sizes and ``drop_remainder``, the fused pipeline
gives what the unfused one gives (a ``filter`` that keeps everything between ``map`` and ``batch`` takes the
per-element path): the same batches, the same errors with the same notes, and a state taken at any point
restores to exactly the same rest. ``range``'s chunks: a state at every position around a chunk boundary."""

from __future__ import annotations

import random

import numpy as np
import pytest

import headrace as hr
from headrace._ops.in_memory import _RangeIterator

KINDS = ["int64", "float32", "uint8", "pyint", "growing", "tuple", "dict", "bytes", "mixed_scalars",
         # flat rows of scalars (a map's results handed to batch as columns, ``MapAndBatch.fill_columns``):
         "pydict", "pytuple", "row_then_array", "row_dtypes_mixed", "row_overflow", "row_stop"]


def _fn(kind: str, fail: frozenset[int]):
    def f(x):
        i = int(x)
        if i in fail:
            raise ValueError(f"bad element {i}")
        if kind == "int64":
            return x * 2
        if kind == "float32":
            return np.float32(i) / 2
        if kind == "uint8":
            return np.uint8(i % 256)
        if kind == "pyint":
            return i * 3  # normalized to int64
        if kind == "growing":  # sizes grow inside batches: the fill stops early and the batch makes room
            return np.full((1 + i % 7) * 64, i, np.int32)
        if kind == "tuple":
            return np.int64(i), np.float32(i)
        if kind == "dict":
            return {"a": np.int32(i), "b": np.zeros(i % 3 + 1, np.float64)}
        if kind == "bytes":
            return b"x" * (i % 5)
        if kind == "pydict":  # Python values: int64, float32, bool columns
            return {"n": i * 3, "half": i / 2, "even": i % 2 == 0, "np": np.float64(i)}
        if kind == "pytuple":
            return i, np.int32(i), float(i)
        if kind == "row_then_array":  # another kind of result inside a run: the rest one by one
            return {"a": i, "b": np.zeros(2, np.uint8) if i % 13 == 6 else np.uint8(i)}
        if kind == "row_dtypes_mixed":  # batching refuses it, as for the elements one by one
            return {"a": np.int64(i) if i % 9 else np.int32(i), "b": i}
        if kind == "row_overflow":  # an int outside int64: normalize's error at that element
            return {"a": 2**63 + i if i % 17 == 12 else i}
        if kind == "row_stop":  # StopIteration from the function: RuntimeError at that element
            if i % 19 == 14:
                raise StopIteration
            return i, i
        return np.int64(i) if i % 5 else np.int32(i)  # mixed scalar dtypes: batching refuses it
    return f


def _pipeline(seed: int, fused: bool) -> tuple[hr.Dataset, int]:
    rng = random.Random(seed)
    n = rng.choice([0, 1, 5, 31, 64, 97])
    kind = rng.choice(KINDS)
    fail = frozenset(rng.sample(range(max(n, 1)), k=min(n, rng.choice([0, 0, 1, 3]))))
    bad_input = rng.random() < 0.3
    ds = hr.Dataset.range(n)
    if bad_input:  # an error from the map's input (the element the map never saw)
        ds = ds.map(lambda x: x if int(x) % 11 != 7 else (_ for _ in ()).throw(KeyError(int(x))))
    ds = ds.map(_fn(kind, fail))
    if not fused:
        ds = ds.filter(lambda *a: True)
    return ds.batch(rng.choice([1, 3, 8, 32]), drop_remainder=rng.random() < 0.3), n


def _drain(it, limit: int = 400) -> list:
    """Everything ``it`` gives: batches as lists, errors as their message with notes."""
    out = []
    for _ in range(limit):
        try:
            b = next(it)
        except StopIteration:
            out.append("end")
            return out
        except Exception as e:  # compared by message and notes
            out.append(("error", type(e).__name__, str(e), tuple(getattr(e, "__notes__", ()))))
            continue
        out.append(_plain(b))
    raise AssertionError("no end after 400 steps")


def _plain(b) -> object:
    if isinstance(b, dict):
        return {k: _plain(v) for k, v in sorted(b.items())}
    if isinstance(b, tuple):
        return tuple(_plain(v) for v in b)
    return (b.dtype.str, b.shape, b.tolist())


@pytest.mark.parametrize("seed", range(90))
def test_fused_fill_matches_the_per_element_path(seed: int) -> None:
    fused, _ = _pipeline(seed, fused=True)
    plain, _ = _pipeline(seed, fused=False)
    got, want = _drain(iter(fused)), _drain(iter(plain))
    # the unfused pipeline's notes name the filter nowhere: the same map stage raises in both
    assert got == want


@pytest.mark.parametrize("seed", range(40))
def test_a_state_at_every_step_restores_the_rest(seed: int) -> None:
    ds, _ = _pipeline(seed, fused=True)
    full = _drain(iter(ds))
    it = iter(ds)
    for step in range(len(full)):
        state = it.get_state()
        restored = iter(_pipeline(seed, fused=True)[0])
        restored.set_state(state)
        assert _drain(restored) == full[step:], f"seed {seed}: restore at step {step}"
        restored.close()
        if full[step] == "end":
            break
        _drain_one(it)
    it.close()


def _drain_one(it) -> None:
    try:
        next(it)
    except Exception:  # the step's error, as in the full run
        pass


def test_a_fused_map_error_names_the_map_and_the_element_and_keeps_the_batch() -> None:
    def f(x):
        if int(x) == 5:
            raise ValueError("bad")
        return x

    it = iter(hr.Dataset.range(12).map(f, name="check").batch(4))
    assert next(it).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="bad") as info:
        next(it)
    assert any("map(check)" in n and "element 5" in n for n in info.value.__notes__)
    assert next(it).tolist() == [4, 6, 7, 8]  # the batch goes on with what it had: nothing lost or repeated
    assert next(it).tolist() == [9, 10, 11]


def test_an_element_larger_than_the_batch_reservation_is_charged_before_the_next_pull() -> None:
    """The fill stops after an element larger than the room per element; the batch charges it and makes room
    before pulling again: the assembly account never holds less than its items while the map runs."""
    seen: list[tuple[int, int]] = []
    it_box: list = []

    def f(x):
        i = int(x)
        if it_box and i % 8:
            stats = it_box[0].memory_stats()
            held = sum(s["current_bytes"] for name, s in stats["stages"].items() if "assembly" in name)
            seen.append((i, held))
        return np.zeros(1000 * (1 + (i % 8 == 3) * 50), np.uint8)  # element 3 of every 8 is 51x larger

    it = iter(hr.Dataset.range(64).map(f).padded_batch(8, padded_shapes=[None]))  # (the same batch loop)
    it_box.append(it)
    sizes = [int(b.nbytes) for b in it]
    assert sizes == [8 * 51_000] * 8 and len(seen) == 8 * 7
    # inside each batch, the items before the call are charged: at least 1000 bytes per item already pulled,
    # and the large one (position 3) charged in full once pulled
    for i, held in seen:
        j = i % 8
        assert held >= j * 1000 + (50_000 if j > 3 else 0), (i, held)


@pytest.mark.parametrize("args", [(0, 3 * 4096 + 5), (7, 2 * 4096 + 900, 3), (10_000, -3, -2),
                                  (2 ** 62, 2 ** 62 + 9000, 7)])
def test_range_states_around_chunk_boundaries(args: tuple[int, ...]) -> None:
    want = list(range(*args))
    positions = sorted({p for c in range(len(want) // _RangeIterator.CHUNK + 1)
                        for p in (c * _RangeIterator.CHUNK - 1, c * _RangeIterator.CHUNK, c * _RangeIterator.CHUNK + 1)
                        if 0 <= p <= len(want)} | {len(want)})
    it = iter(hr.Dataset.range(*args))
    taken = 0
    for p in positions:
        while taken < p:
            x = next(it)
            assert type(x) is np.int64 and int(x) == want[taken]
            taken += 1
        restored = iter(hr.Dataset.range(*args))
        restored.set_state(it.get_state())
        assert [int(v) for v in restored] == want[p:]
    assert taken == len(want)
    with pytest.raises(StopIteration):
        next(it)


def _assembly_bytes(it) -> int:
    stats = it.memory_stats()
    return sum(s["current_bytes"] for name, s in stats["stages"].items() if "assembly" in name)


def test_a_small_batch_renews_its_reservation_and_gives_it_back_at_the_end_and_on_close() -> None:
    """A small batch settles its output and takes the next batch's room in one step (``Reservation.settle(...,
    renew=)``): between next() calls the stage holds room for one batch's items and output, never more, and that
    room is given back when the input ends, on close() and on set_state() (a budget of its own: exact figures)."""
    ds = hr.Dataset.range(100).map(lambda x: x * 2).batch(8).with_options(hr.Options(memory_budget="64MiB"))
    it = iter(ds)
    next(it)
    assert 0 < _assembly_bytes(it) <= 2 * 8 * 8  # the next batch's 8 items of 8 B and its 64 B output
    it.set_state(it.get_state())
    assert _assembly_bytes(it) == 0
    assert [b.tolist() for b in it][-1] == [192, 194, 196, 198]
    assert _assembly_bytes(it) == 0 and it.memory_stats()["current_bytes"] == 0
    it2 = iter(ds)
    next(it2)
    assert it2.memory_stats()["current_bytes"] > 0
    it2.close()
    assert it2.memory_stats()["current_bytes"] == 0


def test_no_renewal_inside_the_budgets_reserve_or_for_large_batches() -> None:
    """Renewing is only for room that is free anyway: a batch that would reach into the budget's reserve (1/16),
    or a batch of 1 MiB or more (lent buffers, ``batch_buffers``), reserves at its next start instead."""
    tight = hr.Dataset.range(64).map(lambda x: np.zeros(1000, np.uint8)).batch(8)
    it = iter(tight.with_options(hr.Options(memory_budget=17_000)))  # 16 KB reaches into the 1 KB reserve
    next(it)
    assert _assembly_bytes(it) == 0
    assert sum(len(b) for b in it) == 56
    big = hr.Dataset.range(8).map(lambda x: np.zeros(300_000, np.uint8)).batch(4)
    it = iter(big.with_options(hr.Options(memory_budget="64MiB")))
    kept = next(it)  # (a batch the consumer dropped would come back as an idle lent buffer, charged)
    assert _assembly_bytes(it) == 0 and kept.shape == (4, 300_000)
    it.close()
