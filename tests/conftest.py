"""Shared test helpers: comparing elements strictly (values, dtypes, structure)."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "data"
"""Files written by TensorFlow, kept in the repository (provenance: ``tests/data/README.md``)."""


def py(x: Any) -> Any:
    """Nested numpy -> plain Python (lists, ints, floats, bytes) for readable equality checks."""
    if isinstance(x, dict):
        return {k: py(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(py(v) for v in x)
    if isinstance(x, list):
        return [py(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return x


def assert_same(a: Any, b: Any) -> None:
    """Equal structure, values and dtypes."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, tuple | list):
        assert len(a) == len(b)
        for u, v in zip(a, b):
            assert_same(u, v)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
        assert np.array_equal(a, b)
    else:
        assert a == b and getattr(a, "dtype", None) == getattr(b, "dtype", None)


def headrace_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("headrace-")]


def wait_no_threads(timeout_s: float = 1.0, collect: bool = False) -> list[threading.Thread]:
    """The headrace threads still alive after up to ``timeout_s``; ``collect``: run the garbage collector every
    0.1 s meanwhile (``gc.collect()`` does nothing while another thread's collection is running, e.g. one inside
    a finalizer that closes an iterator: one call may find nothing)."""
    import gc

    deadline = time.monotonic() + timeout_s
    collected = 0.0
    while time.monotonic() < deadline:
        alive = [t for t in headrace_threads() if t.is_alive()]
        if not alive:
            return []
        if collect and time.monotonic() - collected >= 0.1:
            gc.collect()
            collected = time.monotonic()
        time.sleep(0.01)
    return [t for t in headrace_threads() if t.is_alive()]


def _stacks(threads: list[threading.Thread]) -> str:
    """Where each of ``threads`` and every other thread is (a leak's report says what holds it)."""
    import sys
    import traceback

    frames = sys._current_frames()
    lines = []
    for t in threading.enumerate():
        frame = frames.get(t.ident or -1)
        where = "".join(traceback.format_stack(frame, limit=6)) if frame is not None else "  (no frame)\n"
        lines.append(f"--- {t.name}{' (leaked)' if t in threads else ''}:\n{where}")
    return "".join(lines)


@pytest.fixture(autouse=True)
def _no_leaked_threads():
    """Every test must leave no headrace thread running (iterators closed or collected)."""
    yield
    if not headrace_threads():
        return
    leaked = wait_no_threads(5.0, collect=True)
    assert not leaked, f"threads left running: {[t.name for t in leaked]}\n{_stacks(leaked)}"


# ---- the suite on two workers, as the README's test command runs it: `python -m pytest -q -n 2` (pytest-xdist) ---

# The unit of work a worker takes is a module (its module-scoped fixture, a torchrun job, a Ray cluster, a trained
# model, is made once, not once per worker) or one of these groups of modules: the session fixture
# ``ddp_stopped_at_step_7`` is made once, and the Ray modules never start two clusters at once.
_SHARED_GROUPS = {"tests/train/test_ddp.py": "ddp-stopped-at-step-7",
                  "tests/train/test_elastic.py": "ddp-stopped-at-step-7",
                  "tests/service/test_dispatch.py": "ray", "tests/service/test_worker.py": "ray",
                  "tests/service/test_splits.py": "ray"}


def _work_unit(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return _SHARED_GROUPS.get(module, module)


@pytest.hookimpl(optionalhook=True)  # (a hook of pytest-xdist, which may be absent)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scheduler with ``_work_unit``'s units, in collection order (see the next hook).
    (pytest-xdist's own ``--dist loadgroup`` renames node IDs, which pytest 9 no longer lets it do.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    config.option.loadscopereorder = False
    return ModuleGroups(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On an xdist worker: the units holding a ``slow`` test first (the longest work starts first, so no
    worker is left with a long unit at the end), each unit's tests together, otherwise collection order. Both
    workers collect the same order; a run without workers keeps collection order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    first: dict[str, int] = {}
    slow: set[str] = set()
    for i, item in enumerate(items):
        unit = _work_unit(item.nodeid)
        first.setdefault(unit, i)
        if item.get_closest_marker("slow") is not None:
            slow.add(unit)
    items.sort(key=lambda item: (_work_unit(item.nodeid) not in slow, first[_work_unit(item.nodeid)]))


_EXCLUSIVE: dict[str, Any] = {}
"""The machine lock's file while this worker holds it exclusively across consecutive ``alone`` tests."""


def _is_alone(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("alone") is not None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Under pytest-xdist, a test marked ``alone`` (it holds time, CPU-share or scaling bounds) runs while no
    other worker runs a test; the rest run side by side. A readers-writer lock on a file the run's workers
    share (beside their temporary directories), held from the test's setup (its module's fixtures too) to
    its teardown: ``alone`` takes it exclusively, every other test shared; the turnstile makes tests arriving
    after a waiting ``alone`` test queue behind it. The wait is at most the other worker's current test, once
    per run of consecutive ``alone`` tests (a module of them): the exclusive hold is kept from one to the next."""
    basetemp = item.config.option.basetemp  # pytest-xdist gives each worker <the run's temp dir>/<worker id>
    if not os.environ.get("PYTEST_XDIST_WORKER") or not basetemp:
        return (yield)
    shared = Path(basetemp).parent
    alone = _is_alone(item)
    machine = _EXCLUSIVE.pop("machine", None)  # (kept only when this test was the last one's alone nextitem)
    if machine is None:
        machine = (shared / "alone.lock").open("a")
        with (shared / "turnstile.lock").open("a") as turnstile:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
    try:
        return (yield)
    finally:
        if alone and _is_alone(nextitem):
            _EXCLUSIVE["machine"] = machine  # the next test is alone too: no other worker's test in between
        else:
            machine.close()  # (closing the file releases its lock)


def pytest_report_header(config: pytest.Config) -> str:
    """Every run names the machine it ran on (read at run time), so a suite time quoted from it names it too."""
    from headrace._machine import machine_line

    return machine_line()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The machine again at the end: ``pytest -q`` (the README's test command) prints no header."""
    from headrace._machine import machine_line

    terminalreporter.write_line(machine_line())


def ints_and_errors(it, kind: type[BaseException]) -> tuple[list[int], list[BaseException]]:
    """Every element of ``it`` as an int, and each ``kind`` error raised on the way (an iterator goes on after
    an element's error, as tf.data's does)."""
    got: list[int] = []
    errors: list[BaseException] = []
    while True:
        try:
            got.append(int(next(it)))
        except StopIteration:
            return got, errors
        except kind as e:
            errors.append(e)


def read_through_restores(make, chain: list[int]) -> list:
    """Elements of ``make()`` read through a chain of restores: take ``chain[0]`` elements, save the state
    (through JSON), restore it into a fresh ``iter(make())``, take ``chain[1]``, ... then the rest."""
    import json

    out: list = []
    state = None
    for take in [*chain, None]:
        with iter(make()) as it:
            if state is not None:
                it.set_state(state)
            for _ in range(take) if take is not None else iter(int, 1):
                try:
                    out.append(next(it))
                except StopIteration:
                    break
            if take is not None:
                state = json.loads(json.dumps(it.get_state()))
    return out


def straight_and_restored(make, chain: list[int]) -> tuple[list, dict, list]:
    """``(want, stats, got)``: ``make()`` read straight through (with its ``memory_stats()``) and through the
    chain of restores; MemoryBudgetWarnings (a shuffle shrunk to its budget) are expected and silenced."""
    import warnings

    import headrace as hr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hr.MemoryBudgetWarning)
        with iter(make()) as it:
            want = list(it)
            stats = it.memory_stats()
        got = read_through_restores(make, chain)
    return want, stats, got


def assert_same_order(got: list, want: list, what: object, shown: int = 6) -> None:
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    assert first is None, (f"order differs from element {first} on ({got[first:first + shown]} vs "
                           f"{want[first:first + shown]}): {what}")
