"""One element's steps in a parallel stage (``headrace._engine.pool.parallel``), one home for each, whoever takes
them: pull element ``seq`` (:meth:`ElementSteps.next_input`: read ahead by a restore, or pulled now) and apply
``fn`` (:meth:`ElementSteps.apply`: the function or the executor's call, timed, the input released, an error
noted with the stage and element). The prefix advances in the results window
(``ResultsWindow.advance``). Two paths take these steps: a worker thread (``headrace._engine.pool.workers``)
and the inline path (``headrace._engine.pool.inline``); the lean path (``ResultsWindow.next_lean``) unrolls
them for its steady state, where a call per step would cost a cheap ``map`` a tenth of its time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._memory import Cancelled
from ..._structure import nbytes
from ..._sync import Flag
from ..stage_support import note_error
from .stats import PoolStats

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

    def apply(self, x: Any, seq: int, stop: Flag, stats: PoolStats, inline: bool = False,
              ready: Callable[[bool], bool] | None = None) -> tuple[Any, int, BaseException | None]:
        """``fn(x)`` (or the executor's call; ``inline``: the inline path's, ``InlinePath.call``), timed into
        ``stats``, the input released (``release_input``) whether it succeeded or not: ``(value, nbytes,
        error)`` (``nbytes`` 0 inline: nothing is reserved there), the error noted with the stage and element.
        ``ready()`` runs right before ``fn`` (``Executor.call``); what it raises is raised, never the element's."""
        pool = self.pool
        w0, c0 = time.perf_counter(), time.thread_time()
        refused: list[BaseException] = []

        def before(wait: bool) -> bool:
            try:
                return ready(wait)  # type: ignore[misc]
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
                    value = pool.executor.call(x, self.window.index_base + seq, stop,
                                               None if ready is None else before)
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

    def apply_run(self, xs: list[Any], seqs: list[int], stop: Flag, stats: PoolStats
                  ) -> list[tuple[Any, int, BaseException | None]]:
        """``apply`` of a run of elements in one executor call (``Executor.call_run``: worker processes take a
        run in one message), timed into ``stats``, the inputs released: ``(value, nbytes, error)`` each, in
        order, errors noted with the stage and element."""
        pool = self.pool
        base = self.window.index_base
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            outs = pool.executor.call_run(xs, [base + seq for seq in seqs], stop)
        finally:
            if pool.release_input is not None:
                for x in xs:
                    pool.release_input(x)
            stats.calls += len(xs)
            stats.busy_s += time.perf_counter() - w0
            stats.cpu_s += time.thread_time() - c0
        return [(value, nbytes(value), None) if error is None else (None, 0, note_error(error, pool.stage, base + seq))
                for (value, error), seq in zip(outs, seqs, strict=True)]
