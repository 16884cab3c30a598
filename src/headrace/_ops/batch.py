"""``Dataset.batch`` and the batch-assembly machinery ``padded_batch`` shares.

Memory (see ``headrace._memory``): every element is charged to the stage's mandatory *assembly* account
from before it is pulled (a reservation of the largest element seen, settled to its real size) until the
batch is stacked; the stacked batch is reserved before it is allocated, so while ``np.stack`` runs both
the elements and the batch are counted (the assembly needs room for two batches: ``MemoryBudgetError``
names the stage when even that cannot fit). Large output buffers are recycled (``stacking.BufferPool``):
a sequential batch lends them and takes them back charged (``batch_buffers``), a parallel one only for
batches of at most 1/16 of the budget. With ``num_parallel_calls``, elements are gathered under
the input lock and stacked in worker threads (``headrace._engine.pool.parallel``): gathered groups stay charged
to the assembly account until stacked, finished batches to the stage's account.

An error from the input while a batch is being gathered propagates; the elements gathered so far are
kept, and the next call continues the same batch (nothing is dropped). State: the input's state before
the first element of the batch being gathered and the number of positions pulled into it (an element
that raised counts as a position: it was reported already), so a state taken after such an error
restores the partial batch exactly; below a ``deterministic=False`` stage, where re-reading could give other
elements, the partial batch is saved by value instead (``headrace._engine.by_value``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from itertools import repeat
from typing import Any

import numpy as np

from .._args import count_arg, parallel_calls_arg
from .._engine import by_value
from .._engine.batch_buffers import SpareBuffers, reserve_output
from .._engine.context import IteratorContext
from .._engine.pool.parallel import PoolIterator
from .._engine.recipe import DatasetNode, SpecOf
from .._engine.replay import advance, rereads_same
from .._engine.runs import RowRuns, column_runs, fill_one_by_one
from .._engine.stacking import BufferPool, stack
from .._engine.stage import Stage
from .._engine.stage_support import check_state, note_error, stop_flag
from .._engine.tuning.starting_values import parallelism
from .._engine.tuning.static_optimizations import Batching, MapAndBatch, batch_recipe, optimizing
from .._handoff import hand_off, taker_of
from .._memory import WHOLE_UNCAPPED, Reservation, StageAccount
from .._options import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from .._spec import batch_spec
from .._structure import nbytes


def batched_cardinality(n: int, batch_size: int, drop_remainder: bool) -> int:
    if n in (INFINITE_CARDINALITY, UNKNOWN_CARDINALITY):
        return n
    return n // batch_size if drop_remainder else -(-n // batch_size)


class BatchNode(DatasetNode):
    label = "batch"
    shard_passes = True

    def __init__(self, input_node: DatasetNode, batch_size: int, drop_remainder: bool,
                 num_parallel_calls: int | None, deterministic: bool | None) -> None:
        super().__init__([input_node])
        self.batch_size = count_arg(batch_size, "batch(batch_size)", minimum=1,
                                    fix="use batch_size=1 for one-element batches")
        self.num_parallel_calls = parallel_calls_arg(num_parallel_calls, "batch")
        self.drop_remainder = bool(drop_remainder)
        self.deterministic = deterministic

    def cardinality(self) -> int:
        return batched_cardinality(self.inputs[0].cardinality(), self.batch_size, self.drop_remainder)

    def compute_spec(self, spec_of: SpecOf) -> Any:
        spec = spec_of(self.inputs[0])
        return None if spec is None else batch_spec(spec, self.batch_size if self.drop_remainder else None,
                                                    self.label)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return make_batch_iterator(self, ctx)

    def batch_over(self, ctx: IteratorContext, source: Stage, rows: RowRuns | None) -> Stage:
        """This batch's stage over ``source`` (``static_optimizations.Batching``)."""
        stage = ctx.stage_name(self, f"batch({self.batch_size})")
        pool = BufferPool(max_bytes=ctx.budget.limit_bytes // 16)
        combine = partial(stack, pool=pool)
        return make_batcher(ctx, self, source, stage, combine, self.num_parallel_calls, self.deterministic, pool,
                            columnar=True, rows=rows)


def make_batch_iterator(node: Batching, ctx: IteratorContext) -> Stage:
    """The stage of a batch node (``batch``, ``padded_batch``, ``ragged_batch``): through the node the recipe holds
    for it under the static optimizations (``static_optimizations.batch_recipe``: ``map_and_batch_fusion``)."""
    recipe = batch_recipe(node, ctx)
    if recipe is not node:
        return recipe.make_iterator(ctx)
    return node.batch_over(ctx, node.inputs[0].make_iterator(ctx), None)


def _concatenated(runs: list[Any], held: int, count: int) -> tuple[Any, int]:
    """A batch of ``count`` elements (``held`` bytes) from a source's column runs (``runs.ColumnRuns``): one
    array per component (a tuple of them; a run that is one array: a scalar element, one array), and its bytes
    (``nbytes``: the elements' bytes plus a pointer per element of each object column, without a pass over them)."""
    if type(runs[0]) is np.ndarray:
        out = np.concatenate(runs)
        return out, held + (8 * count if out.dtype.hasobject else 0)
    if type(runs[0]) is dict:  # (a map's dict results: ``static_optimizations.MapAndBatch.fill_columns``)
        batch = {k: np.concatenate([run[k] for run in runs]) for k in runs[0]}
        return batch, held + 8 * count * sum(c.dtype.hasobject for c in batch.values())
    cols = tuple(np.concatenate([run[k] for run in runs]) for k in range(len(runs[0])))
    return cols, held + 8 * count * sum(c.dtype.hasobject for c in cols)


class _Group:
    """Elements gathered for one batch in parallel mode, with the bytes they hold in the assembly account."""

    __slots__ = ("items", "nbytes")

    def __init__(self, items: list[Any], n: int) -> None:
        self.items = items
        self.nbytes = n


def make_batcher(ctx: IteratorContext, node: DatasetNode, source: Stage, stage: str,
                 combine: Callable[[list[Any], str], Any], num_parallel_calls: int | None,
                 deterministic: bool | None, buffers: BufferPool | None = None, columnar: bool = False,
                 rows: RowRuns | None = None) -> Stage:
    """A sequential batcher, or a gatherer feeding ``combine`` in a thread pool (``buffers``: the pool
    ``combine`` stacks into, lending its buffers in the sequential case; ``columnar``: ``combine`` stacks flat
    tuples, so a source's column runs may be concatenated instead, ``runs.ColumnRuns``; ``rows``: the loop that
    gathers the elements, ``static_optimizations.MapAndBatch``, else the source's ``runs.RowRuns``)."""
    bs, drop = node.batch_size, node.drop_remainder  # type: ignore[attr-defined]
    if num_parallel_calls is None:
        account = ctx.account(f"{stage} assembly", 2 * bs, mandatory=True, min_units=2 * bs,
                              hint="use a smaller batch_size", stage_of=stage)
        account.min_what = f"its {bs} elements and the batch stacked from them, {2 * bs} elements"
        spares = buffers.lend_from(account) if buffers is not None else None
        return _BatchIterator(ctx, source, account, bs, drop, stage, combine, spares, columnar, rows)
    workers = parallelism(num_parallel_calls, ctx)
    account = ctx.account(f"{stage} assembly", (workers + 1) * bs, mandatory=True, min_units=bs,
                          hint="use a smaller batch_size or fewer num_parallel_calls", stage_of=stage)
    gatherer = _BatchIterator(ctx, source, account, bs, drop, stage, None, rows=rows)

    def release_group(group: _Group) -> None:
        account.release(group.nbytes, count=len(group.items))

    def combine_group(group: _Group) -> Any:
        return combine(group.items, stage)

    return PoolIterator(ctx, gatherer, combine_group, stage, workers, ctx.deterministic(deterministic),
                        kind="batch", window=2 * workers, input_charged=True, release_input=release_group,
                        autotune=num_parallel_calls == AUTOTUNE)


class _BatchIterator(Stage):
    """Gathers ``batch_size`` elements; combines them (``combine``) or hands them on as a group (parallel)."""

    kind = "batch_gather"
    depends_on_input_order = True  # consecutive elements

    def __init__(self, ctx: IteratorContext, source: Stage, account: StageAccount, batch_size: int,
                 drop_remainder: bool, stage: str, combine: Callable[[list[Any], str], Any] | None,
                 spares: SpareBuffers | None = None, columnar: bool = False, rows: RowRuns | None = None) -> None:
        super().__init__(ctx)
        self._spares = spares
        self._source = source
        self._next_input = source.__next__
        # the loop that gathers: map_and_batch_fusion's (``rows``), the source's runs, else one __next__ per element
        optimized = optimizing(ctx)
        if rows is None and optimized and isinstance(source, RowRuns):
            rows = source  # a reader's runs
        self._rows = rows
        self._fill = self._rows.fill if self._rows is not None else partial(fill_one_by_one, source.__next__)
        # a table reader's rows (or map_and_batch_fusion's flat rows of scalars) as column runs, concatenated into
        # the batch (no tuple per row is stacked)
        self._columns = column_runs(source if rows is None else rows) if columnar and optimized else None
        self._account = account
        self._bs = batch_size
        self._drop = drop_remainder
        self._stage = stage
        self._combine = combine
        self._index = 0
        self._out_max = 0
        self._clear()
        self._done = False

    def _clear(self) -> None:
        self._items: list[Any] = []
        self._runs: list[Any] = []  # or the batch's elements as column runs (``_gather_columns``)
        self._run_rows = 0
        self._held = 0          # bytes of self._items
        self._largest = 0       # the largest of them
        self._per = 0           # the element size the reservation has room for (``_room``)
        # the batch's one reservation (outstanding until settled): the items so far and room for the rest
        self._reservation: Reservation | None = None
        self._pulled = 0        # positions pulled into this batch (errors included)
        self._start_epoch = 0   # the input's replay_epoch() at the batch's first position
        self._start: Any = None  # the input's state before the batch's first position

    def _drop_items(self) -> None:
        if self._reservation is not None:
            self._reservation.cancel()
        self._clear()

    def _room(self, stop: Any) -> None:
        """Keep the batch's reservation >= its items plus room for the rest at the largest size seen, plus
        (when this stage stacks) room for the stacked batch at the largest one stacked so far: one reservation
        per batch, topped up only when an element larger than every before it arrives (and, for the first
        batch, once for its stacked output: ``__next__``)."""
        acc = self._account
        r = self._reservation
        per = self._per = self._largest or acc.estimate()
        have = len(self._items) + self._run_rows
        want = self._held + (self._bs - have) * per + (self._out_max if self._combine else 0)
        if r is None:  # the batch's one reservation (0 bytes while no size is known yet), taking over the
            # charge of the output buffers the consumer gave back (``batch_buffers``)
            self._reservation = reserve_output(acc, self._spares if self._combine else None, max(0, want), stop)
            return
        r.refuse_never_fits(want)  # (a batch that can never fit: refused before the element below is charged)
        if self._held > r.nbytes:  # that element exists already: charge it at once (an estimate miss)
            r.force(self._held - r.nbytes)
        if want > r.nbytes:
            r.top_up(want - r.nbytes, stop)

    def _gather(self, stop: Any) -> bool:
        """Fill the batch; False if the input ended first. The loop appends the elements (``runs.RowRuns.fill``:
        one call per batch, stopping early after an element larger than the reservation has room for)."""
        if self._pulled == 0:
            self._start = self._source.get_state()
            self._start_epoch = self._source.replay_epoch()
        fill, items, bs = self._fill, self._items, self._bs
        self._room(stop)
        if self._columns is not None and not items and self._gather_columns(stop):
            return True
        while len(items) < bs:
            before = len(items)
            try:
                n, largest = fill(items, bs - before, self._per)
            except BaseException as e:
                self._count_kept(items[before:])  # (fill's own tally went with the exception)
                if isinstance(e, StopIteration):
                    return False
                self._pulled += 1  # a position that raised counts
                raise
            self._pulled += len(items) - before
            self._held += n
            if largest > self._largest:
                self._largest = largest
                if largest > self._per:  # larger than the reservation has room for: charged, and room made
                    self._room(stop)
        return True

    def _gather_columns(self, stop: Any) -> bool:
        """Fill the batch with the source's column runs; True when it is full. An error, the end or a source with no
        runs to give (0 elements) turns the runs gathered into rows (``_items``): the row loop of ``_gather`` goes on
        from there, as after any error."""
        while self._run_rows < self._bs:
            try:
                n, size, largest = self._columns(self._runs, self._bs - self._run_rows, self._per)  # type: ignore[misc]
            except BaseException as e:
                self._runs_to_items()
                if isinstance(e, StopIteration):
                    return False
                self._pulled += 1  # the position that raised
                raise
            if n == 0:  # (none as columns: the source is not asked again in this iteration)
                self._columns = None
                self._runs_to_items()
                return False
            self._run_rows += n
            self._pulled += n
            self._held += size
            if largest > self._largest:
                self._largest = largest
                if largest > self._per:
                    self._room(stop)
        return True

    def _count_kept(self, kept: list[Any]) -> None:
        """Count elements a call appended before it raised (its own count went with the exception): positions pulled
        and bytes held, charged at once (they are kept for the next call)."""
        sizes = [nbytes(x) for x in kept]
        self._pulled += len(sizes)
        self._held += sum(sizes)
        self._largest = max(self._largest, *sizes, 0)
        r = self._reservation
        if r is not None and self._held > r.nbytes:
            r.force(self._held - r.nbytes)

    def _runs_to_items(self) -> None:
        """The column runs gathered, as the rows they hold (numpy scalars; a scalar element's run is one array); those
        of the runs a call appended before it raised are counted here."""
        counted, start = self._run_rows, len(self._items)
        for run in self._runs:
            if type(run) is np.ndarray:
                self._items.extend(list(run))
            elif type(run) is dict:
                self._items.extend(map(dict, map(zip, repeat(tuple(run)), zip(*[list(c) for c in run.values()]))))
            else:
                self._items.extend(zip(*[list(col) for col in run]))
        self._runs, self._run_rows = [], 0
        self._count_kept(self._items[start + counted:])

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        stop = stop_flag(self.ctx)
        ended = not self._gather(stop)
        if ended and (not self._items or self._drop):
            self._drop_items()
            self._done = True
            raise StopIteration
        items, held, largest, runs = self._items, self._held, self._largest, self._runs
        count = len(items) or self._run_rows
        reservation: Reservation = self._reservation  # type: ignore[assignment]
        if self._combine is None:
            reservation.settle(held, count=len(items), largest=largest)
            self._clear()
            return _Group(items, held)
        self._clear()
        index = self._index
        self._index += 1
        acc = self._account
        # The items and their stacked batch exist together while it is made: one reservation for both (made
        # at the batch's start from the largest batch so far; the first batch's is topped up here).
        need = held + max(held, self._out_max)
        if need > reservation.nbytes:  # (the first batch, or larger items): their size is the unit from now on
            try:
                acc.grow_unit(largest)  # (so a batch that can never fit is refused naming its elements)
                reservation.top_up(need - reservation.nbytes, stop)
            except BaseException:
                reservation.cancel()
                raise
        try:
            out, n_out = _concatenated(runs, held, count) if runs else (self._combine(items, self._stage), -1)
        except Exception as e:
            reservation.cancel()
            raise note_error(e, self._stage, index) from None
        except BaseException:
            reservation.cancel()
            raise
        finally:
            del items, runs
        if n_out < 0:
            n_out = nbytes(out)
        self._out_max = max(self._out_max, n_out)
        # the items are gone and the batch is held: the items' size is this stage's unit, the batch's is not
        if taker_of(self) is None:  # handed on as it is returned: settled and released in one step, and for a
            # small batch (where a lock per batch shows) the next batch's room taken in the same step
            per = max(acc.estimate(), largest)
            renew = self._bs * per + max(self._out_max, n_out) if n_out < BufferPool.MIN_BYTES else 0
            if reservation.settle(n_out, unit=False, inputs=(count, largest), release=True, renew=renew):
                self._reservation, self._per = reservation, per
        else:
            reservation.settle(n_out, unit=False, inputs=(count, largest))
            hand_off(acc, n_out, self)
        return out

    def optimization(self) -> str | None:
        rows = self._rows
        if isinstance(rows, MapAndBatch):
            return rows.optimization()
        if rows is not None:
            return f"element runs: {getattr(rows, '_stage', 'its input')} hands this stage its elements in runs"
        return None

    def delivers_charged(self) -> bool:
        """A stacked batch is charged until it is returned (``headrace._handoff``); a group is not."""
        return self._combine is not None

    def skip_ahead(self, n: int) -> None:
        """Skip ``n`` batches (a restore's fast-forward, ``headrace._engine.replay``); a skipped group gives
        its bytes back."""
        def drop(out: Any) -> None:
            if isinstance(out, _Group):
                self._account.release(out.nbytes, count=len(out.items))

        advance(self.__next__, n, drop)

    def get_state(self) -> dict[str, Any]:
        state = {"kind": self.kind, "batch_size": self._bs, "drop_remainder": self._drop, "done": self._done,
                 "index": self._index, "input": self._source.get_state(), "pulled": 0}
        if self._pulled:
            if rereads_same(self._source, self._start_epoch):
                state.update(input=self._start, pulled=self._pulled)
            else:  # re-reading could deliver other elements: save the partial batch itself
                state["items"] = by_value.Deferred(list(self._items))
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, batch_size=self._bs, drop_remainder=self._drop)
        self._drop_items()
        self._source.set_state(state["input"])
        self._done = bool(state["done"])
        self._index = int(state.get("index", 0))
        if "items" in state:
            items = by_value.decode(state["items"], self._stage)
            n = sum(nbytes(x) for x in items)
            self._reservation = self._account.reserve(n, stop_flag(self.ctx), WHOLE_UNCAPPED)
            self._items, self._held, self._pulled = items, n, len(items)
            self._largest = max((nbytes(x) for x in items), default=0)
            return
        pulled = int(state.get("pulled", 0))
        if pulled:  # re-gather the partial batch; positions that raised were reported already
            self._start = state["input"]
            stop = stop_flag(self.ctx)
            self._room(stop)
            while self._pulled < pulled:
                try:
                    x = self._next_input()
                except StopIteration:
                    break
                except Exception:  # reported before the state was taken
                    self._pulled += 1
                    continue
                self._pulled += 1
                n = nbytes(x)
                self._items.append(x)
                self._held += n
                if n > self._largest:
                    self._largest = n
                    self._room(stop)

    def _close_self(self) -> None:
        self._drop_items()
        if self._spares is not None:
            self._spares.close()
        self._account.close()

    def _children(self) -> list[Stage]:
        return [self._source]
