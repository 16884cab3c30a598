"""close() from another thread while next() is producing an element, made deterministic: :class:`HeldNext`
stands in for the headrace iterator inside an adapter and holds its ``next()`` until the test lets it go."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import headrace as hr


class HeldNext:
    """A headrace iterator whose ``next()`` waits for ``go`` before taking the element."""

    def __init__(self, real: Any) -> None:
        self.real, self.entered, self.go = real, threading.Event(), threading.Event()

    def __next__(self) -> Any:
        self.entered.set()
        if not self.go.wait(10):
            raise TimeoutError("the test never let next() go on")
        return next(self.real)

    def get_state(self) -> Any:
        return self.real.get_state()

    def close(self) -> None:
        self.real.close()


def close_during_next(close: Callable[[], None], take: Callable[[], Any], held: HeldNext, *,
                      go_after_s: float, go_after_close: bool = False) -> Any:
    """Run ``take()`` in a thread; once its ``next()`` is held, ``close()`` in another, then after ``go_after_s``
    (``go_after_close``: once ``close()`` has returned, whatever the machine's speed) let the ``next()`` go on.
    Returns what ``take()`` returned, or the ``IteratorClosedError`` it raised."""
    got: list[Any] = []

    def taking() -> None:
        try:
            got.append(take())
        except hr.IteratorClosedError as e:
            got.append(e)

    taker, closer = threading.Thread(target=taking), threading.Thread(target=close)
    taker.start()
    if not held.entered.wait(10):
        raise TimeoutError("next() never started")
    closer.start()
    if go_after_close:
        closer.join(15)
    else:
        time.sleep(go_after_s)
    held.go.set()
    taker.join(10)
    closer.join(15)
    assert not taker.is_alive() and not closer.is_alive()
    return got[0]


def collect_holding_the_budget_lock(held: list[Any]) -> float:
    """Drop what ``held`` holds (its only reference: an iterator) and run the garbage collector while this thread
    holds the process budget's lock, as a collection inside a pipeline thread reserving memory does; the seconds
    that took (a close that waits on the lock takes 30)."""
    import gc

    from headrace._memory import process_budget

    t0 = time.monotonic()
    with process_budget()._cv:
        held.clear()
        gc.collect()
        return time.monotonic() - t0
