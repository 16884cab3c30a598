"""``headrace.Iterator`` (``headrace._iterator``): ``close()`` is fast, reports threads stuck in user code, and a
closed iterator says so (issue 15, engine review)."""

from __future__ import annotations

import threading
import time

import pytest

import headrace as hr
from tests.conftest import wait_no_threads

D = hr.Dataset


def test_close_is_fast_reports_stuck_threads_and_a_closed_iterator_says_so():
    ds = D.range(10**9)
    for _ in range(4):
        ds = ds.map(lambda x: x, num_parallel_calls=2)
    it = iter(ds)
    next(it)
    t0 = time.monotonic()
    it.close()
    assert time.monotonic() - t0 < 1.5
    assert wait_no_threads(1.0) == []
    with pytest.raises(hr.IteratorClosedError, match="closed by close"):
        next(it)

    release = threading.Event()
    stuck = iter(D.range(10).map(lambda x: release.wait(5) and x, num_parallel_calls=1))
    def wait_in_next() -> None:
        with pytest.raises(hr.IteratorClosedError):
            next(stuck)

    with pytest.warns(ResourceWarning, match=r"still running after close\(\).*headrace-map"):
        t = threading.Thread(target=wait_in_next, daemon=True)
        t.start()
        time.sleep(0.3)
        stuck.close()
    assert stuck.threads_alive and all(n.startswith("headrace-map") for n in stuck.threads_alive)
    release.set()
    t.join(5)
    assert wait_no_threads(5.0) == []
