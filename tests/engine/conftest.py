"""Fixtures of the ``_ops`` tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def auto_picks_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``executor="auto"`` decides for processes whatever its measurement of the function says: a test whose
    case is "auto chose processes" has it on a loaded machine too (where the measurement of a GIL-bound
    function can come out as threads), while ``auto``'s measuring phase still runs first."""
    from headrace._engine.pool import auto_executor, executor_choice

    for name in ("CPU_BOUND_SHARE", "BACK_TO_BACK", "MIN_PROCESS_CALL_S", "GIL_WAIT_SHARE"):
        monkeypatch.setattr(executor_choice, name, 0.0)
    monkeypatch.setattr(executor_choice, "RELEASED_CORES", float("inf"))
    monkeypatch.setattr(auto_executor, "PAIR_MIN_S", 0.0)  # decided on the first pairs, however short
    monkeypatch.setattr(auto_executor, "RECHECK_S", 1e9)  # and no check moves it back
