"""``Dataset.pack`` / ``concat_then_split``: generated cases unpacked by segment_ids give back exactly the input
sequences (truncated as documented), each once, in the order of a reference first fit; restores at every
position and restores of restores give the uninterrupted run's rest; bad input raises one-line errors naming
the stage and the value; the memory budget holds (RSS, in a subprocess)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import headrace as hr
from headrace._ops.pack import DEFAULT_PACKING_BINS

STRUCTURES = ("array", "tuple", "dict")


# ---- generated input -----------------------------------------------------------------------------------
def lengths(rng: random.Random, n: int, L: int) -> list[int]:
    """A random length distribution: short, around L, and mixed, with 0, L and > L among them."""
    kind = rng.choice(["short", "long", "mixed"])
    out = []
    for _ in range(n):
        if kind == "short":
            out.append(rng.randint(0, max(1, L // 4)))
        elif kind == "long":
            out.append(rng.randint(L // 2, 2 * L))
        else:
            out.append(rng.choice([0, 1, L, L + rng.randint(1, L), rng.randint(1, L)]))
    return out


def sequences(rng: random.Random, n: int, L: int, structure: str) -> list:
    """Elements whose tokens are unique (a running counter), so every token says where it came from."""
    out, next_token = [], 1
    for length in lengths(rng, n, L):
        ids = np.arange(next_token, next_token + length, dtype=np.int64)
        next_token += length
        if structure == "array":
            out.append(ids)
        elif structure == "tuple":
            out.append((ids, (ids % 7).astype(np.int32)))
        else:
            out.append({"ids": ids, "mask": (ids % 2).astype(np.uint8)})
    return out


def spec_of(structure: str):
    if structure == "array":
        return hr.TensorSpec([None], np.int64)
    if structure == "tuple":
        return (hr.TensorSpec([None], np.int64), hr.TensorSpec([None], np.int32))
    return {"ids": hr.TensorSpec([None], np.int64), "mask": hr.TensorSpec([None], np.uint8)}


def dataset(elements: list, structure: str) -> hr.Dataset:
    return hr.Dataset.from_generator(lambda: iter(elements), output_signature=spec_of(structure))


def leaves(x) -> list[np.ndarray]:
    if isinstance(x, dict):
        return [x[k] for k in sorted(x)]
    if isinstance(x, tuple):
        return list(x)
    return [x]


# ---- references -----------------------------------------------------------------------------------------
def ref_first_fit(elements: list, L: int, bins: int) -> list[list[list[np.ndarray]]]:
    """Rows (lists of sequences, each a list of leaves) of first fit as documented, truncation included."""
    rows, open_bins = [], []
    for x in elements:
        seq = [a[:L] for a in leaves(x)]
        n = len(seq[0])
        if n == 0:
            continue
        for b in open_bins:
            if sum(len(s[0]) for s in b) + n <= L:
                b.append(seq)
                break
        else:
            if len(open_bins) == bins:
                rows += open_bins
                open_bins = []
            open_bins.append([seq])
    return rows + open_bins


def ref_concat(elements: list, L: int, sep, drop: bool) -> list[list[np.ndarray]]:
    """The rows' tokens (one stream per component) of concat_then_split as documented."""
    parts = [[] for _ in leaves(elements[0])] if elements else [[]]
    for x in elements:
        for k, a in enumerate(leaves(x)):
            parts[k].append(a)
            if sep is not None:
                parts[k].append(np.array([sep], a.dtype))
    streams = [np.concatenate(p) if p else np.zeros(0, np.int64) for p in parts]
    n = len(streams[0])
    cut = (n // L) * L if drop else n
    return [[s[i:i + L] for s in streams] for i in range(0, cut, L)]


def unpack(row, L: int, padding: int = 0) -> list[list[np.ndarray]]:
    """A row's sequences by segment_ids, checking positions, padding and the shapes / dtypes on the way."""
    packed, seg, pos = row
    seg_leaves, pos_leaves = leaves(seg), leaves(pos)
    for s, p in zip(seg_leaves, pos_leaves):
        assert s.shape == p.shape == (L,) and s.dtype == p.dtype == np.int32
        assert np.array_equal(s, seg_leaves[0]) and np.array_equal(p, pos_leaves[0])
    seg, pos = seg_leaves[0], pos_leaves[0]
    used = int((seg > 0).sum())
    assert (seg[:used] > 0).all() and (seg[used:] == 0).all(), "padding only after the last segment"
    assert (pos[used:] == 0).all()
    out = []
    for k in range(1, int(seg.max(initial=0)) + 1):
        where = np.flatnonzero(seg == k)
        assert len(where) > 0 and np.array_equal(where, np.arange(where[0], where[0] + len(where))), seg
        assert np.array_equal(pos[where], np.arange(len(where)))
        out.append([a[where] for a in leaves(packed)])
    for a in leaves(packed):
        assert a.shape == (L,)
        assert (a[used:] == padding).all()
    return out


def same_rows(got: list, want: list) -> bool:
    return len(got) == len(want) and all(
        len(g) == len(w) and all(all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(gs, ws))
                                 for gs, ws in zip(g, w)) for g, w in zip(got, want))


CASES = [(seed, STRUCTURES[seed % 3], random.Random(seed).choice([1, 3, 8, 32]),
          random.Random(seed + 100).choice([1, 2, 4, 16])) for seed in range(24)]


@pytest.mark.parametrize("seed,structure,L,bins", CASES)
def test_first_fit_rows_unpack_to_the_inputs_in_order(seed, structure, L, bins):
    rng = random.Random(seed)
    elements = sequences(rng, rng.randint(0, 60), L, structure)
    ds = dataset(elements, structure).pack(L, num_packing_bins=bins, padding_value=-1 if structure == "array" else 0)
    assert [s.shape.dims for s in leaves(ds.element_spec[0])] == [(L,)] * len(leaves(spec_of(structure)))
    got = [unpack(row, L, padding=-1 if structure == "array" else 0) for row in ds]
    want = ref_first_fit(elements, L, bins)
    assert same_rows(got, want)
    # each input token (truncated as documented) exactly once
    tokens = np.concatenate([s[0] for r in got for s in r] or [np.zeros(0, np.int64)])
    expected = np.concatenate([leaves(x)[0][:L] for x in elements] or [np.zeros(0, np.int64)])
    assert sorted(tokens.tolist()) == expected.tolist()
    again = [unpack(row, L, padding=-1 if structure == "array" else 0) for row in ds]
    assert same_rows(again, got), "same input, same rows"


@pytest.mark.parametrize("seed", range(8))
def test_concat_then_split_rows_are_the_joined_stream_cut(seed):
    rng = random.Random(seed)
    structure = STRUCTURES[seed % 3]
    L = rng.choice([1, 4, 16])
    sep = rng.choice([None, 99])
    drop = rng.random() < 0.5
    elements = sequences(rng, rng.randint(1, 40), L, structure)
    ds = dataset(elements, structure).concat_then_split(L, separator=sep, drop_remainder=drop)
    with iter(ds) as it:
        rows = list(it)
        figures = it.explain()["tree"]["figures"]
    want = ref_concat(elements, L, sep, drop)
    total = sum(len(leaves(x)[0]) + (sep is not None) for x in elements)
    assert figures["dropped_tokens"] == (total % L if drop else 0)
    assert figures["tokens"] == total - figures["dropped_tokens"]
    assert len(rows) == len(want)
    for row, w in zip(rows, want):
        pieces = unpack(row, L)
        for k in range(len(w)):
            assert np.array_equal(np.concatenate([p[k] for p in pieces]), w[k])
        if sep is not None:  # a segment ends at a separator, or at the row's end
            ids = leaves(row[0])[0]
            seg = leaves(row[1])[0]
            for end in np.flatnonzero(np.diff(seg) != 0):
                assert seg[end] == 0 or ids[end] == sep


def test_the_defaults_and_the_element_spec():
    ds = dataset([np.arange(3)], "array").pack(5)
    assert ds.element_spec == (hr.TensorSpec([5], np.int64), hr.TensorSpec([5], np.int32),
                               hr.TensorSpec([5], np.int32))
    assert ds.cardinality() == hr.UNKNOWN_CARDINALITY
    assert hr.Dataset.range(3).map(lambda i: np.arange(i)).repeat().pack(4).cardinality() == hr.INFINITE_CARDINALITY
    assert DEFAULT_PACKING_BINS == 16
    spec = dataset([], "dict").pack(7).element_spec
    assert spec[0] == {"ids": hr.TensorSpec([7], np.int64), "mask": hr.TensorSpec([7], np.uint8)}
    assert spec[1] == {"ids": hr.TensorSpec([7], np.int32), "mask": hr.TensorSpec([7], np.int32)}


def test_explain_reports_the_packing_efficiency():
    elements = [np.arange(n) for n in (3, 2, 1, 0, 9)]
    with iter(dataset(elements, "array").pack(4, num_packing_bins=2)) as it:
        rows = list(it)
        figures = it.explain()["tree"]["figures"]
        text = str(it.explain())
    tokens = sum(int((r[1] > 0).sum()) for r in rows)
    assert tokens == 3 + 2 + 1 + 4
    assert figures["packing_efficiency"] == round(tokens / (4 * len(rows)), 4)
    assert figures["empty_sequences"] == 1 and figures["truncated_tokens"] == 5 and figures["sequences"] == 4
    assert "packing efficiency" in text


# ---- restores --------------------------------------------------------------------------------------------
def rows_as_lists(rows) -> list:
    return [[[a.tolist() for a in leaves(part)] for part in row] for row in rows]


def run_with_restores(ds: hr.Dataset, cuts: list[int]) -> list:
    """Iterate ``ds``, restoring into a fresh iterator (JSON round trip) after each count in ``cuts``."""
    out, it = [], iter(ds)
    for cut in cuts:
        for _ in range(cut):
            x = next(it, None)
            if x is None:
                break
            out.append(x)
        state = json.loads(json.dumps(it.get_state()))
        it.close()
        it = iter(ds)
        it.set_state(state)
    out += list(it)
    it.close()
    return rows_as_lists(out)


@pytest.mark.parametrize("seed", range(6))
def test_restores_at_every_position_and_restores_of_restores(seed):
    rng = random.Random(seed)
    structure = STRUCTURES[seed % 3]
    L = rng.choice([3, 8])
    elements = sequences(rng, rng.randint(20, 90), L, structure)  # > CHECKPOINT_EVERY pulls in some cases
    if seed % 2:
        ds = dataset(elements, structure).pack(L, num_packing_bins=rng.choice([1, 3]))
    else:
        ds = dataset(elements, structure).concat_then_split(L, separator=rng.choice([None, 0]))
    whole = rows_as_lists(ds)
    for k in range(len(whole) + 1):
        assert run_with_restores(ds, [k]) == whole, f"restored after {k} rows"
    for _ in range(6):
        cuts = [rng.randint(0, 4) for _ in range(rng.randint(2, 4))]
        assert run_with_restores(ds, cuts) == whole, f"restores after {cuts}"


def _shuffled_pipeline(rng: random.Random) -> tuple:
    """A seeded ``shuffle`` whose buffer the budget cuts to a few elements (each 32-64 KiB, truncated to one
    row), a ``filter`` and ``pack`` over it: built afresh for each iterator (``reshuffle_each_iteration``
    makes each ``iter`` of one dataset another epoch; a state names its own). Returns (make, n)."""
    n, size = rng.randint(14, 26), rng.choice([32, 64]) * 1024
    L, bins, seed, mod = rng.choice([8, 16]), rng.randint(1, 4), rng.randint(0, 99), rng.choice([1, 2])
    budget = rng.randint(16, 24) * size

    def make() -> hr.Dataset:
        return (hr.Dataset.range(n).map(lambda i: np.full(size // 8, i, dtype=np.int64))
                .shuffle(64, seed=seed).filter(lambda x: x[0] % mod == 0).pack(L, num_packing_bins=bins)
                .with_options(hr.Options(memory_budget=budget)))
    return make, n


def _row_ids(rows: list) -> list[int]:
    """The first token of each segment of each row: the element ids, in the order the rows hand them out."""
    out = []
    for packed, segment_ids, _ in rows:
        for seg in range(1, int(segment_ids.max(initial=0)) + 1):
            out.append(int(packed[segment_ids == seg][0]))
    return out


@pytest.mark.filterwarnings("ignore::headrace.MemoryBudgetWarning")  # the shuffle runs with the smaller buffer
@pytest.mark.parametrize("seed", range(3))
def test_restores_of_restores_over_a_budget_limited_seeded_shuffle(seed):
    """Below a seeded shuffle whose buffer the budget cuts, the first state saves the held sequences by value;
    restored, the only checkpoint is at the restored pull count, after the held sequences: a second state must
    not name it as the place to re-read them from. Every pair of stops (k1 <= k2): restore at k1, read to k2,
    restore again, read to the end: exactly the uninterrupted rows."""
    make, n = _shuffled_pipeline(random.Random(seed))
    with iter(make()) as it:
        rows = list(it)
    whole = _row_ids(rows)
    assert len(whole) >= n // 2, whole
    by_value = 0
    for k1 in range(len(rows) + 1):
        for k2 in range(k1, len(rows) + 1):
            got, state = [], None
            for stop in (k1, k2, None):
                with iter(make()) as it:
                    if state is not None:
                        it.set_state(state)
                    while stop is None or len(got) < stop:
                        x = next(it, None)
                        if x is None:
                            break
                        got.append(x)
                    if stop is not None:
                        text = json.dumps(it.get_state())
                        by_value += '"held"' in text
                        state = json.loads(text)
            assert _row_ids(got) == whole, f"restored at row {k1}, then again at row {k2}"
    assert by_value, "no state saved the held sequences by value: the case this test is for did not arise"


class _Slow:
    def __call__(self, x):
        return x


def test_below_a_nondeterministic_map_the_held_sequences_are_saved_by_value():
    rng = random.Random(7)
    elements = sequences(rng, 80, 6, "dict")
    ds = dataset(elements, "dict").map(_Slow(), num_parallel_calls=2, deterministic=False).pack(6, num_packing_bins=3)
    want = sorted(leaves(x)[0][:6].tolist() for x in elements if len(leaves(x)[0]))
    for cut in (0, 1, 5, 11):
        got, it = [], iter(ds)
        for _ in range(cut):
            got.append(next(it))
        state = it.get_state()
        assert "held" in json.dumps(state) or cut == 0
        state = json.loads(json.dumps(state))
        it.close()
        with iter(ds) as it2:
            it2.set_state(state)
            got += list(it2)
        seqs = sorted(s[0].tolist() for row in got for s in unpack(row, 6))
        assert seqs == want, f"each sequence exactly once across the restore after {cut} rows"


# ---- bad input -------------------------------------------------------------------------------------------
def _one_line(e: BaseException) -> str:
    msg = str(e)
    assert "\n" not in msg, msg
    return msg


@pytest.mark.parametrize("kwargs,error,words", [
    ({"sequence_length": 0}, ValueError, ["pack(sequence_length)=0", ">= 1"]),
    ({"sequence_length": -3}, ValueError, ["pack(sequence_length)=-3"]),
    ({"sequence_length": 2.5}, TypeError, ["pack(sequence_length)=2.5", "integer"]),
    ({"sequence_length": 4, "num_packing_bins": 0}, ValueError, ["pack(num_packing_bins)=0"]),
    ({"sequence_length": 4, "num_packing_bins": "8"}, TypeError, ["pack(num_packing_bins)='8'"]),
    ({"sequence_length": 4, "padding_value": "x"}, TypeError, ["pack", "padding_value", "'x'"]),
])
def test_bad_arguments_raise_one_line_errors(kwargs, error, words):
    with pytest.raises(error) as e:
        dataset([], "array").pack(**kwargs)
    msg = _one_line(e.value)
    for w in words:
        assert w in msg, msg


def test_bad_specs_raise_when_the_pipeline_is_built():
    with pytest.raises(ValueError) as e:
        hr.Dataset.from_tensors(np.zeros((2, 3), np.int64)).pack(4)
    assert "pack: component 0 has shape (2, 3)" in _one_line(e.value)
    with pytest.raises(TypeError) as e:
        hr.Dataset.from_tensors(np.array([b"a"], dtype=object)).pack(4)
    assert "pack: component 0" in _one_line(e.value)
    with pytest.raises(ValueError) as e:
        dataset([], "tuple").concat_then_split(4, separator=(1, 2, 3))
    assert "concat_then_split: separator=(1, 2, 3) has 3 components" in _one_line(e.value)


@pytest.mark.parametrize("element,error,words", [
    (np.zeros((2, 3), np.int64), ValueError, ["pack(4)", "element 1", "shape (2, 3)"]),
    (np.int64(5), TypeError, ["pack(4)", "element 1", "int64"]),
    ((np.arange(3), np.arange(2)), ValueError, ["pack(4)", "element 1", "[0]: 3", "[1]: 2"]),
    ({"ids": np.arange(3), "mask": np.arange(4)}, ValueError, ["pack(4)", "element 1", "'ids'", "'mask'"]),
    (np.arange(3, dtype=np.float32), TypeError, ["pack(4)", "element 1", "float32"]),
])
def test_bad_elements_raise_one_line_errors_naming_the_stage_element_and_value(element, error, words):
    first = element if isinstance(element, tuple | dict) and not isinstance(element, np.ndarray) else np.arange(2)
    if isinstance(first, tuple):
        first = (np.arange(2), np.arange(2))
    elif isinstance(first, dict):
        first = {"ids": np.arange(2), "mask": np.arange(2)}
    ds = hr.Dataset.from_generator(lambda: iter([first, element, first])).pack(4)
    with iter(ds) as it:
        with pytest.raises(error) as e:
            list(it)
        msg = _one_line(e.value)
        for w in words:
            assert w in msg, msg
        rows = list(it)  # the iterator goes on after the bad element
    assert sum(int((r[1] if not isinstance(r[1], tuple | dict) else leaves(r[1])[0]).astype(bool).sum())
               for r in rows) == 4


def test_truncate_false_raises_for_a_long_sequence():
    ds = dataset([np.arange(3), np.arange(9)], "array").pack(4, truncate=False)
    with pytest.raises(ValueError) as e:
        list(ds)
    msg = _one_line(e.value)
    assert "pack(4): element 1 has 9 tokens, more than sequence_length=4" in msg


# ---- the memory budget (RSS in a subprocess) ----------------------------------------------------------------
BUDGET_CHILD = textwrap.dedent("""
    import json, sys, numpy as np, psutil
    import headrace as hr
    MiB = 1024 ** 2
    budget, L, bins = 48 * MiB, 256 * 1024, 8   # a row: 256 Ki tokens of int32 + ids + positions = 3 MiB
    def make(i):
        n = (i * 7919) % (3 * L)                  # 0 .. 3 L tokens: a third of them truncated
        return np.full(n, i, np.int32)
    ds = (hr.Dataset.range(96).map(make).pack(L, num_packing_bins=bins).prefetch(2)
          .with_options(hr.Options(memory_budget=budget)))
    proc = psutil.Process()
    base = proc.memory_info().rss
    peak, rows = base, 0
    with iter(ds) as it:
        for packed, seg, pos in it:
            rows += 1
            peak = max(peak, proc.memory_info().rss)
        stats = it.memory_stats()
    print(json.dumps({"growth": peak - base, "budget": budget, "peak": stats["peak_bytes"],
                      "overdraft": stats["overdraft_bytes"], "rows": rows}))
""")


def test_large_sequences_under_a_tight_budget_stay_inside_it():
    out = subprocess.run([sys.executable, "-c", BUDGET_CHILD], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["rows"] > 8
    assert r["peak"] <= r["budget"] and r["overdraft"] == 0, r
    MiB = 1024**2
    assert r["growth"] <= r["budget"] * 1.1 + 64 * MiB, r


def test_a_budget_below_the_open_bins_is_refused_naming_the_stage():
    ds = (dataset([np.arange(1000)] * 4, "array").pack(1000, num_packing_bins=64)
          .with_options(hr.Options(memory_budget=64 * 1024)))
    with pytest.raises(hr.MemoryBudgetError) as e:
        list(ds)
    assert "pack(1000)" in str(e.value)


def test_more_bins_leave_less_padding():
    """The design's reason for groups of bins (docs/design/packing.md): on text-like lengths (log-normal, mean
    about 50 tokens) the efficiency rises with num_packing_bins, and the default 16 packs 512-token rows to over
    95%."""
    rng = np.random.default_rng(0)
    seqs = [np.arange(n, dtype=np.int32) for n in np.minimum(rng.lognormal(3.5, 1.0, 3000).astype(int), 600)]
    efficiency = {}
    for bins in (1, 4, 16):
        with iter(dataset(seqs, "array").pack(512, num_packing_bins=bins)) as it:
            rows = list(it)
            efficiency[bins] = it.explain()["tree"]["figures"]["packing_efficiency"]
        assert efficiency[bins] == round(sum(int((r[1] > 0).sum()) for r in rows) / (512 * len(rows)), 4)
    assert efficiency[1] < efficiency[4] < efficiency[16], efficiency
    assert efficiency[16] > 0.95, efficiency


def test_a_restore_rereads_from_the_latest_checkpoint_before_the_held_sequences():
    """Deep into a long input the state names a checkpoint (every CHECKPOINT_EVERY pulls) at or before the first
    sequence held, not the input's start: a restore re-reads at most CHECKPOINT_EVERY elements plus a group."""
    from headrace._ops.pack import CHECKPOINT_EVERY

    elements = [np.arange(k % 5 + 1) + 10 * k for k in range(600)]
    ds = dataset(elements, "array").pack(8, num_packing_bins=2)
    whole = rows_as_lists(ds)
    for k in (len(whole) // 3, 2 * len(whole) // 3, len(whole) - 1):
        with iter(ds) as it:
            for _ in range(k):
                next(it)
            state = json.loads(json.dumps(it.get_state()))["pipeline"]
        assert state["kind"] == "pack"
        assert 0 < state["anchor"] <= state["first"] < state["anchor"] + CHECKPOINT_EVERY, state
        assert state["pulls"] - state["first"] < 8, state  # two bins of 8 tokens hold at most 16 sequences
        assert run_with_restores(ds, [k]) == whole
