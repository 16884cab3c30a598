"""``headrace._deps.require``: an optional dependency imported once, from any thread."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from headrace import _deps


def test_a_module_another_thread_is_still_importing_is_waited_for(tmp_path, monkeypatch):
    """Threads that decode their first images at once all call ``require("cv2")``: one imports, and the others
    found the half-made module in ``sys.modules`` ("partially initialized module 'cv2' has no attribute
    'resize'", seen by bench/peers.py)."""
    (tmp_path / "slow_dep.py").write_text("import time\ntime.sleep(0.5)\ndef resize():\n    return 'done'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(_deps.EXTRAS, "slow_dep", ("image", "slow-dep"))
    monkeypatch.delitem(sys.modules, "slow_dep", raising=False)
    got: list[object] = []

    def first() -> None:
        got.append(_deps.require("slow_dep", "test").resize())

    t = threading.Thread(target=first)
    t.start()
    deadline = time.monotonic() + 10
    while "slow_dep" not in sys.modules and time.monotonic() < deadline:
        time.sleep(0.001)
    assert "slow_dep" in sys.modules  # the first thread is inside the import now
    second = _deps.require("slow_dep", "test")
    assert second.resize() == "done"
    t.join(10)
    assert got == ["done"]


def test_a_missing_module_names_the_extra_that_installs_it(monkeypatch):
    monkeypatch.setitem(_deps.EXTRAS, "no_such_dep_here", ("hdf5", "no-such-dep"))
    with pytest.raises(ImportError, match=r"pip install 'headrace\[hdf5\]'") as info:
        _deps.require("no_such_dep_here", "HDF5Dataset")
    assert info.value.extra == "hdf5" and "HDF5Dataset" in str(info.value)
