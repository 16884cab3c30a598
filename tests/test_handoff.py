"""An element handed from the stage that holds it to the stage that takes it is counted once
(``headrace._handoff``), and a reader reading ahead leaves room for the element the consumer waits for.

Issue 22, items 9 and 9: ``padded_batch(32).prefetch(2)`` (and bytes records through ``batch(32)``) of
4 MiB elements under 256 MiB reached a tracked peak of 380 MiB and overdrew 1.8 GB (the prefetch reserved
room for a batch while the batch stage held it); nested parallel ``interleave`` s of 12 MiB elements under
16 MiB went 48 MiB over, overdrew 204 MiB and stalled 32 times (each reader reserved room for an element the
reader below it held, and readers reading ahead took the room of the element the consumer waited for).
The generated cases keep the proportions at a smaller scale (the mechanism does not depend on it).
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

import headrace as hr
from headrace._memory import MemoryBudget

D = hr.Dataset
MiB = 1024**2


def _run(ds: hr.Dataset) -> tuple[list, dict]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hr.MemoryBudgetWarning)  # the prefetch shrinks and says so
        with iter(ds) as it:
            out = list(it)
            stats = it.memory_stats()
    return out, stats


def _assert_inside(stats: dict, budget: int, what: object) -> None:
    assert stats["peak_bytes"] <= budget, (f"tracked peak {stats['peak_bytes'] / MiB:.1f} MiB > budget "
                                           f"{budget / MiB:.1f} MiB", what)
    assert stats["overdraft_bytes"] == 0 and stats["stalls"] == 0, (stats["overdraft_bytes"], stats["stalls"], what)
    assert stats["current_bytes"] == 0, what


# ---- item 9: a batch of up to half the budget under the stages around it --------------------------------
def _batch_case(seed: int) -> tuple[hr.Dataset, int, list[int], dict]:
    rng = random.Random(seed)
    bs = rng.choice([8, 16, 32])
    kind = rng.choice(["padded", "bytes", "array"])
    budget = rng.choice([8, 12, 16]) * MiB
    share = rng.choice([0.3, 0.4, 0.5])        # one batch: up to half the budget (its elements + the batch)
    size = int(budget * share) // bs
    tiny = 8 if kind != "array" else size      # the first element of every batch is tiny (not for np.stack)
    n = bs * rng.randint(4, 7) + rng.choice([0, bs // 2])
    sizes = [tiny if i % bs == 0 else size for i in range(n)]

    def make(i):
        i = int(i)
        if kind == "bytes":  # (a zero byte would be stripped from the end of a numpy bytes value)
            return bytes([i % 251 + 1]) * sizes[i]
        return np.full(sizes[i], i % 251 + 1, np.uint8)

    ds = D.range(n).map(make)
    ds = ds.padded_batch(bs, padded_shapes=[None]) if kind == "padded" else ds.batch(bs)
    ds = ds.prefetch(rng.choice([1, 2, hr.AUTOTUNE]))
    if rng.random() < 0.3:
        ds = ds.prefetch(1)
    case = {"seed": seed, "kind": kind, "batch_size": bs, "element": size, "n": n, "budget": budget}
    return ds.with_options(hr.Options(memory_budget=budget)), budget, sizes, case


@pytest.mark.parametrize("seed", range(8))
def test_a_batch_of_up_to_half_the_budget_fits_the_stages_around_it_shrink(seed):
    ds, budget, sizes, case = _batch_case(seed)
    out, stats = _run(ds)
    bs = case["batch_size"]
    firsts = [int(b[0][0]) for b in out]
    assert firsts == [(i * bs) % 251 + 1 for i in range(len(out))], case
    assert sum(len(b) for b in out) == len(sizes), case
    _assert_inside(stats, budget, case)


def test_a_batch_that_cannot_fit_even_alone_is_refused_naming_stage_sizes_and_fix():
    # 16 rows of 400 KB and the stacked batch: 12.8 MB never fit 8 MiB, whatever the stages around shrink to
    ds = D.range(64).map(lambda i: np.zeros(8 if int(i) % 16 == 0 else 400_000, np.uint8))
    ds = ds.padded_batch(16, padded_shapes=[None]).prefetch(2).with_options(hr.Options(memory_budget=8 * MiB))
    with pytest.raises(hr.MemoryBudgetError, match=r"padded_batch\(16\) assembly: needs room for its 16 elements "
                                                   r"and the batch stacked from them, 32 elements of up to 390\.6 KiB "
                                                   r"at once \(12\.2 MiB\), more than the whole memory budget of "
                                                   r"8\.0 MiB .*memory_budget.* smaller batch_size"):
        _run(ds)


# ---- item 6: nested interleaves under a budget of one element ----------------------------------------
def _nested_case(seed: int) -> tuple[hr.Dataset, int, int, dict]:
    rng = random.Random(seed)
    element = rng.choice([2, 3]) * MiB
    budget = element + rng.choice([1, 2]) * MiB // 2          # room for one element, not two
    outer_calls, inner_calls = rng.choice([(2, 2), (hr.AUTOTUNE, hr.AUTOTUNE), (2, None), (None, 2),
                                           (2, hr.AUTOTUNE)])
    co, ci, per_leaf = rng.choice([2, 3]), rng.choice([1, 2]), rng.choice([1, 2])
    deterministic = rng.choice([True, False, None])
    from_generator = rng.random() < 0.5

    def leaf(j):
        if from_generator:
            def gen():
                for k in range(per_leaf):
                    yield np.full(element, k, np.uint8)
            return D.from_generator(gen, output_signature=hr.TensorSpec((element,), np.uint8))
        return D.range(per_leaf).map(lambda k: np.full(element, int(k), np.uint8))

    def inner(i):
        return D.range(2).interleave(leaf, cycle_length=ci, num_parallel_calls=inner_calls,
                                     deterministic=deterministic)

    ds = D.range(3).interleave(inner, cycle_length=co, num_parallel_calls=outer_calls, deterministic=deterministic)
    if rng.random() < 0.3:
        ds = ds.prefetch(1)
    case = {"seed": seed, "element": element, "budget": budget, "calls": (outer_calls, inner_calls),
            "cycle": (co, ci), "per_leaf": per_leaf, "deterministic": deterministic, "generator": from_generator}
    return ds.with_options(hr.Options(memory_budget=budget)), budget, 3 * 2 * per_leaf, case


@pytest.mark.parametrize("seed", range(8))
def test_nested_parallel_interleaves_run_inside_a_budget_of_one_element(seed):
    ds, budget, n, case = _nested_case(seed)
    out, stats = _run(ds)
    assert len(out) == n, case
    _assert_inside(stats, budget, case)


def test_the_issue_s_nested_interleave_runs_inside_16_mib():
    # the issue's shape: 4 x 3 x 2 elements of 12 MiB, both levels parallel, under 16 MiB
    def leaf(j):
        return D.range(2).map(lambda k: np.full(12 * MiB, int(k), np.uint8))

    ds = D.range(4).interleave(lambda i: D.range(3).interleave(leaf, cycle_length=2, num_parallel_calls=2),
                               cycle_length=2, num_parallel_calls=2)
    out, stats = _run(ds.with_options(hr.Options(memory_budget=16 * MiB)))
    assert len(out) == 24
    _assert_inside(stats, 16 * MiB, "issue 22 item 6")


# ---- the mechanism ---------------------------------------------------------------------------------------
def test_a_hand_off_moves_the_bytes_to_the_taker_of_that_source_only():
    from headrace._handoff import hand_off, taking

    budget = MemoryBudget(10_000)
    below, above = budget.account("below", 4), budget.account("above", 4)
    source, other = object(), object()
    below.reserve(300).settle(300)
    below.reserve(200).settle(200)
    reserved = above.reserve(0, charged_in=300)
    with taking(reserved, source):
        hand_off(below, 200, other)   # another stage's delivery: released, not taken
        hand_off(below, 300, source)  # the element the taker pulls: moved into its reservation, total unchanged
    assert reserved.nbytes == 300 and below.held_bytes == 0 and above.held_bytes == 300
    assert budget.stats()["current_bytes"] == 300 and budget.stats()["peak_bytes"] == 500
    reserved.settle(300)
    assert above.held_count == 1 and budget.stats()["estimate_miss_bytes"] == 0


# ---- two holding stages under a budget of about 1.5 elements ---------------------------------------------
@pytest.mark.parametrize("first, second", [("shuffle", "prefetch"), ("shuffle", "shuffle"),
                                           ("prefetch", "prefetch"), ("prefetch", "shuffle")])
def test_two_buffers_under_one_and_a_half_elements_shrink_to_one_element_without_stalls(first, second):
    # range(24).map(2 MiB).shuffle(4).prefetch(2) (or .shuffle(4).shuffle(4)) under 3 MiB took 24 s: a reader
    # of a shuffle reserved room for the element the shuffle still held, so the shuffle, empty, waited for room
    # its own next element needed until the stall breaker overdrew (1 s, 24 MiB over). A shuffle now hands
    # its element over charged and takes a charged input's element the same way.
    size, n = 256 << 10, 12  # (before the fix: 12 stalls of 1 s; a shorter STALL_S stalls under load)
    ds = D.range(n).map(lambda i: np.full(size, i, np.uint8))
    for kind in (first, second):
        ds = ds.shuffle(4, seed=1) if kind == "shuffle" else ds.prefetch(2)
    budget = 3 * size // 2
    out, stats = _run(ds.with_options(hr.Options(memory_budget=budget)))
    assert sorted(int(x[0]) for x in out) == list(range(n))
    _assert_inside(stats, budget, (first, second))
