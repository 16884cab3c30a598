"""Byte counts: parsing ``"512MiB"``, formatting for messages, a process's resident size, the default budget."""

from __future__ import annotations

import re

import psutil

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: int | float | str, what: str = "memory_budget") -> int:
    """Parse a byte count: an int, or a string like ``"512MiB"``, ``"2GB"``, ``"1.5 GiB"``, ``"1024"``.

    Units: B, KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB (powers of 1024); case-insensitive.
    Raises ``ValueError`` naming ``what`` for anything else or a value < 1 byte.
    """
    if isinstance(value, bool):
        raise TypeError(f"{what}={value!r}: expected a byte count (int) or a string like '512MiB'")
    if isinstance(value, int | float):
        n = int(value)
    elif isinstance(value, str):
        m = _SIZE_RE.match(value)
        unit = m.group(2).lower() if m else None
        if not m or unit not in _UNITS:
            raise ValueError(f"{what}={value!r} is not a size; use bytes (e.g. 268435456) or a number with "
                             "a unit: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (e.g. '256MiB')")
        n = int(float(m.group(1)) * _UNITS[unit])
    else:
        raise TypeError(f"{what}={value!r}: expected a byte count (int) or a string like '512MiB'")
    if n < 1:
        raise ValueError(f"{what}={value!r} must be at least 1 byte; use e.g. '256MiB'")
    return n


def format_bytes(n: float) -> str:
    """``format_bytes(268435456) == '256.0 MiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of this process (or ``pid``) in bytes (psutil); 0 if it is gone."""
    try:
        return int((psutil.Process(pid) if pid else psutil.Process()).memory_info().rss)
    except psutil.Error:
        return 0


def default_budget_bytes() -> int:
    """50% of the memory available now (``psutil.virtual_memory().available``)."""
    return max(1, psutil.virtual_memory().available // 2)
