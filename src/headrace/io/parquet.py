"""``ParquetDataset``: stream Apache Parquet files row group by row group with pyarrow.

Format: Apache Parquet (https://parquet.apache.org/docs/file-format/), read by ``pyarrow.parquet``. A file
is never read whole: the reader streams one row group at a time with ``ParquetFile.iter_batches``, in
record batches (``batch_size`` rows, or blocks of about 4 MiB in row-by-row mode).

Column types become numpy values:

==============================================  =================================================
Arrow type                                      yielded (per row / per batch)
==============================================  =================================================
int*, uint*, float*, bool                       numpy scalar / 1-D array of that dtype
timestamp, date, duration                       ``numpy.datetime64`` / ``timedelta64``
string, binary (and dictionary-encoded ones)    ``bytes`` / object array of ``bytes`` (UTF-8)
fixed_size_list<T>[k] (nested)                  array ``(k, ...)`` / ``(n, k, ...)``
list<T>                                         1-D array per row; per batch ``(n, k)`` if every
                                                list in the batch has length ``k`` (else an error)
==============================================  =================================================

Nulls are not silently filled: a null raises ``ValueError`` naming the file, column and row group.

Memory: pyarrow reads a row group's column chunks (as stored) and decodes their pages, which may be the
whole chunk (a page of large strings or binary values), before it returns a record batch. Before a row
group is read, what pyarrow may hold of it (from the footer: its chunks as stored, decompressed and
decoded) and two record batches are reserved from the memory budget (``_blocks.BlockRowIterator.
charge_work``) and held until the row group is done; a row group that needs more than the whole budget
raises ``MemoryBudgetError`` naming the file, the row group, its size and the budget, before it is read
(write such files with smaller row groups).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._dataset import Dataset
from .._deps import require
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage
from .._engine.stage_support import check_state
from .._errors import DataLossError
from .._memory import format_bytes
from .._sync import Lock as TimedLock
from ._blocks import (
    BLOCK_BYTES,
    BlockRowIterator,
    adopt_seed,
    check_batch_size,
    check_shard,
    close_quietly,
    open_source,
    resolve_files,
    state_error,
    strided,
)

_WHAT = "ParquetDataset"


def _pyarrow() -> tuple[Any, Any, Any]:
    return require("pyarrow", _WHAT), require("pyarrow.compute", _WHAT), require("pyarrow.parquet", _WHAT)


def _open(path: str) -> tuple[Any, Any]:
    """``(ParquetFile, handle-or-None)``; missing files and unreadable footers raise naming ``path``."""
    pa, _, pq = _pyarrow()
    return open_source(path, pq.ParquetFile, (pa.ArrowException, OSError), _WHAT, "Parquet")


class _FileMeta:
    """What the footer says about one file: row counts per row group, bytes per row of the columns, and what
    pyarrow may hold of the columns' chunks while it reads a row group (``rg_chunk_bytes``: each chunk as
    stored, decompressed unless it is stored uncompressed, and its values decoded: measured with pyarrow 25,
    where a page of large binary values is the whole chunk)."""

    def __init__(self, path: str, names: list[str], rg_rows: list[int], rg_row_bytes: list[float],
                 rg_chunk_bytes: list[int]) -> None:
        self.path = path
        self.names = names
        self.rg_rows = rg_rows
        self.rg_row_bytes = rg_row_bytes
        self.rg_chunk_bytes = rg_chunk_bytes


def _read_meta(path: str, columns: list[str] | None) -> _FileMeta:
    pf, handle = _open(path)
    try:
        names = list(pf.schema_arrow.names)
        if columns is not None:
            missing = [c for c in columns if c not in names]
            if missing:
                raise ValueError(f"{_WHAT}: column(s) {missing} not in {path}; it has columns {names}. "
                                 "Fix columns=[...] or the file list")
        wanted = set(names if columns is None else columns)
        fixed = sum(_fixed_width(pf.schema_arrow.field(n).type) for n in wanted)
        md = pf.metadata
        rows, row_bytes, chunk_bytes = [], [], []
        for i in range(md.num_row_groups):
            rg = md.row_group(i)
            chunks = [rg.column(j) for j in range(rg.num_columns)
                      if rg.column(j).path_in_schema.split(".")[0] in wanted]
            size = sum(c.total_uncompressed_size for c in chunks)
            rows.append(rg.num_rows)
            # encoded sizes undercount runs and dictionaries: fixed-width columns are counted exactly
            row_bytes.append(max(size / max(rg.num_rows, 1), fixed))
            # pyarrow holds a chunk as stored, decompressed (a copy unless uncompressed), and its decoded values
            chunk_bytes.append(sum(c.total_compressed_size + c.total_uncompressed_size
                                   * (1 if c.compression == "UNCOMPRESSED" else 2) for c in chunks))
        return _FileMeta(path, names, rows, row_bytes, chunk_bytes)
    finally:
        if handle is not None:
            handle.close()


def _fixed_width(t: Any) -> int:
    """Bytes per row of a fixed-width Arrow type as numpy holds it (0 for variable-width types)."""
    pa, _, _ = _pyarrow()
    if pa.types.is_fixed_size_list(t):
        return t.list_size * _fixed_width(t.value_type)
    if pa.types.is_boolean(t):
        return 1
    try:
        return max(0, t.bit_width // 8)
    except ValueError:  # variable-width: strings, binary, lists, ...
        return 0


class ParquetDataset(Dataset):
    """Rows (or record batches) of Parquet files, streamed one row group at a time.

    >>> ds = hr.io.ParquetDataset("data/*.parquet", columns=["x", "y"], batch_size=1024)

    Args:
        files: a path or fsspec URL (``s3://``, ``gs://``, ``memory://``, ``file://``), a glob pattern, or a
            list of them (``bytes`` from ``Dataset.list_files`` work too). Files are read in the given order.
        columns: column names to read (projection: other columns are never decoded); default all columns
            of the first file. Every file must have them.
        batch_size: ``None``: one element per row, a dict ``{column: value}`` in the file's column order (or
            ``columns``'): the column's numpy scalar type (``np.int64``, ``np.float32``, ``np.bool_``, ...; never
            a Python number), ``bytes`` or a numpy array (the table above). A ``map`` of these rows into a
            ``batch`` runs over them in runs (docs/design/rows.md). An int: one element per record batch, a dict
            ``{column: array of n rows}`` - the fast path (no per-row Python work). A batch never spans two row
            groups, so the last batch of each row group may have fewer rows (like ``pyarrow``'s ``iter_batches``
            on one row group).
        shuffle_row_groups: read the row groups (of all files) in a random order, a new order for each
            iteration (epoch); rows inside a row group keep their order - add ``.shuffle(n)`` to mix them.
        seed: seed of that order (``None``: random, drawn once when the dataset is created).
        num_shards, index: read only row groups ``index, index + num_shards, ...`` of the concatenated
            row-group list (e.g. ``num_shards=world_size, index=rank``): the shards are disjoint and
            together complete.

    Attributes: ``files`` (resolved paths), ``columns`` (after the first iteration or ``metadata()``: every
    column when ``None`` was given), ``batch_size``, ``shuffle_row_groups``, ``seed``, ``num_shards``,
    ``index``; methods ``metadata()`` (the files' footers) and ``units(epoch)`` (the row groups read, in order).

    Iterator state: ``{"unit", "file", "row_group", "row"}`` - the position in the row-group order, that
    row group's file and index, and the next row in it (plus the epoch and settings, checked on restore).

    Raises:
        FileNotFoundError: a missing file or a pattern matching nothing (naming it).
        DataLossError: a file that is not readable Parquet (bad footer) or fails while a row group is read.
        ValueError: a missing column (naming the file and the columns it has), nulls, an unsupported type,
            bad ``batch_size`` / ``num_shards`` / ``index``.
    """

    _node_attributes = frozenset({"files", "columns", "batch_size", "shuffle_row_groups", "seed", "num_shards",
                                  "index", "metadata", "units"})

    def __init__(self, files: Any, columns: list[str] | tuple[str, ...] | None = None,
                 batch_size: int | None = None, shuffle_row_groups: bool = False, seed: int | None = None,
                 num_shards: int = 1, index: int = 0) -> None:
        super().__init__(ParquetNode(files, columns, batch_size, shuffle_row_groups, seed, num_shards, index))


class ParquetNode(DatasetNode):
    """The recipe node of :class:`ParquetDataset` (same arguments); reads the footers once, on first use."""

    label = "ParquetDataset"

    def __init__(self, files: Any, columns: list[str] | tuple[str, ...] | None, batch_size: int | None,
                 shuffle_row_groups: bool, seed: int | None, num_shards: int, index: int) -> None:
        super().__init__()
        check_batch_size(batch_size, _WHAT)
        check_shard(num_shards, index, _WHAT)
        _pyarrow()  # without pyarrow: MissingDependencyError here, not at the first element
        if isinstance(columns, str):
            columns = [columns]
        self.files = resolve_files(files, _WHAT)
        self.columns = None if columns is None else list(columns)
        if self.columns is not None and not self.columns:
            raise ValueError(f"{_WHAT}: columns=[] selects nothing; pass None for all columns")
        self.batch_size = None if batch_size is None else int(batch_size)
        self.shuffle_row_groups = bool(shuffle_row_groups)
        self.seed_given = seed is not None
        self.seed = int(np.random.default_rng().integers(2**62)) if seed is None else int(seed)
        self.num_shards, self.index = int(num_shards), int(index)
        self._meta: list[_FileMeta] | None = None
        self._lock = TimedLock("parquet footers")

    def shard_source(self, num_shards: int, index: int) -> DatasetNode | None:
        """This share of row groups again split ``num_shards`` ways (``headrace._ops.shard.shard_at_source``)."""
        clone = copy.copy(self)
        clone.index = self.index + self.num_shards * index
        clone.num_shards = self.num_shards * num_shards
        return clone

    def metadata(self) -> list[_FileMeta]:
        """Footers of all files, read once (on first use) and cached."""
        with self._lock:
            if self._meta is None:
                metas = [_read_meta(p, self.columns) for p in self.files]
                if self.columns is None:
                    self.columns = metas[0].names
                    for m in metas[1:]:
                        missing = [c for c in self.columns if c not in m.names]
                        if missing:
                            raise ValueError(f"{_WHAT}: {m.path} lacks column(s) {missing} that "
                                             f"{metas[0].path} has; pass columns=[...] present in every file")
                self._meta = metas
            return self._meta

    def units(self, epoch: int | Sequence[int] = 0, seed: int | None = None) -> list[tuple[int, int]]:
        """``(file index, row group)`` pairs this shard reads in iteration ``epoch`` (an int or an iteration
        path, ``headrace._engine.seeds``), in order."""
        meta = self.metadata()
        every = [(f, g) for f, m in enumerate(meta) for g in range(len(m.rg_rows))]
        mine = strided(every, self.num_shards, self.index)
        if self.shuffle_row_groups:
            path = [epoch] if isinstance(epoch, int) else list(epoch)
            order = np.random.default_rng([self.seed if seed is None else seed, *path]).permutation(len(mine))
            mine = [mine[i] for i in order]
        return mine

    def cardinality(self) -> int:
        meta = self.metadata()
        total = 0
        for f, g in self.units():
            n = meta[f].rg_rows[g]
            total += n if self.batch_size is None else -(-n // self.batch_size)
        return total

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _ParquetIterator(ctx, self, list(ctx.iteration) if self.shuffle_row_groups else [0])


class _ParquetIterator(BlockRowIterator):
    kind = "parquet"

    def __init__(self, ctx: IteratorContext, ds: ParquetNode, epoch: list[int]) -> None:
        super().__init__(ctx, ds, "parquet", ds.batch_size)
        self._ds = ds
        self._meta = ds.metadata()
        self._columns: list[str] = list(ds.columns or [])
        self._seed = ds.seed
        self._start_epoch(epoch)
        self._pf: Any = None
        self._pf_file = -1
        self._handle: Any = None
        limit = ctx.budget.limit_bytes
        self.open_work(max((n for n in (self._unit_bytes(*u)[1] for u in ds.units()) if n <= limit), default=0))

    def _start_epoch(self, epoch: list[int]) -> None:
        self._epoch = epoch
        self._units = self._ds.units(epoch, self._seed)
        self._u = 0
        self._gen: Any = None
        self._next_row = 0     # next row of unit _u the generator will produce
        self._block_start = 0  # row (in its row group) of the first row of the block in hand
        self._skip = 0

    # ---- reading -------------------------------------------------------------------------------------
    def _where(self) -> str:
        f, g = self._units[self._u]
        return f"{self._meta[f].path} (row group {g})"

    def _file(self, f: int) -> Any:
        if f != self._pf_file:
            self._close_file()
            self._pf, self._handle = _open(self._meta[f].path)
            self._pf_file = f
        return self._pf

    def _unit_bytes(self, f: int, g: int) -> tuple[int, int]:
        """``(rows per record batch, bytes pyarrow may hold while it reads row group g of file f)``: its column
        chunks (``_FileMeta.rg_chunk_bytes``) and two record batches (the one returned, the next being built)."""
        meta = self._meta[f]
        row_bytes = max(meta.rg_row_bytes[g], 1.0)
        rows = self._ds.batch_size or self.rows_per_block(row_bytes, int(min(65536, BLOCK_BYTES // row_bytes)))
        return rows, meta.rg_chunk_bytes[g] + int(2 * min(rows, meta.rg_rows[g]) * row_bytes)

    def _open_unit(self, skip: int) -> None:
        f, g = self._units[self._u]
        rows, need = self._unit_bytes(f, g)
        meta = self._meta[f]
        fit = int(self.ctx.budget.limit_bytes / 2 / max(need / max(meta.rg_rows[g], 1), 1.0))
        fix = (f"write the file with row groups of at most {fit} rows (pyarrow.parquet.write_table(..., "
               f"row_group_size={fit})) or raise Options(memory_budget=...)" if fit >= 1 else
               "a single row does not fit: raise Options(memory_budget=...) or write smaller rows")
        self.charge_work(need, f"{_WHAT}: reading {meta.path} (row group {g}: {meta.rg_rows[g]} rows, "
                               f"{format_bytes(meta.rg_chunk_bytes[g])} of column chunks as stored, "
                               "decompressed and decoded)", fix)
        self._gen = self._file(f).iter_batches(batch_size=rows, row_groups=[g], columns=self._columns,
                                               use_threads=False)
        self._next_row, self._skip = 0, skip

    def _end_unit(self) -> None:
        """The current row group's reader is done (or dropped): its buffers are released, and pyarrow's
        allocator (mimalloc or jemalloc keep freed memory for reuse) is asked to give them back to the OS."""
        if self._gen is not None:
            self._gen = None
            _pyarrow()[0].default_memory_pool().release_unused()
        self.release_work()

    def _read_block(self) -> dict[str, np.ndarray] | None:
        pa, _, _ = _pyarrow()
        while True:
            if self._gen is None:
                if self._u >= len(self._units):
                    return None
                self._open_unit(0)
            try:
                batch = next(self._gen)
            except StopIteration:
                self._end_unit()
                self._u, self._next_row, self._block_start = self._u + 1, 0, 0
                continue
            except (pa.ArrowException, OSError) as e:
                lost = self._lost_in_unit()
                raise DataLossError(f"{_WHAT}: cannot read {self._where()}: {e}; the file is corrupt or was "
                                    f"changed while being read; the rest of the row group ({lost} "
                                    f"{'rows' if self._ds.batch_size is None else 'batches'}) is skipped",
                                    path=self._meta[self._units[self._u][0]].path, reason="bad row group",
                                    lost_elements=lost) from e
            if self._skip:
                cut = min(self._skip, batch.num_rows)
                self._skip -= cut
                self._next_row += cut
                batch = batch.slice(cut)
                if batch.num_rows == 0:
                    continue
            self._block_start = self._next_row
            self._next_row += batch.num_rows
            return {name: _to_numpy(batch.column(i), name, self._where(), self._ds.batch_size is not None)
                    for i, name in enumerate(batch.schema.names)}

    def _lost_in_unit(self) -> int:
        """Elements of the current row group not yet produced (nor to be skipped): rows, or batches of
        ``batch_size`` rows (a row group's batches start at its row 0); at least 1."""
        f, g = self._units[self._u]
        rows, done = self._meta[f].rg_rows[g], self._next_row + self._skip
        bs = self._ds.batch_size
        left = rows - done if bs is None else -(-rows // bs) - done // bs
        return max(1, left)

    # ---- state ---------------------------------------------------------------------------------------
    def _settings(self) -> dict[str, Any]:
        ds = self._ds
        return {"files": len(ds.files), "columns": self._columns, "batch_size": ds.batch_size,
                "shuffle_row_groups": ds.shuffle_row_groups, "num_shards": ds.num_shards, "index": ds.index}

    def get_state(self) -> dict[str, Any]:
        row = self._block_start + self._offset if self._ds.batch_size is None else self._next_row + self._skip
        f, g = self._units[self._u] if self._u < len(self._units) else (-1, -1)
        return {"kind": self.kind, **self._settings(), "seed": self._seed, "epoch": self._epoch, "unit": self._u,
                "file": self._meta[f].path if f >= 0 else None, "row_group": g, "row": row}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, **self._settings())
        self._seed = adopt_seed(state, self._ds.seed, self._ds.seed_given, self.kind)
        self._drop()
        self._end_unit()
        saved = state["epoch"]
        self._start_epoch([int(saved)] if isinstance(saved, int) else [int(e) for e in saved])
        u = int(state["unit"])
        if not 0 <= u <= len(self._units):
            raise state_error(self.kind, f"unit {u} is outside 0..{len(self._units)}")
        self._u = u
        if u < len(self._units):
            f, g = self._units[u]
            if (self._meta[f].path, g) != (state["file"], state["row_group"]):
                raise state_error(self.kind, f"unit {u} is {self._meta[f].path} row group {g} here but "
                                   f"{state['file']} row group {state['row_group']} in the state")
            self._open_unit(int(state["row"]))
            self._block_start = int(state["row"])

    def _close_file(self) -> None:
        close_quietly(self._handle)
        self._pf, self._handle, self._pf_file = None, None, -1

    def _close_self(self) -> None:
        self._end_unit()
        super()._close_self()
        self._close_file()


def _to_numpy(col: Any, name: str, where: str, batched: bool) -> np.ndarray:
    """One Arrow column of a record batch as a numpy array (see the table in the module docstring)."""
    pa, pc, _ = _pyarrow()
    if col.null_count:
        raise ValueError(f"{_WHAT}: column {name!r} of {where} has {col.null_count} null value(s); numpy "
                         "arrays have no nulls: fill them when writing (pyarrow.compute.fill_null) or leave "
                         "the column out with columns=[...]")
    t = col.type
    if pa.types.is_dictionary(t):
        return _to_numpy(col.dictionary_decode(), name, where, batched)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        col = col.cast(pa.large_binary())
        t = col.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return col.to_numpy(zero_copy_only=False)
    if pa.types.is_fixed_size_list(t):
        values = _to_numpy(col.flatten(), name, where, batched)
        return values.reshape(len(col), t.list_size, *values.shape[1:])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
        values = _to_numpy(col.flatten(), name, where, batched)
        if len(col) and (lengths == lengths[0]).all():
            return values.reshape(len(col), int(lengths[0]), *values.shape[1:])
        if batched:
            raise ValueError(f"{_WHAT}: column {name!r} of {where} holds lists of different lengths "
                             f"({int(lengths.min())}..{int(lengths.max())}), which cannot form one array per "
                             "batch; use batch_size=None (one row at a time) and pad or ragged-batch them")
        out = np.empty(len(col), dtype=object)
        for i, part in enumerate(np.split(values, np.cumsum(lengths)[:-1])):
            out[i] = part
        return out
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_temporal(t)):
        return col.to_numpy(zero_copy_only=False)
    raise ValueError(f"{_WHAT}: column {name!r} of {where} has type {t}, which headrace does not convert; "
                     "read the columns of supported types (numbers, bool, time, strings, binary, lists) "
                     "with columns=[...], or cast it when writing")
