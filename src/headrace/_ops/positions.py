"""Advancing an iterator by positions: a restore's fast-forward, one rule for every stage.

A position is one ``__next__`` call that returned an element or raised: an element that raises counts as one
(it did in the run that saved the state, where it was delivered, as its error, in its place); the end of the
input ends the advance early. ``Stage.skip_ahead`` (which sources override to seek), ``batch``'s
skip of whole batches and a restored parallel stage's or shuffle's ``forward`` (:func:`fast_forward`) all
advance by :func:`advance`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def advance(step: Callable[[], Any], n: int, drop: Callable[[Any], None] | None = None) -> None:
    """Call ``step`` for ``n`` positions (an element that raises counts as one; the end stops early);
    ``drop`` is given each element skipped (to release what it holds)."""
    for _ in range(n):
        try:
            out = step()
        except StopIteration:
            return
        except Exception:
            continue
        if drop is not None:
            drop(out)


def fast_forward(it: Any, n: int) -> None:
    """Advance ``it`` by ``n`` positions: its ``skip_ahead`` (a ``Stage``'s, which a source may
    override to seek), else :func:`advance` over ``__next__``."""
    skip = getattr(it, "skip_ahead", None)
    if skip is not None:
        skip(n)
        return
    advance(it.__next__, n)
