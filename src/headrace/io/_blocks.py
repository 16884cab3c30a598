"""Shared machinery of the columnar readers (Parquet, HDF5): sharding, file lists, rows out of blocks.

A columnar reader reads *blocks*: dicts of numpy arrays with the same length on axis 0 (an Arrow record
batch, an HDF5 slice). With ``batch_size`` set each block is yielded as it is (the fast path); otherwise
the reader holds one block and yields its rows one by one. The block in hand is charged to the pipeline's
memory budget (a mandatory account of one element: it cannot hand out part of what it holds) and every
yielded row is a copy, so a downstream buffer never keeps a whole block alive through a view.

A library that decodes more than the block it returns (pyarrow reads and decodes a Parquet row group's column
chunks, not one record batch) has those buffers charged too, in a second mandatory account (``<stage>
buffers``): the reader reserves them before the read that makes them (``charge_work``) and releases them when
that read is over (``release_work``). A need larger than the whole budget (with the rows the read returns), or
one that finds the rest of the budget held by stages waiting for the read (where the stall breaker would
overdraw), raises ``MemoryBudgetError`` naming what is read, its size, the budget, the budget that would do and
the fix, before anything is read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from itertools import repeat
from operator import length_hint
from typing import Any

import numpy as np

from .._engine.context import IteratorContext
from .._engine.seeds import check_seed
from .._engine.stage import Stage
from .._engine.stage_support import stop_flag
from .._errors import DataLossError, MemoryBudgetError, StateError
from .._memory import Cancelled, Policy, StageAccount, format_bytes
from .._structure import nbytes
from .._sync import Lock
from . import files

BLOCK_BYTES = 4 * 1024 * 1024
"""Target size of a block read in row-by-row mode (rows are cut from it one at a time). A block is never
larger than ``4 * BLOCK_BYTES`` or 1/16 of the memory budget (but always at least one row)."""

_GLOB_CHARS = frozenset("*?[")
READY_ROWS = 512
"""Rows per run that ``BlockRowIterator.elements_ready`` makes at C speed (lists of their values: ~40 bytes a value
beside the block, outside the budget's count, so kept short)."""


def check_shard(num_shards: int, index: int, what: str) -> None:
    """Raise ``ValueError`` unless ``0 <= index < num_shards``."""
    for name, v in (("num_shards", num_shards), ("index", index)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise TypeError(f"{what}: {name}={v!r} must be an int")
    if num_shards < 1 or not 0 <= index < num_shards:
        raise ValueError(f"{what}: num_shards={num_shards}, index={index}: need num_shards >= 1 and "
                         f"0 <= index < num_shards (e.g. num_shards=world_size, index=rank)")


def check_batch_size(batch_size: int | None, what: str) -> None:
    if batch_size is None:
        return
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) or batch_size < 1:
        raise ValueError(f"{what}: batch_size={batch_size!r} must be an int >= 1, or None for one row at a time")


def resolve_files(spec: Any, what: str) -> list[str]:
    """Paths / URLs from one path, a list of them, or glob patterns (expanded, sorted; each must match)."""
    items = [spec] if isinstance(spec, str | bytes | os.PathLike) or hasattr(spec, "item") else list(spec)
    out: list[str] = []
    for item in items:
        path = files.to_str_path(item)
        if _GLOB_CHARS & set(path.split("://", 1)[-1]):
            matched = files.glob(path)
            if not matched:
                raise FileNotFoundError(f"{what}: the pattern {path!r} matches no file")
            out.extend(matched)
        else:
            out.append(path)
    if not out:
        raise ValueError(f"{what}: no files given; pass a path, a URL, a glob pattern or a list of them")
    return out


def open_source(path: str, opener: Callable[[Any], Any], errors: tuple[type[BaseException], ...],
                what: str, fmt: str) -> tuple[Any, Any]:
    """``(opener(local path or remote file object), remote handle or None)``.

    A missing file raises ``FileNotFoundError`` and an unreadable one (``errors``) ``DataLossError``, both
    naming ``path``.
    """
    handle = files.open_file(path) if files.is_remote(path) else None
    try:
        return opener(handle if handle is not None else path.removeprefix("file://")), handle
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{what}: no such file: {path}") from e
    except errors as e:
        close_quietly(handle)
        raise DataLossError(f"{what}: {path} is not a readable {fmt} file ({e}); check that the file is "
                            f"complete (an interrupted copy or upload?) and really {fmt}", path=path,
                            reason="bad file") from e


def close_quietly(*objs: Any) -> None:
    """``close()`` each object that is not ``None``."""
    for obj in objs:
        if obj is not None:
            obj.close()


def state_error(kind: str, msg: str) -> StateError:
    return StateError(f"state mismatch in {kind}: {msg}; restore a state saved from the same dataset "
                      "(same files and arguments)")


def adopt_seed(state: dict[str, Any], seed: int, seed_given: bool, kind: str) -> int:
    """The shuffling seed to continue with: the state's, unless the user fixed another one."""
    return check_seed(kind, state, seed, seed_given)


def row_of(block: dict[str, np.ndarray], i: int) -> dict[str, Any]:
    """Row ``i`` of a block as independent values (numpy scalars, ``bytes``, copied arrays)."""
    row = {}
    for key, col in block.items():
        v = col[i]
        row[key] = v.copy() if isinstance(v, np.ndarray) else v
    return row


class BlockRowIterator(Stage):
    """Base iterator: subclasses implement ``_read_block()`` (the next block, or ``None`` at the end)
    and position bookkeeping; this class yields blocks (``batch_size``) or rows and does the accounting.

    ``self._offset`` is the index of the next row to yield inside the current block; subclasses read it
    for ``get_state`` and set it (after ``_hold``) in ``set_state``. A subclass whose rows are one column's
    values, not dicts, names that column in ``row_key`` (and unwraps ``__next__``'s rows itself).
    """

    ctx: IteratorContext  # (a reader is always built with its context)
    row_key: str | None = None
    row_tuples = False  # rows as tuples of the block's values (in its column order), not dicts

    def ready_stop(self) -> int:
        """The end of the rows of the block in hand ``elements_ready`` may hand out (a reader whose block holds
        errors between rows: the next one)."""
        return self._block_rows

    def __init__(self, ctx: IteratorContext, node: object, stage: str, batch_size: int | None) -> None:
        super().__init__(ctx)
        self._stage = ctx.stage_name(node, stage)
        self._batch_size = batch_size
        self._account = (ctx.account(self._stage, 1, mandatory=True,
                                     hint="pass batch_size=... (batches are not held) or write smaller rows")
                         if batch_size is None else None)
        self._block: dict[str, np.ndarray] | None = None
        self._block_rows = 0
        self._held_bytes = 0
        self._pos = 0  # the next row's index in the block (``_offset``, once the run below is counted)
        self._run: tuple[Iterator[Any], Iterator[Any], int, int] | None = None  # elements_ready's: (its rows,
        # the iterator whose remaining length counts them, the first row's index, the rows in the run)
        self._block_cap_bytes = max(1, min(4 * BLOCK_BYTES, ctx.budget.limit_bytes // 16))
        self._work: StageAccount | None = None
        self._work_held = 0
        # The accounts are given back once: by the reading thread's own releases while they are open, or all at
        # once by close() (which may come from another thread during a read: the read's reservation and buffers
        # are then given back by the close, and the read finds its accounts closed and releases nothing). Both
        # sides change them under this lock, so a release never lands after the close (in the budget) nor twice.
        self._gate = Lock(f"{self._stage}: its accounts")

    def _give_back(self, acc: StageAccount | None, nbytes: int) -> None:
        """Release ``nbytes`` held in ``acc`` unless ``close()`` gave everything back already."""
        if acc is None or not nbytes:
            return
        with self._gate:
            if not acc.closed:
                acc.release(nbytes)

    def open_work(self, largest: int) -> None:
        """Open the account of the reader's own buffers; ``largest``: the most one read needs (its unit of work,
        known before any read: the other stages' shares leave room for it from the start, in a fresh and in a
        restored iterator alike)."""
        self._work = self.ctx.account(f"{self._stage} buffers", 1, mandatory=True,
                                      hint="write the file in smaller pieces", stage_of=self._stage)
        self._work.holds_between = True  # held until the read is over, across the rows it yields
        self._work.unit_is_element = False  # buffers, not elements: no stage may assume elements this large
        if largest > 0:
            self._work.grow_unit(largest)

    def charge_work(self, nbytes: int, what: str, fix: str, selection: int = 0) -> None:
        """Reserve ``nbytes`` for the buffers that reading ``what`` makes (after ``open_work``), waiting for room;
        held until ``release_work``. ``selection``: the bytes of the rows this read returns into the block in
        hand (row mode), which exist during the read too.

        ``MemoryBudgetError`` (ending with ``fix`` and the budget that would do), before anything is read: the
        buffers and the block in hand more than the whole budget; or no room while the stages holding the rest
        of the budget wait for this read (the stall breaker's case: it used to overdraw at every read, sweep
        seed 202: 8 stalls, 18 MB overdrawn)."""
        acc = self._work
        if acc is None:
            raise RuntimeError(f"{self._stage}: charge_work() before open_work()")
        self.release_work()
        limit = acc.budget.limit_bytes
        block = self._account
        own = max(block.held_bytes, selection) if block is not None else 0
        needs = f"{what} needs {format_bytes(nbytes)} ({nbytes} bytes) of buffers at once"
        budget = f"memory budget of {format_bytes(limit)} ({limit} bytes)"
        if nbytes + own > limit:
            beside = f" beside the {format_bytes(own)} of rows it returns" if own else ""
            raise MemoryBudgetError(f"{needs}{beside}, more than the whole {budget}; {fix} (a budget of at least "
                                    f"{format_bytes(nbytes + own)} ({nbytes + own} bytes) fits this read alone)")
        acc.check_possible(nbytes)  # (other readers holding their buffers: refused naming them all)

        def refuse(holders: str, total: int) -> str:
            return (f"{needs}, but the rest of the {budget} is held by buffers that wait for this read ({holders}); "
                    f"{fix} (a budget of at least {format_bytes(total)} ({total} bytes) fits this read beside them)")

        reservation = acc.reserve(nbytes, stop_flag(self.ctx), Policy(refuse=refuse))
        with self._gate:
            if acc.closed:  # (closed from another thread meanwhile: the close gave the reservation back)
                raise Cancelled()
            reservation.settle(nbytes)
            self._work_held = nbytes

    def release_work(self, nbytes: int | None = None) -> None:
        """The read that ``charge_work`` was for is over: its buffers are gone (``nbytes``: only that many)."""
        give = self._work_held if nbytes is None else min(nbytes, self._work_held)
        self._work_held -= give
        self._give_back(self._work, give)

    def rows_per_block(self, row_bytes: float, natural_rows: int) -> int:
        """``natural_rows`` (a chunk, about ``BLOCK_BYTES``), capped by the block size limit, >= 1."""
        return int(max(1, min(natural_rows, self._block_cap_bytes // max(row_bytes, 1.0))))

    def _read_block(self) -> dict[str, np.ndarray] | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _read_held(self) -> dict[str, np.ndarray] | None:
        """Read the next block into hand (``None`` at the end): room for it is reserved before it is read
        (the largest block seen so far), then settled to its real size (``headrace._memory``)."""
        self._drop()
        acc = self._account
        if acc is None:
            return self._read_block()
        reservation = acc.reserve(acc.estimate(), stop_flag(self.ctx))
        try:
            block = self._read_block()
            size = 0 if block is None else self.block_nbytes(block)
            with self._gate:
                if acc.closed:  # (closed from another thread during the read: nothing of it is kept)
                    raise Cancelled()
                if block is None:
                    reservation.cancel()
                    return None
                reservation.settle(size)
        except BaseException:
            with self._gate:
                if not acc.closed:
                    reservation.cancel()
            raise
        self._block, self._held_bytes = block, size
        self._block_rows = len(next(iter(block.values()))) if block else 0
        self._offset = 0
        return block

    def block_nbytes(self, block: dict[str, np.ndarray]) -> int:
        """The bytes a block holds (``nbytes``), about to be charged as the block in hand; a reader that knows them
        says so faster, and one that charged them among its buffers (``charge_work``) moves them from there."""
        return nbytes(block)

    def _drop(self) -> None:
        self._give_back(self._account, self._held_bytes)
        self._block, self._block_rows, self._held_bytes, self._offset = None, 0, 0, 0

    @property
    def _offset(self) -> int:
        """The index of the next row to yield in the block in hand (the rows ``elements_ready`` gave counted)."""
        run = self._run
        return self._pos if run is None else run[2] + run[3] - length_hint(run[1])

    @_offset.setter
    def _offset(self, value: int) -> None:
        self._run = None
        self._pos = value

    def _end_run(self) -> None:
        """Leave the run: the position goes past the rows taken from it."""
        self._offset = self._offset

    def elements_ready(self) -> Iterator[Any] | None:
        """The next rows of the block in hand (up to ``READY_ROWS`` at a time), made without a Python call each:
        the same dicts of numpy scalars and ``bytes`` as ``__next__`` (``row_of``), or the values of ``row_key``'s
        column; the position counts what was taken. A run not used up is handed out again (a small batch takes
        a few rows per call). None in batch mode, between blocks, or when a column holds arrays per row
        (copied one by one)."""
        run = self._run
        if run is not None:
            if length_hint(run[1]):
                return run[0]
            self._end_run()
        if self._batch_size is not None or self._block is None:
            return None
        start = self._pos
        stop = min(start + READY_ROWS, self.ready_stop())
        block = self._block
        if stop <= start or any(col.ndim != 1 for col in block.values()):
            return None
        only = self.row_key
        if only is not None:  # rows are that column's values
            rows = track = iter(list(block[only][start:stop]))
        else:
            columns = [list(col[start:stop]) for col in block.values()]  # col[i]'s values, in a C loop each
            track = iter(columns[0])
            rows = zip(track, *columns[1:])
            if not self.row_tuples:
                rows = map(dict, map(zip, repeat(tuple(block)), rows))
        self._run = (rows, track, start, stop - start)
        return rows

    def __next__(self) -> Any:
        if self._batch_size is not None:
            block = self._read_block()
            if block is None:
                raise StopIteration
            return block
        if self._run is not None:
            self._end_run()  # rows taken from a run are past; __next__ goes on from there
        while self._pos >= self._block_rows:
            if self._read_held() is None:
                raise StopIteration
        row = row_of(self._block, self._pos)  # type: ignore[arg-type]
        self._pos += 1
        return row

    def _close_self(self) -> None:
        with self._gate:  # everything given back at once, a read in progress in another thread included
            for acc in (self._account, self._work):
                if acc is not None:
                    acc.close()
        self._drop()
        self.release_work()


def shard_range(n: int, num_shards: int, index: int) -> tuple[int, int]:
    """The contiguous ``[start, stop)`` of shard ``index`` of ``n`` rows (sizes differ by at most 1)."""
    return n * index // num_shards, n * (index + 1) // num_shards


def strided(items: Sequence[Any], num_shards: int, index: int) -> list[Any]:
    """Items ``index, index + num_shards, ...``: disjoint and complete over ``index``."""
    return list(items[index::num_shards])
