"""Promise 1, as the OS sees it: RSS growth <= budget x 1.1 + 64 MiB, tracked peak <= budget, overdraft 0.

Every pipeline runs in its own process (``tests/promises/child.py``), RSS of the process and its children
sampled every 2 ms. First the pipelines issue 10 reported over the cap (each streams >= 8x its budget),
then a fast subset of generated shapes (``bench/promises.py`` runs hundreds).
"""

from __future__ import annotations

import pytest

from tests.promises.harness import check_memory
from tests.promises.shapes import random_shape, tight_map_shape, tight_process_map_shape

MiB = 1024**2


def _shape(n, sizes, source, stages, budget_mib=256):
    return {"seed": 0, "n": n, "sizes": sizes, "source": source, "stages": stages, "budget": budget_mib * MiB}


def _interleave16() -> dict:
    return {"kind": "interleave", "files": 16, "cycle_length": 16, "parallel": True, "deterministic": True}


OBSERVED = {
    # parallel interleave(cycle_length=16) over files of 4 MiB / 16 MiB records; 8 MiB records in 512 MiB
    "interleave16-4MiB": _shape(512, {"kind": "fixed", "small": 4 * MiB}, _interleave16(), []),
    "interleave16-16MiB": _shape(128, {"kind": "fixed", "small": 16 * MiB}, _interleave16(), []),
    "interleave16-8MiB-512MiB": _shape(512, {"kind": "fixed", "small": 8 * MiB}, _interleave16(), [], 512),
    # parallel map with 16 threads whose outputs are 10x their inputs (4 -> 40 MiB)
    "map16-blowup10": _shape(64, {"kind": "fixed", "small": 4 * MiB}, {"kind": "range"},
                             [{"op": "map", "parallel": 16, "deterministic": True, "blowup": 10.0}]),
    # map(4 MiB) -> batch(16) -> prefetch(2)
    "map-batch16-prefetch2": _shape(512, {"kind": "fixed", "small": 4 * MiB}, {"kind": "range"},
                                    [{"op": "map", "parallel": 2, "deterministic": True, "blowup": 1.0},
                                     {"op": "batch", "size": 16, "parallel": None},
                                     {"op": "prefetch", "buffer": 2}]),
    # map on 2 worker processes (their RSS is sampled with the parent's), outputs twice their inputs
    "map-process-blowup2": _shape(96, {"kind": "fixed", "small": 4 * MiB}, {"kind": "range"},
                                  [{"op": "map", "parallel": 2, "deterministic": True, "blowup": 2.0,
                                    "executor": "process"}, {"op": "prefetch", "buffer": 2}], 192),
    # padded_batch whose first row in each batch is tiny and the rest large
    "padded-first-row-tiny": _shape(512, {"kind": "first_small", "small": 8, "large": 4 * MiB, "period": 16},
                                    {"kind": "range"}, [{"op": "padded_batch", "size": 16}]),
    # issue 22: batches of half the budget under prefetch(2) (tracked 380 MiB, 1.8 GB overdrawn: the prefetch
    # reserved room for each batch while the batch stage still held it); rows of 4 MiB with their id
    "padded-first-row-tiny-batch32-prefetch2": _shape(
        512, {"kind": "first_small", "small": 8, "large": 4 * MiB - 16, "period": 32}, {"kind": "range"},
        [{"op": "padded_batch", "size": 32}, {"op": "prefetch", "buffer": 2}]),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(OBSERVED))
def test_pipelines_that_went_over_the_cap_stay_inside_it(name):
    verdict = check_memory(OBSERVED[name])
    assert verdict.ok, (verdict.kind, verdict.detail, verdict.figures)
    assert verdict.figures["overdraft"] == 0


@pytest.mark.parametrize("seed", range(6))
def test_generated_shapes_stay_inside_the_cap(seed):
    shape = random_shape(1000 + seed, max_stream_bytes=512 * MiB)
    verdict = check_memory(shape)
    assert verdict.ok, (verdict.kind, verdict.detail, verdict.figures, shape)


@pytest.mark.parametrize("seed", [27, 34, 188, 758])
def test_shapes_the_sweep_found_over_the_cap_stay_inside_it(seed):
    """Seeds 27 and 34: 1-6 MiB elements of many sizes fragmented glibc's heaps (RSS over the cap with the
    tracked peak inside it: the mmap threshold is now 1 MiB); 188: a shuffle filled its guessed share before
    a map tripling each element sized its batch, which then went over the budget; 758: 4 MiB records through
    a memory cache into batch(4) under 6 MiB: the batch charged its first element (8 MiB with the cache's)
    before it found that four could never fit (now refused before that charge)."""
    verdict = check_memory(random_shape(seed))
    assert verdict.ok, (verdict.kind, verdict.detail, verdict.figures)
    assert verdict.figures["overdraft"] == 0


# Seeds of tight_map_shape: 12 MiB outputs under 19.9 MiB, 4 calls, "auto" (tracked peak 24 MiB, 4.1 MiB
# overdrawn: a call admitted once the first output's size was known still had the reservation it asked for
# before, empty); 8 MiB under 10.1 and 4 MiB under 6.9 MiB on threads (refused as infeasible after such a
# miss); 4 MiB under 5 MiB on 4 processes (a worker process does not fit: a clear refusal).
@pytest.mark.parametrize("seed", [5, 7, 1, 4])
def test_large_outputs_of_small_inputs_under_a_budget_for_one_stay_inside_it(seed):
    shape = tight_map_shape(seed)
    verdict = check_memory(shape)
    allowed = {"ok", "refused"} if shape["stages"][0]["executor"] == "process" else {"ok"}
    assert verdict.kind in allowed, (verdict.kind, verdict.detail, verdict.figures, shape)
    assert verdict.figures["overdraft"] == 0 and verdict.figures["tracked_peak"] <= shape["budget"]


# Seeds of tight_process_map_shape that went over: 16 MiB outputs on 4 processes under 92 MiB (tracked peak
# 96.9 MiB), 8 MiB on AUTOTUNE processes under 55.3 MiB (62.9), 24 MiB on 4 under 126.7 MiB (131.0): the calls
# admitted while the first one still started its worker reserved the guess of 64 B and waited for a worker
# inside the executor, where the probe's top-up did not reach them. A refusal may only say that one worker and
# one call cannot fit (the worker's size is this machine's interpreter).
@pytest.mark.parametrize("seed", [13, 14, 17])
def test_large_outputs_on_worker_processes_are_charged_before_their_calls_run(seed):
    shape = tight_process_map_shape(seed)
    verdict = check_memory(shape)
    assert verdict.kind == "ok" or (verdict.kind == "refused" and "one worker process" in verdict.detail), (
        verdict.kind, verdict.detail, verdict.figures, shape)
    assert verdict.figures["overdraft"] == 0 and verdict.figures["tracked_peak"] <= shape["budget"]
