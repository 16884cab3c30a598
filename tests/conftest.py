"""Shared test helpers: comparing elements strictly (values, dtypes, structure)."""

from __future__ import annotations

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


def wait_no_threads(timeout_s: float = 1.0) -> list[threading.Thread]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [t for t in headrace_threads() if t.is_alive()]
        if not alive:
            return []
        time.sleep(0.01)
    return [t for t in headrace_threads() if t.is_alive()]


@pytest.fixture(autouse=True)
def _no_leaked_threads():
    """Every test must leave no headrace thread running (iterators closed or collected)."""
    yield
    if not headrace_threads():
        return
    import gc

    gc.collect()
    leaked = wait_no_threads(2.0)
    assert not leaked, f"threads left running: {[t.name for t in leaked]}"


def pytest_report_header(config: pytest.Config) -> str:
    """Every run names the machine it ran on (read at run time), so a suite time quoted from it names it too."""
    from headrace._machine import machine_line

    return machine_line()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The machine again at the end: ``pytest -q`` (the README's test command) prints no header."""
    from headrace._machine import machine_line

    terminalreporter.write_line(machine_line())


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
