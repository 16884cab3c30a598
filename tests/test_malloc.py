"""``headrace._malloc``: heap tuning through the C library already loaded, without starting a process."""

from __future__ import annotations

import subprocess

import pytest

from headrace import _malloc


def test_finding_the_c_library_starts_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ctypes.util.find_library`` forks the interpreter (``ldconfig -p``); a pipeline starting must not."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a process was started: {args!r}")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(_malloc, "_LIBC", None)
    libc = _malloc._libc()
    _malloc.release_free_memory()
    if libc:  # glibc: the calls are there
        assert hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt")
