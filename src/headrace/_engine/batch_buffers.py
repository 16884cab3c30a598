"""Batch output buffers lent to the consumer and taken back when it drops them, charged while idle.

Why: a fresh multi-megabyte batch is fresh ``mmap``-ed memory (glibc's threshold is 1 MiB under headrace,
``headrace._malloc``): the kernel zero-fills and page-faults every page of it, and unmaps it when the consumer
drops it. For the seed image pipeline's 64 x 224 x 224 x 3 float32 batch (38.5 MB) that is about 720 page
faults and 5 ms of kernel time per batch, more than a third of the cost of stacking it (measured on a 2-core
Xeon: ``np.stack`` of 64 such images 13.8 ms into fresh memory, 8.6 ms into a recycled buffer).

How: a batched leaf of at least ``BufferPool.MIN_BYTES`` (``headrace._engine.stacking``) is stacked into a raw
buffer and handed out as a plain ``np.ndarray`` over it whose ``base`` is a small *lease* object
(``np.asarray`` of an object with ``__array_interface__``). Every view, slice, ``torch.from_numpy`` tensor or
other holder of the batch keeps the lease alive through the array; when the last one goes, the lease's
``__del__`` hands the raw buffer back. The buffer is then *idle*: kept for the next batch only if the memory
budget has room for it outside its reserve, and then charged to the batch stage's assembly account (an open
reservation), else freed at once. The next batch takes the idle buffers' reservations as its output
reservation (:func:`reserve_output`, topped up if the batch is larger) and is stacked into them, so the
bytes stay charged without a gap and without being counted twice. A buffer still held anywhere is never
written: only a buffer whose lease died is reused.

An idle buffer never stands in the way of the pipeline: a reservation anywhere in the budget that does not
fit frees the idle buffers first (``MemoryBudget.reclaim``; without it the buffer's room, taken from the
shuffle buffer's and the map's, held back the very elements the next batch waited for). At most one idle
buffer per leaf is kept; a second one arriving meanwhile is freed. The lease's ``__del__`` runs in whichever
thread drops the batch; it never waits for a lock that thread may hold (a batch dropped inside headrace's
own bookkeeping): then the buffer is simply freed. After ``close()`` every buffer coming back is freed and
the idle ones' reservations are cancelled.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._memory import WHOLE, Reservation, StageAccount
from .._sync import Lock as TimedLock


class _Lease:
    """The ``base`` of a lent batch: it exposes the raw buffer's memory and returns it when it dies."""

    __slots__ = ("__array_interface__", "_buffer", "_key", "_owner")

    def __init__(self, owner: SpareBuffers, key: int, buffer: np.ndarray) -> None:
        self._owner = owner
        self._key = key
        self._buffer = buffer
        self.__array_interface__ = buffer.__array_interface__

    def __del__(self) -> None:
        try:
            self._owner.give_back(self._key, self._buffer)
        except Exception:  # interpreter shutdown: nothing left to give back to
            pass


class SpareBuffers:
    """The lent output buffers of one batch stage, charged to ``account`` while idle (module docstring).
    Thread-safe."""

    def __init__(self, account: StageAccount) -> None:
        self._account = account
        self._lock = TimedLock("batch spare buffers")
        self._idle: dict[int, tuple[np.ndarray, Reservation]] = {}
        self._claimed: dict[int, np.ndarray] = {}
        self._closed = False
        self.lent = 0      # batches handed out (counters for tests and explain)
        self.reused = 0    # of them stacked into a buffer given back
        self.reclaimed = 0  # idle buffers freed because a reservation needed their room
        with account.budget.cv:
            account.budget.reclaimers.append(self.reclaim)

    # ---- the consumer's side: a lease died --------------------------------------------------------------
    def give_back(self, key: int, buffer: np.ndarray) -> None:
        """Keep ``buffer`` (leaf ``key``) for the next batch if the budget has room for it, charged; else drop
        it (freed when this returns). Never waits for a lock this thread may hold (module docstring)."""
        if self._closed or key in self._idle:
            return
        reservation = self._charge(buffer.nbytes)
        if reservation is None:
            return
        lock = self._lock.raw
        kept = lock.acquire(False)
        try:
            if kept and not self._closed and key not in self._idle:
                self._idle[key] = (buffer, reservation)
                return
        finally:
            if kept:
                lock.release()
        reservation.cancel()

    def _charge(self, n: int) -> Reservation | None:
        budget = self._account.budget
        if not budget.cv.lock.acquire(False):  # held, maybe by this very thread: no room to wait for
            return None
        try:
            fits = budget.total_bytes + n <= budget.limit_bytes - budget.reserve_bytes
        finally:
            budget.cv.lock.release()
        return self._account.try_reserve(n, WHOLE) if fits else None

    def reclaim(self) -> int:
        """(The budget's lock held: ``MemoryBudget.reclaim``) free the idle buffers, their reservations
        cancelled; the bytes given back. Skipped (0) while this pool's lock is busy."""
        lock = self._lock.raw
        if not lock.acquire(False):
            return 0
        try:
            freed = sum(reservation.cancel_locked() for _, reservation in self._idle.values())
            self.reclaimed += len(self._idle)
            self._idle.clear()
        finally:
            lock.release()
        return freed

    # ---- the batch stage's side --------------------------------------------------------------------------
    def has_idle(self) -> bool:
        """Whether a buffer is idle now (read without the lock: one given back just after is claimed by the next
        batch, or taken by ``take``); spares that never came back cost no lock per batch."""
        return bool(self._idle)

    def claim(self) -> list[Reservation]:
        """The idle buffers' reservations, taken for the next batch (its buffers are kept for :meth:`take`)."""
        with self._lock:
            self._claimed = {k: buf for k, (buf, _) in self._idle.items()}
            reservations = [r for _, r in self._idle.values()]
            self._idle.clear()
        return reservations

    def take(self, key: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A buffer for leaf ``key`` of the batch being stacked: the one claimed for it if it has this shape
        and dtype, else a fresh one."""
        with self._lock:
            buf = self._claimed.pop(key, None)
            if buf is None and key in self._idle:  # given back after the claim: its bytes are charged already
                buf, reservation = self._idle.pop(key)
                reservation.cancel()  # (the batch's own reservation covers it from here)
        if buf is not None and buf.shape == shape and buf.dtype == dtype:
            self.reused += 1
            return buf
        return np.empty(shape, dtype)

    def lend(self, key: int, buffer: np.ndarray) -> np.ndarray:
        """``buffer`` as the batch's leaf: a plain ``np.ndarray`` whose death gives ``buffer`` back."""
        self.lent += 1
        return np.asarray(_Lease(self, key, buffer))

    def idle_bytes(self) -> int:
        """Bytes of the idle buffers (each charged to the account)."""
        with self._lock:
            return sum(buf.nbytes for buf, _ in self._idle.values())

    def close(self) -> None:
        """Free the idle buffers and cancel their reservations; buffers given back later are freed."""
        budget = self._account.budget
        with budget.cv:
            if self.reclaim in budget.reclaimers:
                budget.reclaimers.remove(self.reclaim)
        with self._lock:
            self._closed = True
            idle = list(self._idle.values())
            self._idle.clear()
            self._claimed.clear()
        for _, reservation in idle:
            reservation.cancel()


def reserve_output(account: StageAccount, spares: SpareBuffers | None, nbytes: int, stop: Any) -> Reservation:
    """The reservation a batch of about ``nbytes`` is stacked under: the idle buffers' (topped up to
    ``nbytes`` if smaller; ``settle`` gives back any excess), else a new one (``account.reserve``, timed
    waits honouring ``stop``). Raises what ``account.reserve`` raises, nothing held then."""
    taken = spares.claim() if spares is not None and spares.has_idle() else []
    if not taken:
        return account.reserve(nbytes, stop, WHOLE)
    reservation = taken[0]
    for other in taken[1:]:
        reservation.absorb(other)
    if nbytes > reservation.nbytes:
        try:
            reservation.top_up(nbytes - reservation.nbytes, stop)
        except BaseException:
            reservation.cancel()
            raise
    return reservation
