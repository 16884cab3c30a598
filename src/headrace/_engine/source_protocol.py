"""The public iterator protocol, ``headrace.DatasetIterator``: what a source written by a user implements
(``Dataset.from_source``, docs/architecture.md, "Writing a source").

It holds the contract only. The engine's own stages derive from :class:`headrace._engine.stage.Stage` (a
subclass of this protocol), which adds shutdown, threads and replay; a user's source inherits none of it, so
the engine's machinery can change without changing the public API. ``from_source`` wraps the user's object
in a stage (``headrace._ops.from_source``).
"""

from __future__ import annotations

from typing import Any


class DatasetIterator:
    """The iterator protocol; subclass it to write a source (``Dataset.from_source``).

    Implement:

    - ``__next__()``: the next element, or ``StopIteration`` at the end (and on every call after it).
      Elements are numpy values (arrays, numpy scalars, ``bytes``) or dicts / tuples of them; Python
      ``int`` / ``float`` / ``str`` are converted like ``map`` results (int64, float32, bytes). An
      exception for one bad element propagates to the caller, and the next call must continue with the
      next element (``ignore_errors()`` relies on it).
    - ``get_state() -> dict``: where the iterator is, as a *small JSON-serializable dict of positions*
      (indices, byte offsets, file names, seeds, counters), never the buffered data itself. Include the
      settings a restore must agree with (e.g. the file list's length) so a state from another source is
      refused. Raise ``NotImplementedError`` if the source cannot be checkpointed (the default).
    - ``set_state(state)``: continue exactly after the element at which ``state`` was taken; it may be
      called on a fresh iterator or one already in use (each call fully resets it). Raise
      :class:`~headrace.StateError` for a state that does not fit (``check_state`` helps).
    - ``close()``: release files, sockets and threads; it must be idempotent and must not block for more
      than about a second. Sources without resources need not override it (the default does nothing).

    Thread safety: headrace calls ``__next__``, ``get_state`` and ``set_state`` of one iterator from one
    thread at a time (a parallel stage reads its input under a lock), so an iterator needs no locks of its
    own; ``close()`` may come from another thread (garbage collection, interpreter exit) while no other
    call runs. Each ``iter(dataset)`` calls the factory again: iterators are never shared.
    """

    def __iter__(self) -> DatasetIterator:
        return self

    def __next__(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} does not implement __next__")

    def get_state(self) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} does not support get_state")

    def set_state(self, state: dict[str, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support set_state")

    def close(self) -> None:
        """Release what the iterator holds (idempotent; the default holds nothing)."""
