"""The memory of the process executor's workers: shared-memory segments and what the budget is charged.

Segments
--------
Each worker has an *input* and an *output* segment (see :mod:`headrace._engine.pool.process_child`): a file in
``/dev/shm`` (``HEADRACE_SHM_DIR``) with its pages allocated up front (``posix_fallocate``: a full
``/dev/shm`` is a :class:`~headrace.SharedMemoryError` naming the need, the free space and the fixes, never
a ``SIGBUS``), unlinked at once, passed to the worker by file descriptor.

Charging (:class:`WorkerMemory`)
-------------------------------
Every stage's workers have one *workers* account (mandatory, one unit per worker, in the group
``WORKER_GROUP``). A worker is charged **before it exists** and never grows the pipeline past the budget:

- its *footprint* is its RSS, which includes its segments (the worker maps them ``MAP_POPULATE``);
- a new worker reserves ``estimate()`` first: the largest footprint a worker of the stage reached once it
  had computed (segments and what the function imports included); before any did, that or
  ``WORKER_ESTIMATE_BYTES``, whichever is larger, since a fresh interpreter's RSS leaves both out (the
  bare RSS let a second worker start that then took its segments over the budget);
- the first worker of a stage waits for its reservation (the stage cannot run without one); any other
  starts only if its reservation fits **now** and the workers of every stage together stay within
  ``MAX_BUDGET_SHARE`` of the budget, a stage that has no worker yet counting the estimate of its first
  (``try_reserve(group_limit=...)``, never the stall breaker): otherwise the calls wait for a busy worker;
- a worker that comes out larger than its reservation (the function's imports: torch alone is ~200 MB) is
  charged the excess if it fits now, within that share; else it is ended, unless it is the stage's only one
  (``started``);
- a worker admitted on an estimate keeps it reserved (its *floor*) until its first call is measured; a
  segment is charged before it is created, only for what it adds beyond the floor;
- after calls the footprint is re-measured: the first measurement settles it to the real size (the
  floor's excess goes back), later growth is charged at once (e.g. a function that keeps a cache); a
  worker that is not the stage's only one is charged its growth only where it fits now, within that
  share, else it is ended (``remeasure`` returns False);
- at a stall of the budget, before the stall breaker overdraws, an idle worker beyond the stage's first is
  ended (``ProcessWorkers.shed_idle``, a shedder of ``MemoryBudget.shed``); the stage then keeps at most the
  workers left;
- a segment that must grow while the budget is short first ends idle workers of the stage (fewer workers,
  not more memory), and only then waits for room;
- one worker of every process stage (each keeps one) and one call of this stage must fit the budget,
  else ``MemoryBudgetError`` names both (``check_fits``, before each reservation): such a pipeline could
  only go from stall to stall, each ending in an overdraft.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._errors import MemoryBudgetError, SharedMemoryError
from ..._memory import WHOLE, WHOLE_UNCAPPED, MemoryBudget, Reservation, StageAccount, format_bytes

if TYPE_CHECKING:
    from .process_worker import _Proc

SHM_DIR_ENV = "HEADRACE_SHM_DIR"
MIN_SEGMENT_BYTES = 1024**2
WORKER_ESTIMATE_BYTES = 48 * 1024**2
"""Reserved for a worker before any worker of its stage was measured after a call."""
MAX_BUDGET_SHARE = 0.5
"""Worker processes (RSS + segments) of all stages together take at most this share of the memory budget
(the first worker of each stage excepted: a stage cannot run without one)."""
WORKER_GROUP = "worker processes"
REMEASURE_S = 0.5
_names = itertools.count()


# ---- shared memory ---------------------------------------------------------------------------------
def shm_dir() -> str:
    return os.environ.get(SHM_DIR_ENV, "/dev/shm")


def shm_free_bytes(path: str | None = None) -> int:
    """Bytes free in the shared-memory file system (``statvfs``)."""
    st = os.statvfs(path or shm_dir())
    return st.f_bavail * st.f_frsize


def check_shm(need: int, stage: str, workers: int) -> None:
    """Raise :class:`~headrace.SharedMemoryError` unless ``need`` bytes fit in ``/dev/shm`` now."""
    path = shm_dir()
    if not os.path.isdir(path):
        raise SharedMemoryError(
            f"{stage}: the process executor needs a shared-memory file system at {path} (Linux /dev/shm), "
            f"which does not exist here; use map_executor='thread' (or set {SHM_DIR_ENV} to a tmpfs directory)")
    free = shm_free_bytes(path)
    if need > free:
        raise SharedMemoryError(
            f"{stage}: the process executor needs {format_bytes(need)} of shared memory for {workers} worker "
            f"process(es) but {path} has {format_bytes(free)} free; enlarge it (docker run --shm-size=2g, or "
            "mount -o remount,size=2G /dev/shm), lower num_parallel_calls or the element size, or use "
            "map_executor='thread'")


def create_segment(size: int, stage: str, workers: int) -> int:
    """A file of ``size`` bytes in ``/dev/shm`` with its pages allocated, already unlinked: its fd."""
    check_shm(size, stage, workers)
    path = os.path.join(shm_dir(), f"headrace-{os.getpid()}-{next(_names)}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.unlink(path)
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        os.close(fd)
        raise SharedMemoryError(
            f"{stage}: could not allocate a {format_bytes(size)} shared-memory segment in {shm_dir()} ({e}); "
            "enlarge /dev/shm (docker run --shm-size=2g), lower num_parallel_calls or the element size, or "
            "use map_executor='thread'") from e
    return fd


def segment_size(need: int) -> int:
    """Grow by a quarter beyond the need (fewer re-creations), whole MiB."""
    want = max(MIN_SEGMENT_BYTES, need + need // 4)
    return -(-want // MIN_SEGMENT_BYTES) * MIN_SEGMENT_BYTES


def write_all(fd: int, data: memoryview, offset: int) -> None:
    view = data.cast("B") if data.format != "B" or data.ndim != 1 else data
    done = 0
    while done < view.nbytes:
        done += os.pwritev(fd, [view[done:]], offset + done)


def read_into(fd: int, n: int, offset: int) -> np.ndarray:
    dest = np.empty(n, np.uint8)
    done = 0
    while done < n:
        got = os.preadv(fd, [dest[done:]], offset + done)  # type: ignore[list-item]  # (an ndarray is a buffer)
        if got <= 0:
            raise OSError(f"short read from a shared-memory segment at offset {offset + done}")
        done += got
    return dest


def process_extra_bytes(out_bytes: int) -> int:
    """Bytes a process call holds beyond the thread executor's input + output: the worker's own copy of
    the output while it is written to shared memory and read back."""
    return out_bytes


# ---- the budget side of one stage's workers -----------------------------------------------------------
class WorkerMemory:
    """What one stage's worker processes are charged (module docstring). Thread-safe (the budget's lock)."""

    def __init__(self, budget: MemoryBudget, stage: str, owner: object) -> None:
        self.stage = stage
        self.account: StageAccount = budget.account(
            f"{stage} workers", 1, mandatory=True, owner=owner, group=WORKER_GROUP, elements=False,
            hint="use fewer worker processes (num_parallel_calls) or map_executor='thread'")
        self.account.stage_of = stage
        self.account.promised_bytes = WORKER_ESTIMATE_BYTES  # its first worker, in the workers' share
        self.measured = False  # a worker's footprint was measured after a call
        # growth that cannot fit beside the other stages' needs is refused (an "auto" executor moves back to
        # threads instead, and turns this off)
        self.refuse_growth = True
        self.declined = 0      # starts refused for lack of budget
        self.declined_s = 0.0  # when the last one was
        self.shedder: Callable[[], int] | None = None  # (shed_by)
        self.shed = 0  # workers ended for lack of budget: at a stall, or grown past what fits (shed_to)
        self.cap: int | None = None  # at most this many workers since then

    def estimate(self) -> int:
        """What a new worker will hold (module docstring)."""
        largest = self.account.max_element_bytes
        return largest if self.measured else max(largest, WORKER_ESTIMATE_BYTES)

    def reserve_first(self, stop: Any) -> Reservation:
        """The stage's only worker: wait for its reservation (``MemoryBudgetError`` if it can never fit)."""
        return self.account.reserve(self.estimate(), stop, WHOLE)

    def try_reserve_another(self) -> Reservation | None:
        """A further worker's reservation if it fits now and within the workers' share, else None."""
        got = self._try_within_share(self.estimate())
        if got is None:
            self.note_declined()
        return got

    def _try_within_share(self, nbytes: int) -> Reservation | None:
        """``nbytes`` reserved if they fit the budget now and the workers of every stage stay within
        ``MAX_BUDGET_SHARE`` of it, else None."""
        acc = self.account
        return acc.try_reserve(nbytes, WHOLE, group_limit=int(acc.budget.limit_bytes * MAX_BUDGET_SHARE))

    def shed_to(self, workers: int) -> None:
        """A worker was ended for lack of budget: the stage keeps at most ``workers`` from now on (at least one:
        two grown at once may both be ended, and the stage then starts its first again)."""
        self.cap = max(1, workers)
        self.shed += 1
        self.note_declined()

    def note_declined(self) -> None:
        """A worker was refused (or ended) for lack of budget: the tuner adds none for a while."""
        self.declined += 1
        self.declined_s = time.monotonic()

    def memory_limited(self, within_s: float) -> bool:
        """Whether a worker start was refused for lack of budget in the last ``within_s`` seconds."""
        return self.declined > 0 and time.monotonic() - self.declined_s <= within_s

    def started(self, proc: _Proc, reservation: Reservation, rss: int, floor: bool, alone: bool) -> bool:
        """``proc`` is ready with ``rss`` bytes: it keeps its ``reservation`` as its floor when it was admitted
        on an estimate (``floor``), else it is charged its RSS. A worker that is not the stage's only one
        (``alone``) and came out larger than its reservation is charged the excess only if it fits now, within
        the workers' share; else it is declined (False, its reservation given back: the caller ends it) and
        its size learned, so no further worker starts on the estimate. (A fresh interpreter that imports
        torch with the function is ~250 MB: two charged at once took 492 MiB of a 256 MiB budget.)"""
        acc = self.account
        keep = max(rss, reservation.nbytes if floor else 0)
        excess = keep - reservation.nbytes
        more = None
        if excess > 0 and not alone:
            more = self._try_within_share(excess)
            if more is None:
                reservation.cancel()
                acc.grow_unit(rss)
                self.note_declined()
                return False
        proc.own = rss
        proc.floor = reservation.nbytes if floor else 0
        if more is None:
            reservation.settle(keep, count=1, unit=False, refuse=False)
        else:
            reservation.settle(reservation.nbytes, count=1, unit=False, refuse=False)
            more.settle(excess, count=0, unit=False, refuse=False)
        proc.footprint = keep
        acc.grow_unit(rss)
        return True

    def segment_need(self, proc: _Proc, grow: int) -> int:
        """What growing ``proc``'s segments by ``grow`` bytes adds to its charge (its floor covers some)."""
        segs = sum(size for _fd, size in proc.segments.values())
        return max(0, max(proc.floor, proc.own + segs + grow) - proc.footprint)

    def charge(self, proc: _Proc, nbytes: int, stop: Any, retire_idle: Callable[[], bool]) -> None:
        """Reserve ``nbytes`` more for ``proc`` (a segment about to be created): at once if they fit, else
        after ending idle workers of the stage (``retire_idle()``: False when none was left), else waiting
        for room (``MemoryBudgetError`` if they can never fit)."""
        if nbytes <= 0:
            return
        acc = self.account
        while True:
            try:
                got = acc.try_reserve(nbytes, WHOLE)
            except MemoryBudgetError:  # more than the budget beside the workers held now: retire one first
                got = None
            if got is not None:
                break
            if not retire_idle():
                got = acc.reserve(nbytes, stop, WHOLE_UNCAPPED)
                break
        got.settle(nbytes, count=0, unit=False, refuse=False)
        proc.footprint += nbytes

    def uncharge(self, proc: _Proc, nbytes: int) -> None:
        if nbytes > 0:
            self.account.release(nbytes, count=0)
            proc.footprint -= nbytes

    def remeasure(self, proc: _Proc, first: bool, alone: bool = True) -> bool:
        """Charge ``proc``'s real size: its first measurement after a call settles the floor (the excess
        goes back), later ones charge growth at once. Growth of a worker that is not the stage's only one
        (``alone``) is charged only where it fits now, within the workers' share (as at its start, ``started``);
        else False, its size learned: the caller ends it (fewer workers, not a pipeline over its budget)."""
        segs = sum(size for _fd, size in proc.segments.values())
        # The segments are mapped with MAP_POPULATE, so they are inside the RSS already.
        proc.own = max(proc.own, proc.rss() - segs)
        if first:
            proc.floor = 0
        delta = max(proc.floor, proc.own + segs) - proc.footprint
        if delta > 0 and not alone:
            try:
                more = self._try_within_share(delta)
            except MemoryBudgetError:  # (the workers held now and this growth exceed the budget)
                more = None
            if more is None:
                self.account.grow_unit(proc.own + segs)
                self.note_declined()
                return False
            more.settle(delta, count=0, unit=False, refuse=False)
            proc.footprint += delta
        elif delta > 0:  # a worker that grew past what the budget can ever hold ends the pipeline, not overdraws
            self.account.force(delta, refuse=self.refuse_growth)
            proc.footprint += delta
        elif delta < 0 and first:
            self.uncharge(proc, -delta)
        self.account.grow_unit(proc.footprint)
        self.measured = True
        self.account.promised_bytes = self.estimate()
        return True

    def release(self, proc: _Proc) -> None:
        self.account.release(proc.footprint, count=1 if proc.ready else 0)
        proc.footprint = 0

    def set_workers(self, n: int) -> None:
        """``n`` workers exist or start: the account's demand (its share counts the workers that exist, not
        the target the tuner would like)."""
        self.account.set_demand(max(1, n))

    def check_fits(self, element_bytes: int) -> None:
        """Raise ``MemoryBudgetError`` when one worker of this stage, one of every other stage's (each keeps at
        least one, as far as measured) and one call's ``element_bytes`` exceed the budget: the pipeline
        cannot run in it at all (it would go from stall to stall, each ending in an overdraft)."""
        budget = self.account.budget
        with budget.cv:
            text = self.refusal(element_bytes, 0)
        if text is not None:
            raise MemoryBudgetError(text)

    def refusal(self, element_bytes: int, result_bytes: int) -> str | None:
        """(The budget's lock held.) The refusal's text when one worker of this stage, one of every other
        stage's, one call's ``element_bytes`` and ``result_bytes`` held meanwhile (a result waiting for the
        consumer, at a stall) exceed the budget; else None."""
        one = self.account.max_element_bytes if self.measured else 0
        if not one or not element_bytes:
            return None
        budget = self.account.budget
        others = [a.max_element_bytes for a in budget.accounts
                  if a.group == WORKER_GROUP and a is not self.account]
        need = one + sum(others) + element_bytes + result_bytes
        if need <= budget.limit_bytes:
            return None
        limit = budget.limit_bytes
        workers = (f"one worker process ({format_bytes(one)}: its interpreter and shared-memory segments)"
                   if not any(others) else
                   f"one worker process of each of the {1 + sum(1 for o in others if o)} process stages "
                   f"({format_bytes(one + sum(others))}: interpreters and shared-memory segments)")
        result = (f" and one result waiting for the consumer meanwhile ({format_bytes(result_bytes)})"
                  if result_bytes else "")
        call = f"the bytes of one call ({format_bytes(element_bytes)}: input, output and the worker's copy)"
        joint = ", " if result else " and "
        return (f"{self.stage}: {workers}{joint}{call}{result} need {format_bytes(need)}, more than the memory "
                f"budget of {format_bytes(limit)} ({limit} bytes); raise Options(memory_budget=...), make elements "
                "smaller, or use map_executor='thread'" + (" for some of the stages" if any(others) else ""))

    def shed_by(self, shedder: Callable[[], int]) -> None:
        """``shedder`` ends this stage's idle workers at a stall of the budget (``MemoryBudget.shed``) until
        ``close``."""
        self.shedder = shedder
        with self.account.budget.cv:
            self.account.budget.shedders.append(shedder)

    def close(self) -> None:
        budget = self.account.budget
        with budget.cv:
            if self.shedder in budget.shedders:
                budget.shedders.remove(self.shedder)
        self.account.close()
