"""Runs of elements on one executor call (worker processes take a run in one message each way): a worker
thread of a parallel stage (``headrace._engine.pool.workers``) extends the element it took by more, each
claimed, reserved and pulled as the first was, and finishes them with one call. Why: docs/design/pool.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..._memory import Reservation
from ..._sync import Flag
from .stats import PoolStats

if TYPE_CHECKING:
    from .workers import WorkerThreads

Taken = tuple[int, Any, "BaseException | None", Reservation]
"""An element a worker took: its sequence number, the element (None if pulling it raised), the error, its
reservation."""


class Runs:
    """The runs of one :class:`~headrace._engine.pool.workers.WorkerThreads` (no fields of its own)."""

    def __init__(self, workers: WorkerThreads) -> None:
        self.workers = workers

    def extend(self, gen: int, stop: Flag, index: int, first: Taken, estimate: int) -> list[Taken] | None:
        """Input lock held, ``first`` pulled: on an executor that takes runs (worker processes), more elements
        for the same message, each claimed, reserved and pulled as ``first`` was, as long as the window has room
        and the budget admits them now (nothing waits): at most the executor's ``run_length`` and this worker's
        part of the window. None: ``first`` goes alone."""
        workers = self.workers
        pool, window = workers.pool, workers.window
        k = min(pool.executor.run_length(estimate), max(1, window.size // max(1, pool.active)))
        run = [first]
        try:
            while len(run) < k and not stop.is_set():
                reservation = pool.account.try_reserve(estimate, workers.policy)
                if reservation is None:
                    break
                seq = window.claim_with_room(stop, index, wait=False)
                if seq < 0:
                    reservation.cancel()
                    break
                x, error, ended = workers.pull(gen, seq)
                if ended:
                    reservation.cancel()
                    break
                run.append((seq, x, error, reservation))
        except BaseException:
            for _seq, _x, _error, reservation in run[1:]:
                reservation.cancel()
            raise
        return run if len(run) > 1 else None

    def finish(self, gen: int, stop: Flag, run: list[Taken], stats: PoolStats) -> None:
        """``WorkerThreads._finish`` of a run's elements, one executor call for those that pulled without error."""
        workers = self.workers
        todo: list[Taken] = []
        for seq, x, error, reservation in run:
            if workers.skipped(seq, x, error, reservation):
                continue
            if error is None:
                workers.note_input(x)
                todo.append((seq, x, None, reservation))
            else:
                workers.store(gen, stop, seq, None, 0, error, reservation)
        if not todo:
            return
        try:
            outs = workers.steps.apply_run([t[1] for t in todo], [t[0] for t in todo], stop, stats)
        except BaseException:
            for _seq, _x, _error, reservation in todo:
                reservation.cancel()
            raise
        for i, ((seq, _x, _e, reservation), (value, n, error)) in enumerate(zip(todo, outs, strict=True)):
            try:
                workers.store(gen, stop, seq, value, n, error, reservation)
            except BaseException:
                for _seq, _x2, _e2, rest in todo[i + 1:]:
                    rest.cancel()
                raise
