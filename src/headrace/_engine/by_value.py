"""Elements saved *by value* in an iterator state, for the one case positions cannot describe.

A stage that holds part of its input (a batch being gathered, a batch being unbatched, the element that
opened an interleave slot) normally restores by re-reading its input from a saved position. Below a
``deterministic=False`` parallel stage, or across an event a replay may not repeat, the re-read can deliver
other elements in that window, so such a stage saves what it holds instead (at most one batch).

Encoding is deferred: a stage puts a :class:`Deferred` (a reference) in its state, which costs nothing when
the state is only a parallel stage's internal snapshot (taken per element there and dropped soon after);
:func:`materialize` turns it into pickled (protocol 5), base64-encoded text where a state is kept or handed
out (``Iterator.get_state``, a shuffle's checkpoints), once per held value. The states of pipelines without
``deterministic=False`` never contain data.
"""

from __future__ import annotations

import base64
import pickle
from typing import Any

from .._errors import StateError


class Deferred:
    """A value to be saved by value if (and when) the state holding it is kept."""

    __slots__ = ("_text", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        self._text: str | None = None

    def text(self) -> str:
        if self._text is None:
            self._text = base64.b64encode(pickle.dumps(self.value, protocol=5)).decode("ascii")
        return self._text


def materialize(state: Any) -> Any:
    """``state`` with every :class:`Deferred` encoded (JSON-serializable); other values unchanged."""
    if isinstance(state, Deferred):
        return state.text()
    if isinstance(state, dict):
        return {k: materialize(v) for k, v in state.items()}
    if isinstance(state, list):
        return [materialize(v) for v in state]
    return state


def decode(saved: Any, what: str) -> Any:
    """The value saved by :class:`Deferred` (as it is, or as the text :func:`materialize` made of it)."""
    if isinstance(saved, Deferred):
        return saved.value
    try:
        return pickle.loads(base64.b64decode(saved.encode("ascii")))
    except Exception as e:
        raise StateError(f"{what}: the elements saved in the state cannot be read back ({e}); restore a state "
                         "saved by get_state() of this pipeline") from e
