"""One element's steps in a parallel stage (``headrace._engine.pool.parallel``), one home for each, whoever takes
them: pull element ``seq`` (:meth:`ElementSteps._next_input`: read ahead by a restore, or pulled now; the end
of the input recorded by :meth:`ElementSteps._end_at`), apply ``fn`` (:meth:`ElementSteps._apply`: the
function or the executor's call, timed, the input released, an error noted with the stage and element) and
advance the delivered prefix (:meth:`ElementSteps._advance`).

Three paths take these steps: a worker thread (``headrace._engine.pool.workers``: pull, reserve, apply, store the
result), the consumer taking a stored result (``headrace._engine.pool.order``: advance, re-raise an error at its
position) and the inline path (``headrace._engine.pool.inline``: all of them in the consumer's thread). The lean
inline path unrolls them for its steady state (no read-ahead, no executor, nothing to release), where a call
per step would cost a cheap ``map`` a tenth of its time; its end and its errors still go through
:meth:`ElementSteps._end_at` and ``note_error``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..._memory import Cancelled
from ..._structure import nbytes
from ..._sync import Flag
from ..stage_support import note_error
from .fields import PoolFields
from .stats import PoolStats


class ElementSteps(PoolFields):
    """The per-element steps of :class:`~headrace._engine.pool.parallel.ParallelApplier`
    (a part: its fields are listed in ``fields``)."""

    def _next_input(self, seq: int, gen: int | None = None) -> Any:
        """Input lock held: element ``seq`` of the input (read ahead by a restore, or pulled now). The end of
        the input is recorded (``_end_at(seq, gen)``) before ``StopIteration`` goes on to the caller."""
        try:
            if seq >= self._prepull_end:
                return self.source.__next__()
            item = self._prepulled.pop(seq)
            if item.nbytes:
                self.account.adjust(-item.nbytes)
            if item.error is not None:
                error, item = item.error, None
                try:
                    raise error
                finally:
                    del error
            return item.value
        except StopIteration:
            self._end_at(seq, gen)
            raise

    def _end_at(self, seq: int, gen: int | None = None) -> None:
        """The input ended at ``seq``; ``gen``: a worker's generation, ignored once it is stale or stopping
        (``None``: the consumer's thread, always the current one)."""
        with self._cv:
            if gen is None or (gen == self._gen and not self._stop.is_set()):
                self._end_seq = seq
                self._next_seq = seq
            self._notify_all()

    def _apply(self, x: Any, seq: int, stop: Flag, stats: PoolStats, inline: bool = False,
               ready: Callable[[bool], bool] | None = None) -> tuple[Any, int, BaseException | None]:
        """``fn(x)`` (or the executor's call; ``inline``: the inline path's, ``_inline_call``), timed into
        ``stats``, the input released (``release_input``) whether it succeeded or not: ``(value, nbytes,
        error)`` (``nbytes`` 0 inline: nothing is reserved there), the error noted with the stage and element.
        ``ready()`` runs right before ``fn`` (``Executor.call``); what it raises is raised, never the element's."""
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
                if inline:
                    value = self.fn(x) if self._inline_direct else self._inline_call(x, seq, stop)
                elif self._inline_direct:
                    value = self.fn(x)
                else:
                    value = self.executor.call(x, self._index_base + seq, stop, None if ready is None else before)
            finally:  # the input's bytes go whether fn succeeded or not
                if self.release_input is not None:
                    self.release_input(x)
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
            return None, 0, note_error(e, self.stage, self._index_base + seq)

    def _advance(self, seq: int) -> None:
        """``seq`` was delivered or skipped: move the prefix past every such number, and drop the snapshots
        no state can name any more (lock held)."""
        beyond = self._beyond
        beyond.add(seq)
        while self._prefix in beyond:
            beyond.discard(self._prefix)
            self._prefix += 1
        snaps = self._snaps
        if len(snaps) > 1:
            base = max(p for p in snaps if p <= self._prefix)
            for p in [p for p in snaps if p < base]:
                del snaps[p]
