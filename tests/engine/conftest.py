"""Fixtures of the ``_ops`` tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def auto_picks_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``executor="auto"`` decides for processes whatever its measurement of the function says: a test whose
    case is "auto chose processes" has it on a loaded machine too (where a GIL-bound function's thread probe
    can say threads), while ``auto``'s measuring phase still runs first."""
    from headrace._engine.pool import executor

    for name in ("CPU_BOUND_SHARE", "MIN_OVERLAP", "GIL_HELD_SHARE", "MIN_PROCESS_CALL_S", "GIL_SLOWDOWN"):
        monkeypatch.setattr(executor, name, 0.0)
