"""One check for headrace's versioned payloads (iterator states, training checkpoints, dataset manifests).

Each payload is a dict carrying ``"format"`` (what it is) and ``"version"`` (its layout); readers refuse
anything else with one error naming the source, the expectation and the fix.
"""

from __future__ import annotations

from typing import Any


def check_versioned(payload: Any, *, fmt: str, version: int, source: str, what: str,
                    error: type[Exception], fix: str) -> dict[str, Any]:
    """Return ``payload`` if it is a dict with ``format == fmt`` and ``version == version``.

    Raises ``error`` naming ``source`` ("not a headrace <what>" or the unsupported version) with ``fix``.
    """
    if not isinstance(payload, dict) or payload.get("format") != fmt:
        got = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise error(f"{source}: not a headrace {what} (format={got!r}, expected {fmt!r}); {fix}")
    if payload.get("version") != version:
        raise error(f"{source}: {what} version {payload.get('version')!r} is not supported (this headrace "
                    f"reads version {version}); {fix}")
    return payload
