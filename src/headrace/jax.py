"""JAX adapter: a headrace ``Dataset``'s batches as ``jax.Array`` s, global arrays on a sharding, copied ahead on
a background thread, with exact checkpoint/restore.

``to_jax(ds, sharding=None, buffer_size=2)`` iterates one iteration of ``ds`` (as ``iter(ds)``: the next
iteration number, its own shuffle order) and yields every element with its numeric numpy leaves as
``jax.Array`` s: with ``sharding=None`` placed on the default device (``jax.device_put``); with a
``jax.sharding.Sharding`` (e.g. ``NamedSharding(mesh, P("data"))``) as *global* arrays built by
``jax.make_array_from_process_local_data`` from this process's batch, which is this process's share of the
global batch (each process reads its own share, e.g. with ``ds.shard(jax.process_count(),
jax.process_index())``; the global batch is the processes' batches stacked along the sharded axis). Leaves
that are not numeric arrays (``bytes``, strings) pass through as they are.

Copying ahead: a background thread pulls a batch, places it and queues it, keeping at most ``buffer_size``
batches in flight (pulled, placed or queued, not yet handed out); their host bytes are charged to the
pipeline's memory budget (an account ``to_jax`` beside the stages, in ``memory_stats()``) until handed out. The
charge does not wait for room (``buffer_size`` bounds it; waiting could hold up the consumer the queue feeds):
the stages below see those bytes as taken and shrink their own buffers to fit. The thread is stopped by
``close()`` (also on ``with`` exit, when the iterator is garbage collected, and at interpreter exit); every
wait is timed.

State: ``get_state()`` is the position of the last batch handed to the caller (the batches copied ahead are
not counted: a restore yields them again), a small JSON dict; ``set_state(state)`` on any ``to_jax`` iterator
of the same pipeline continues with exactly the rest. An interrupt (``KeyboardInterrupt``) inside ``next()``
closes the iterator (its thread and pipeline stop), as a headrace ``Iterator`` does: the batch being handed
out may be lost, so go on from a state saved before.

Orbax: ``headrace.jax_orbax`` (``CheckpointSave`` / ``CheckpointRestore``, when Orbax is installed) saves and
restores the iterator's state inside an Orbax checkpoint.

Requires jax (``pip install 'headrace[jax]'``).
"""

from __future__ import annotations

import atexit
import math
import threading
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from ._deps import require
from ._engine.stage_support import JOIN_TIMEOUT_S
from ._errors import IteratorClosedError, StateError
from ._structure import flatten, map_structure
from ._sync import Condition, Flag
from ._versioned import check_versioned

jax = require("jax", "headrace.jax")
_sharding = require("jax.sharding", "headrace.jax")

if TYPE_CHECKING:
    from ._dataset import Dataset
    from ._iterator import Iterator as HeadraceIterator

STATE_FORMAT = "headrace.jax"
STATE_VERSION = 1
WAIT_SLICE_S = 0.05
"""How long one timed wait of the consumer or the copying thread lasts before it re-checks for close()."""

_LIVE: weakref.WeakSet[_Producer] = weakref.WeakSet()


def _batch_split(sharding: Any) -> int | None:
    """How many ways ``sharding`` splits an array's leading (batch) axis; None when it does not say (not a
    ``NamedSharding``)."""
    if not isinstance(sharding, _sharding.NamedSharding):
        return None
    spec = tuple(sharding.spec)
    if not spec or spec[0] is None:
        return 1
    axes = spec[0] if isinstance(spec[0], tuple) else (spec[0],)
    return math.prod(sharding.mesh.shape[a] for a in axes)


def _placer(sharding: Any) -> Any:
    """The function that places one numpy leaf (see the module docstring); checks what ``sharding`` needs."""
    split = _batch_split(sharding)
    processes = jax.process_count()

    def place(x: Any) -> Any:
        if isinstance(x, np.generic):
            x = np.asarray(x)
        if not isinstance(x, np.ndarray) or x.dtype.kind in "OSUV":
            return x
        if sharding is None:
            return jax.device_put(x)
        if split is not None and split > 1:
            if x.ndim == 0:
                raise ValueError(f"to_jax(sharding={sharding}): a leaf is a scalar (shape ()), which cannot be "
                                 f"split over {split} devices along a batch axis; batch the dataset (ds.batch(n)) or "
                                 "use a sharding that replicates it")
            total = x.shape[0] * processes
            if total % split:
                raise ValueError(
                    f"to_jax(sharding={sharding}): a batch of {x.shape[0]} (global batch {total} over {processes} "
                    f"process(es)) cannot be split evenly over the {split} devices of its sharded axis; make the "
                    f"batch size a multiple of {split // math.gcd(split, processes)} per process (ds.batch(n, "
                    "drop_remainder=True) keeps the last, smaller batch out)")
        return jax.make_array_from_process_local_data(sharding, x)

    return place


def _nbytes(element: Any) -> int:
    return sum(int(x.nbytes) for x in flatten(element) if isinstance(x, np.ndarray | np.generic))


class _Producer:
    """The copying thread of one run of a :class:`JaxIterator` (from a start position to the end or a stop);
    it owns the headrace iterator and closes it when it ends. Holds no reference to the ``JaxIterator``, so
    garbage collecting that stops it."""

    def __init__(self, it: HeadraceIterator, place: Any, buffer_size: int) -> None:
        self.it = it
        self.place = place
        self.buffer_size = buffer_size
        self.cv = Condition("headrace.jax to_jax queue")
        self.queue: deque[tuple[Any, dict[str, Any], int]] = deque()  # (placed batch, state after it, bytes)
        self.stop = Flag()
        self.done = False
        self.error: BaseException | None = None
        self.account = it._budget.account("to_jax", buffer_size, owner=it._ctx.tree,
                                          hint="lower to_jax(buffer_size=...) or make batches smaller")
        self.thread = threading.Thread(target=self.run, name="headrace-to_jax", daemon=True)
        _LIVE.add(self)
        self.thread.start()

    def _room(self) -> bool:
        """Wait (timed slices) until fewer than ``buffer_size`` batches are queued; False once stopped."""
        with self.cv:
            while len(self.queue) >= self.buffer_size and not self.stop.is_set():
                self.cv.wait(WAIT_SLICE_S)
            return not self.stop.is_set()

    def run(self) -> None:
        try:
            while self._room():
                try:
                    host = next(self.it)
                except StopIteration:
                    break
                state = self.it.get_state()
                nbytes = _nbytes(host)
                self.account.hold(nbytes)
                try:
                    placed = map_structure(self.place, host)
                except BaseException:
                    self.account.release(nbytes)
                    raise
                with self.cv:
                    self.queue.append((placed, state, nbytes))
                    self.cv.notify_all()
        except BaseException as e:  # handed to the consumer (an IteratorClosedError after stop() is expected)
            if not self.stop.is_set():
                self.error = e
        finally:
            with self.cv:
                self.done = True
                self.cv.notify_all()
            if self.stop.is_set():  # (at the end the queue still holds batches: take() closes the iterator)
                self.it.close()

    def take(self) -> tuple[Any, dict[str, Any]]:
        """The next queued batch and the state after it (timed waits); StopIteration at the end."""
        with self.cv:
            while not self.queue and not self.done and not self.stop.is_set():
                self.cv.wait(WAIT_SLICE_S)
            if self.queue:
                placed, state, nbytes = self.queue.popleft()
                self.account.release(nbytes)
                self.cv.notify_all()
                return placed, state
        self.it.close()  # the end, an error or close(): the pipeline and the to_jax account (its tree's) go
        if self.stop.is_set():
            raise IteratorClosedError("next() on a to_jax iterator that was closed; make a new one with to_jax(ds) "
                                      "(and set_state() a state saved before to go on)")
        if self.error is not None:
            raise self.error
        raise StopIteration

    def close(self) -> None:
        """Stop the thread (within about a second) and close the pipeline; idempotent, from any thread."""
        self.stop.set()
        self.it.close()  # a next() the thread is waiting in raises IteratorClosedError
        if self.thread is not threading.current_thread():
            self.thread.join(JOIN_TIMEOUT_S)
        self.queue.clear()


class JaxIterator:
    """Yields a headrace ``Dataset``'s elements as ``jax.Array`` s, copying ahead (see :func:`to_jax`).

    >>> it = hr.jax.to_jax(ds.batch(64)); batch = next(it); state = it.get_state()

    ``get_state()`` / ``set_state(state)``: exact checkpoint of the position after the last batch handed out;
    ``close()`` (and ``with``) stops the copying thread; ``memory_stats()``: the pipeline's, with the
    ``to_jax`` account of the batches copied ahead.

    Raises:
        IteratorClosedError: ``next()``, ``get_state()`` or ``set_state()`` after ``close()``.
        StateError: ``set_state()`` of a dict that is not a ``to_jax`` state.
    """

    def __init__(self, dataset: Dataset, sharding: Any, buffer_size: int) -> None:
        self._dataset = dataset
        self._place = _placer(sharding)
        self._buffer_size = buffer_size
        it: HeadraceIterator = iter(dataset)
        self._iteration = int(it._ctx.iteration[0])
        self._state: dict[str, Any] | None = None  # after the last batch handed out; None: the start
        self._closed = False
        self._producer = _Producer(it, self._place, buffer_size)

    def __iter__(self) -> JaxIterator:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise IteratorClosedError("next() on a closed to_jax iterator; make a new one with to_jax(ds)")
        try:
            placed, self._state = self._producer.take()
        except (StopIteration, Exception):
            raise
        except BaseException:  # KeyboardInterrupt & co: a batch may be half taken, so close, as Iterator does
            self.close()
            raise
        return placed

    def get_state(self) -> dict[str, Any]:
        """The position after the last batch handed out.

        Returns:
            dict: ``{"format": "headrace.jax", "version": 1, "iteration": int, "iterator": dict | None}``: the
            dataset's iteration and its headrace ``Iterator.get_state()`` after the last batch handed out (None
            before the first). JSON-serializable.

        Raises:
            IteratorClosedError: after ``close()``.
        """
        if self._closed:
            raise IteratorClosedError("get_state() on a closed to_jax iterator; take the state before close()")
        return {"format": STATE_FORMAT, "version": STATE_VERSION, "iteration": self._iteration,
                "iterator": self._state}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue right after the batch ``state`` was taken at.

        The batches copied ahead are dropped (their bytes released) and the copying restarts from there.

        Args:
            state: a dict :meth:`get_state` returned.

        Raises:
            StateError: ``state`` is not from :meth:`get_state`, or (from the pipeline) it does not fit it.
            IteratorClosedError: after ``close()``.
        """
        from ._iterator import Iterator as HeadraceIterator

        if self._closed:
            raise IteratorClosedError("set_state() on a closed to_jax iterator; make a new one with to_jax(ds)")
        check_versioned(state, fmt=STATE_FORMAT, version=STATE_VERSION, source="to_jax set_state()",
                        what="to_jax state", error=StateError,
                        fix="pass the dict a to_jax iterator's get_state() returned")
        iteration, inner = state.get("iteration"), state.get("iterator")
        if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0 or not (
                inner is None or isinstance(inner, dict)):
            raise StateError(f"to_jax set_state(): iteration={iteration!r} (an int >= 0) and iterator="
                             f"{str(inner)[:80]} (a dict or None) do not make a to_jax state; pass get_state()'s dict")
        self._producer.close()
        it = HeadraceIterator(self._dataset, iteration=iteration)
        try:
            if inner is not None:
                it.set_state(inner)
        except BaseException:
            it.close()
            raise
        self._iteration, self._state = iteration, inner
        self._producer = _Producer(it, self._place, self._buffer_size)

    def memory_stats(self) -> dict[str, Any]:
        """The pipeline's ``Iterator.memory_stats()``; the stage ``to_jax`` holds the batches copied ahead.

        Returns:
            dict: what :meth:`headrace.Iterator.memory_stats` returns for the pipeline, with the ``to_jax`` stage.
        """
        return self._producer.it.memory_stats()

    @property
    def threads_alive(self) -> list[str]:
        """The copying thread's name while it runs (after ``close()``: empty within about a second).

        Returns:
            list[str]: thread names.
        """
        return [self._producer.thread.name] if self._producer.thread.is_alive() else []

    def close(self) -> None:
        """Stop the copying thread and the pipeline (within about a second); idempotent, from any thread."""
        self._closed = True
        self._producer.close()

    def __enter__(self) -> JaxIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        producer = self.__dict__.get("_producer")
        if producer is not None:
            producer.stop.set()  # (no lock, no join here: the thread sees it within a wait slice and ends)


def to_jax(dataset: Dataset, sharding: Any = None, buffer_size: int = 2) -> JaxIterator:
    """One iteration of ``dataset`` as ``jax.Array`` s, copied ahead on a background thread.

    >>> for batch in hr.jax.to_jax(ds.batch(64), sharding=NamedSharding(mesh, P("data"))): ...

    Args:
        dataset: a headrace ``Dataset`` (batch it: ``ds.batch(n)``); its numeric numpy leaves become
            ``jax.Array`` s of the same shape and dtype, other leaves pass through.
        sharding: ``None``: each array on the default device. A ``jax.sharding.Sharding`` (e.g.
            ``NamedSharding(mesh, P("data"))``): global arrays with that sharding, from this process's batch
            (its share of the global batch; see the module docstring). The batch must split evenly over the
            devices of the sharded axis.
        buffer_size: batches in flight ahead of the caller (an int >= 1), charged to the memory budget.

    Returns:
        A :class:`JaxIterator` (``get_state()`` / ``set_state()`` / ``close()``).

    Raises:
        TypeError: ``dataset`` is not a headrace ``Dataset`` or ``sharding`` not a ``jax.sharding.Sharding``.
        ValueError: ``buffer_size`` is not an int >= 1; and from ``next()``: a batch that does not split evenly
            over the sharded devices (the message names the batch size, the device count and the fix).
    """
    from ._dataset import Dataset

    if not isinstance(dataset, Dataset):
        raise TypeError(f"to_jax(dataset): expected a headrace.Dataset, got {type(dataset).__name__}")
    if sharding is not None and not isinstance(sharding, _sharding.Sharding):
        raise TypeError(f"to_jax(sharding=...): expected None or a jax.sharding.Sharding (e.g. NamedSharding(mesh, "
                        f"P('data'))), got {type(sharding).__name__}")
    if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 1:
        raise ValueError(f"to_jax(buffer_size={buffer_size!r}): expected an int >= 1 (batches copied ahead)")
    return JaxIterator(dataset, sharding, buffer_size)


@atexit.register
def _close_all() -> None:
    for producer in list(_LIVE):
        producer.close()


__all__ = ["JaxIterator", "to_jax"]
