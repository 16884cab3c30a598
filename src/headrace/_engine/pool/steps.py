"""One element's steps in a parallel stage (``headrace._engine.pool.parallel``), one home for each, whoever takes
them: pull element ``seq`` (:meth:`ElementSteps.next_input`: read ahead by a restore, or pulled now; a worker's
snapshot and run around it: :meth:`ElementSteps.pull`, :meth:`ElementSteps.pull_run`) and apply ``fn``
(:meth:`ElementSteps.apply`: the function or the executor's call, timed, the input released, an error noted with
the stage and element; a worker's run of them: :meth:`ElementSteps.apply_run`, or in one executor call, worker
processes' one message each way: :meth:`ElementSteps.apply_message`). The prefix advances in the results
window (``ResultsWindow.advance``). Two paths take these steps: a worker thread (``headrace._engine.pool.workers``)
and the inline path (``headrace._engine.pool.inline``); the lean path (``ResultsWindow.next_lean``) unrolls them
for its steady state, where a call per step would cost a cheap ``map`` a tenth of its time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._handoff import Taker, taking
from ..._memory import Cancelled, Reservation
from ..._structure import nbytes
from ..._sync import Flag
from ..stage_support import note_error
from .executor import ExecutorKind
from .order import Result
from .stats import PoolStats

RUN_MOST = 8
"""The most elements a worker thread claims, reserves, pulls and publishes at once (one lock of each per run)."""
RUN_SHARE = 2
"""A run on threads is at most the window's share of one worker divided by this (the other half keeps results
coming); a run for worker processes, one message, is at most that share and the executor's ``run_length``."""
DIRECT, CALLS, MESSAGE = 1, 2, 3
"""How a run's elements are applied (``ElementSteps.run_mode``): ``fn`` called directly (on threads for good), the
executor's call each (an ``"auto"`` executor on threads, checking its choice), or one executor call for the run
(worker processes: one message each way); 0: one element at a time, as before any run."""

if TYPE_CHECKING:
    from .inline import InlinePath
    from .order import ResultsWindow
    from .parallel import ParallelApplier
    from .snapshots import InputSnapshots


class ElementSteps:
    """The per-element steps of one :class:`~headrace._engine.pool.parallel.ParallelApplier` (no fields of its
    own: it reads the pool's settings and its parts')."""

    def __init__(self, pool: ParallelApplier) -> None:
        self.pool = pool

    def wire(self) -> None:
        """Bind the pool's other parts (built after this one)."""
        pool = self.pool
        self.window: ResultsWindow = pool.window
        self.inline: InlinePath = pool.inline
        self.snapshots: InputSnapshots = pool.snapshots

    def next_input(self, seq: int, gen: int | None = None) -> Any:
        """Input lock held: element ``seq`` of the input (read ahead by a restore, or pulled now). The end of
        the input is recorded (``ResultsWindow.end_at(seq, gen)``) before ``StopIteration`` goes on."""
        try:
            if seq >= self.snapshots.prepull_end:
                return self.pool.source.__next__()
            return self.snapshots.take_prepulled(seq)
        except StopIteration:
            self.window.end_at(seq, gen)
            raise

    def pull(self, gen: int, seq: int) -> tuple[Any, BaseException | None, bool]:
        """Input lock held: snapshot if due, pull element ``seq``; ``(x, error, ended)``."""
        snapshots = self.snapshots
        prepulled = seq < snapshots.prepull_end
        record = snapshots.record_state and not prepulled
        every = snapshots.every
        if record and every > 1 and seq % every == 0 and seq:
            snapshots.snapshot_at(gen, seq)
        try:
            x = self.next_input(seq, gen)
        except StopIteration:
            return None, None, True
        except Exception as e:
            # an element that raised is a position too: a replay event while pulling it counts from it
            if record:
                snapshots.snapshot_after_replay_event(gen, seq)
            return None, e, False
        if record:
            snapshots.snapshot_after_replay_event(gen, seq)
        return x, None, False

    def pull_run(self, gen: int, seq: int, count: int, reservation: Reservation | None
                 ) -> tuple[list[Any], bool]:
        """Input lock held: pull the run of ``count`` elements from ``seq`` (``reservation``: the input delivers
        them charged, each handed into it): ``(x, error)`` each, and whether the input ended."""
        if reservation is None:
            return self._pull_into([], gen, seq, count, None)
        with taking(reservation, self.pool.source) as taker:  # (it grows by each element handed in)
            return self._pull_into([], gen, seq, count, taker)

    def _pull_into(self, pulled: list[Any], gen: int, seq: int, count: int, taker: Taker | None
                   ) -> tuple[list[Any], bool]:
        source = self.pool.source
        for i in range(count):
            if i and taker is not None:
                taker.rearm(source)
            x, error, ended = self.pull(gen, seq + i)
            if ended:
                return pulled, True
            pulled.append((x, error))
        return pulled, False

    def apply(self, x: Any, seq: int, stop: Flag, stats: PoolStats, inline: bool = False,
              ready: Callable[[bool], bool] | None = None) -> tuple[Any, int, BaseException | None]:
        """``fn(x)`` (or the executor's call; ``inline``: the inline path's, ``InlinePath.call``), timed into
        ``stats``, the input released (``release_input``) whether it succeeded or not: ``(value, nbytes,
        error)`` (``nbytes`` 0 inline: nothing is reserved there), the error noted with the stage and element.
        ``ready()`` runs right before ``fn`` (``Executor.call``); what it raises is raised, never the element's."""
        pool = self.pool
        w0, c0 = time.perf_counter(), time.thread_time()
        refused: list[BaseException] = []
        before: Callable[[bool], bool] | None = None
        if ready is not None:
            def before(wait: bool) -> bool:
                try:
                    return ready(wait)
                except BaseException as e:
                    refused.append(e)
                    raise

        try:
            try:
                direct = self.inline.direct
                if inline:
                    value = pool.fn(x) if direct else self.inline.call(x, seq, stop)
                elif direct:
                    value = pool.fn(x)
                else:
                    value = pool.executor.call(x, self.window.index_base + seq, stop, before)
            finally:  # the input's bytes go whether fn succeeded or not
                if pool.release_input is not None:
                    pool.release_input(x)
                stats.calls += 1
                stats.busy_s += time.perf_counter() - w0
                stats.cpu_s += time.thread_time() - c0  # the tuner's CPU weight of the stage (cpu_budget)
            x = None
            return value, (0 if inline else nbytes(value)), None
        except Cancelled:
            raise
        except Exception as e:
            if refused and e is refused[0]:
                raise
            return None, 0, note_error(e, pool.stage, self.window.index_base + seq)

    def run_mode(self, estimate: Callable[[], int]) -> tuple[int, int]:
        """How a worker takes elements now and the longest run: runs once the stage allows them and is steady (its
        element size known, a window delivered), of ``fn`` on threads (``DIRECT``, ``CALLS``: ``RUN_SHARE`` runs
        per active worker fit the window, at most ``RUN_MOST``) or of one executor call (``MESSAGE``: worker
        processes, at most a worker's part of the window and the executor's ``run_length`` for calls of
        ``estimate()`` bytes); else ``(0, 1)``."""
        pool, window, direct = self.pool, self.window, self.inline.direct
        if not (pool.takes_runs and pool.account.seen and window.delivered >= window.size):
            return 0, 1
        share = window.size // max(1, pool.active)
        executor = pool.executor
        if direct or executor.final or executor.kind is ExecutorKind.THREAD:
            return (DIRECT if direct or executor.final else CALLS), max(1, min(RUN_MOST, share // RUN_SHARE))
        most = min(executor.run_length(estimate()), share)
        return (MESSAGE, most) if most > 1 else (0, 1)

    def apply_pulled(self, pulled: list[Any], seq: int, stop: Flag, stats: PoolStats,
                     ready: Callable[[bool], bool] | None, mode: int) -> list[Result | None] | None:
        """The elements a worker pulled from ``seq`` applied as ``mode`` says (:meth:`run_mode`): a
        :class:`Result` each (None for a number skipped), or None once stopped inside a run on threads."""
        if mode == MESSAGE:
            return self.apply_message(pulled, seq, stop, stats)
        if mode:
            return self.apply_run(pulled, seq, stop, stats, direct=mode == DIRECT)
        return [None if entry is None else self.apply_one(entry, seq + i, stop, stats, ready)
                for i, entry in enumerate(pulled)]

    def apply_run(self, pulled: list[Any], seq: int, stop: Flag, stats: PoolStats, direct: bool = True
                  ) -> list[Result | None] | None:
        """``fn`` on each element of a run from ``seq`` on a worker thread (``pulled``: ``(x, error)`` each, None
        for a number skipped; emptied as it goes): a :class:`Result` each, as :meth:`apply` makes it, but ``fn``
        called directly where ``direct`` (the executor runs calls on threads for good; else the executor's call
        each: an ``"auto"`` executor on threads checking its choice) and the run timed as one call. None once
        ``stop`` is set before an element (the rest is not computed; their inputs are released)."""
        pool = self.pool
        release, executor, base = pool.release_input, pool.executor, self.window.index_base
        fn = pool.fn if direct else None
        results: list[Result | None] = []
        append = results.append
        w0, c0 = time.perf_counter(), time.thread_time()
        calls = 0
        try:
            for i, entry in enumerate(pulled):
                if entry is None:
                    append(None)
                    continue
                pulled[i] = None
                x, error = entry
                if error is None:
                    if calls and stop.is_set():
                        if release is not None:
                            release(x)
                            for rest in pulled[i + 1:]:
                                if rest is not None and rest[1] is None:
                                    release(rest[0])
                        return None
                    calls += 1
                    try:
                        value = fn(x) if fn is not None else executor.call(x, base + seq + i, stop)
                    except Cancelled:
                        raise
                    except Exception as e:
                        error = note_error(e, pool.stage, base + seq + i)
                    finally:  # the input's bytes go whether fn succeeded or not
                        if release is not None:
                            release(x)
                    x = entry = None
                    if error is None:
                        append(Result(value, nbytes(value), None))
                        value = None
                        continue
                append(Result(None, 0, error))
                error = None
            return results
        finally:
            stats.calls += calls
            stats.busy_s += time.perf_counter() - w0
            stats.cpu_s += time.thread_time() - c0

    def apply_message(self, pulled: list[Any], seq: int, stop: Flag, stats: PoolStats) -> list[Result | None]:
        """The elements of a run from ``seq`` (``pulled`` as :meth:`apply_run`'s) in one executor call
        (``Executor.call_run``: worker processes take a run in one message each way), timed into ``stats``, the
        inputs released: a :class:`Result` each, errors noted with the stage and element."""
        pool = self.pool
        base = self.window.index_base
        results: list[Result | None] = [None if e is None else Result(None, 0, e[1]) for e in pulled]
        at = [i for i, e in enumerate(pulled) if e is not None and e[1] is None]  # (those that pulled without error)
        xs = [pulled[i][0] for i in at]
        pulled[:] = [None] * len(pulled)
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            outs = pool.executor.call_run(xs, [base + seq + i for i in at], stop) if xs else []
        finally:
            if pool.release_input is not None:
                for x in xs:
                    pool.release_input(x)
            del xs
            stats.calls += len(at)
            stats.busy_s += time.perf_counter() - w0
            stats.cpu_s += time.thread_time() - c0
        for i, (value, error) in zip(at, outs, strict=True):
            results[i] = Result(value, nbytes(value), None) if error is None else Result(
                None, 0, note_error(error, pool.stage, base + seq + i))
        return results

    def apply_one(self, entry: tuple[Any, BaseException | None], seq: int, stop: Flag, stats: PoolStats,
                   ready: Callable[[bool], bool] | None) -> Result:
        """One element of a run of one through the executor (``ElementSteps.apply``) as a :class:`Result`."""
        x, error = entry
        if error is None:
            value, n, error = self.apply(x, seq, stop, stats, ready=ready)
            if error is None:
                return Result(value, n, None)
        return Result(None, 0, error)
