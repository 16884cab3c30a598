"""The adapters (``to_torch``, ``StatefulDataLoader`` over it under forkserver, ``headrace.keras.adapt``,
``to_jax``, Lightning with ``headrace.lightning.ExactlyOnce``) under Ctrl-C and ``close()`` from another
thread, generated cases judged from outside (``tests/promises/adapter_child.py``): no hang, exactly the rest
after resuming from the last saved state, no thread or process left, and ``to_jax``'s copies ahead inside the
budget as RSS."""

from __future__ import annotations

import pytest

from tests.promises.adapter_child import adapter_case
from tests.promises.harness import check_adapter

# Its time bounds (close within a second, no hang) are promises that hold beside a CPU hog, so it runs beside
# the other pytest-xdist worker's tests (not marked alone).

# Seeds of adapter_case: to_torch closed from a timer (process map) and Ctrl-C (thread map); to_jax Ctrl-C and
# close() with 4-16 MiB batches (the RSS check); slow (Keras, torch and Lightning import for seconds in each
# process): Keras closed from a timer (process map), StatefulDataLoader with 2 forkserver workers (each with a
# process map) Ctrl-C, Lightning fit Ctrl-C then fit(ckpt_path=the last step's checkpoint).
SEEDS = [0, 20, 8, 13,
         *(pytest.param(seed, marks=pytest.mark.slow) for seed in (12, 16, 9))]


@pytest.mark.parametrize("seed", SEEDS)
def test_an_adapter_under_ctrl_c_or_close_from_a_thread_resumes_exactly_and_leaves_nothing(seed):
    # Issue 37: never tried. Found: to_jax kept its copying thread and pipeline after Ctrl-C inside next(); a
    # to_torch iterator closed between elements started its epoch again at the next next() (duplicates).
    case = adapter_case(seed)
    verdict = check_adapter(case)
    assert verdict.ok, (verdict.kind, verdict.detail, verdict.figures, case)
    assert verdict.figures["ended"] in ("KeyboardInterrupt", "IteratorClosedError", "end"), verdict.figures


def test_the_cases_cover_every_adapter_and_event():
    cases = [adapter_case(seed) for seed in range(40)]
    assert {(c["adapter"], c["event"]) for c in cases} >= {
        ("torch", "sigint"), ("torch", "close"), ("stateful", "sigint"), ("keras", "sigint"), ("keras", "close"),
        ("jax", "sigint"), ("jax", "close"), ("lightning", "sigint")}
    assert {c["executor"] for c in cases} == {"thread", "process"} and any(c["payload"] > 64 for c in cases)
