"""``HDF5Dataset``: rows of h5py datasets aligned on axis 0, read in chunk-sized slices.

Format: HDF5 (https://docs.hdfgroup.org/hdf5/develop/_f_m_t3.html) through ``h5py``. The datasets named by
``keys`` must all have the same length on axis 0 (row ``i`` of each belongs together, like the arrays
given to ``from_tensor_slices``). Reading goes in slices of whole HDF5 chunks (the dataset's chunk length on
axis 0; about 4 MiB of rows for contiguous datasets), never the whole dataset; with ``batch_size`` each
batch is one slice ``[i, i + batch_size)``.

Memory: h5py decompresses a filtered (gzip, lzf, shuffle, fletcher32, ...) chunk whole to read any row of it,
holding the stored chunk and the decoded one at once: the decoded chunk (its chunk shape times the itemsize)
plus the largest chunk as stored in the file (listed once, when the dataset is opened) are charged to the
reader's ``buffers`` account (``_blocks.charge_work``) before each dataset is read and released after the read.
The file's chunk cache is off, so no decoded chunk outlives its read. A read that needs more than the whole
budget with the rows it returns, or that finds the rest of the budget held by stages waiting for it (where the
stall breaker would overdraw), raises ``MemoryBudgetError`` naming the file, the dataset, the chunk shape and
size, the budget, the budget that would do and the fix, before it is read. Unfiltered chunks are read straight
into the returned slice (nothing more is charged).

Values: numeric datasets give numpy scalars (1-D datasets) or arrays of the trailing shape; string
datasets give ``bytes`` (h5py's variable-length strings) or ``numpy.bytes_`` (fixed-length ones).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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
from . import files
from ._blocks import (
    BLOCK_BYTES,
    BlockRowIterator,
    check_batch_size,
    check_shard,
    close_quietly,
    open_source,
    shard_range,
    state_error,
)

_WHAT = "HDF5Dataset"


def _open(path: str) -> tuple[Any, Any]:
    """``(h5py.File, handle-or-None)``; missing and non-HDF5 files raise naming ``path``. The file's chunk cache
    is off (``rdcc_nbytes=0``): a decoded chunk lives only while the read that needs it (charged), never
    between reads (the default cache keeps decoded chunks per dataset, uncharged: 1 MiB in HDF5 1.x, 8 MiB in
    HDF5 2.0)."""
    h5py = require("h5py", _WHAT)
    return open_source(path, lambda src: h5py.File(src, "r", rdcc_nbytes=0), (OSError,), _WHAT, "HDF5")


@contextlib.contextmanager
def damaged_metadata(path: str, what: str) -> Iterator[None]:
    """Raise h5py's errors while reading ``what`` of the file's metadata (object headers, links, the
    dataspace) as ``DataLossError`` naming ``path`` and ``what``: a flipped byte in an object header gave
    h5py's bare ``RuntimeError: Object visitation failed (...)`` or ``KeyError: 'Unable to synchronously
    open object (...)'``, without the file's name.

    Raises:
        DataLossError: ``reason="bad metadata"``, ``path``; h5py's message kept.
    """
    try:
        yield
    except DataLossError:
        raise
    except (RuntimeError, KeyError, OSError) as e:
        detail = e.args[0] if isinstance(e, KeyError) and e.args else e
        raise DataLossError(f"{_WHAT}: cannot read {what} in {path}: {detail}; the file's metadata is damaged: "
                            "re-create the file (or copy it again)", path=path, reason="bad metadata") from e


def dataset_names(f: Any, path: str) -> list[str]:
    """Every dataset of the open ``h5py.File`` ``f`` (of ``path``), by path (``"g/z"``), in h5py's visit order.

    Raises:
        DataLossError: a damaged object header on the way (:func:`damaged_metadata`).
    """
    h5py = require("h5py", _WHAT)

    names: list[str] = []
    with damaged_metadata(path, "the list of datasets"):
        f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    return names


def _block_rows(datasets: list[Any]) -> tuple[int, int]:
    """``(rows per read in row mode, bytes per row)``: the longest chunk length on axis 0 among the chunked
    datasets (the contiguous ones read any slice efficiently), else about ``BLOCK_BYTES`` of rows."""
    row_bytes = sum(max(1, int(np.prod(d.shape[1:], dtype=np.int64)) * d.dtype.itemsize) for d in datasets)
    chunked = [d.chunks[0] for d in datasets if d.chunks]
    return (max(chunked) if chunked else max(1, BLOCK_BYTES // row_bytes)), row_bytes


def _largest_stored(d: Any, decoded: int) -> int:
    """The largest chunk of dataset ``d`` as stored in the file (compressed); ``decoded`` where HDF5 cannot list
    its chunks (a bound: filters barely expand what they cannot compress)."""
    sizes = [0]
    try:
        d.id.chunk_iter(lambda info: sizes.append(info.size))
    except (AttributeError, NotImplementedError, RuntimeError, OSError):
        return decoded
    return max(sizes)


def _chunk_bytes(d: Any) -> int:
    """One chunk of dataset ``d`` decoded (its chunk shape times the itemsize); 0 if it is contiguous."""
    return int(np.prod(d.chunks, dtype=np.int64)) * d.dtype.itemsize if d.chunks else 0


def _chunk_need(d: Any) -> int:
    """Bytes h5py holds while it reads any row of dataset ``d`` beyond the returned slice: a filtered chunk is
    read as stored and decoded whole, both at once (its decoded bytes plus the largest stored chunk's); 0 for
    contiguous and unfiltered datasets (read straight into the slice)."""
    if not d.chunks or not d.id.get_create_plist().get_nfilters():
        return 0
    decoded = _chunk_bytes(d)
    return decoded + _largest_stored(d, decoded)


class HDF5Dataset(Dataset):
    """Rows (or batches) of several HDF5 datasets in one file, aligned on axis 0.

    >>> ds = hr.io.HDF5Dataset("train.h5", keys=["images", "labels"], batch_size=64)

    Args:
        path: a local path or an fsspec URL (``s3://...``; read through a file object, slower than local).
        keys: the dataset paths inside the file (``"images"``, ``"train/labels"``); a single ``str`` yields
            its rows alone, a sequence yields dicts ``{key: row}``.
        batch_size: ``None``: one row per element. An int: slices of ``batch_size`` rows (the last may be
            shorter), the fast path.
        num_shards, index: read only the contiguous rows ``[n * index // num_shards,
            n * (index + 1) // num_shards)``: disjoint, together complete, sizes differing by at most one.

    Attributes: ``path``, ``keys``, ``batch_size``, ``num_shards``, ``index``, ``length`` (rows in the file),
    ``start`` / ``stop`` (this shard's rows), ``block_rows`` (rows per read in row mode), ``chunks`` (each key's
    chunk shape, ``None`` if contiguous) and ``chunk_need`` (each key's bytes charged while it is read).

    Iterator state: ``{"row": next row to read}`` plus the settings, checked on restore.

    Damaged chunks: a chunk that cannot be read (gzip that does not decompress, a ``fletcher32`` checksum
    mismatch) raises ``DataLossError`` naming the file, the keys and the rows; the reader continues after
    those rows, so ``ignore_errors()`` drops them (counted as that many elements, one per batch with
    ``batch_size``) and goes on. One row at a time, the rows lost are exactly the damaged chunk's, also where a
    read (cut to fit the budget) spans it and good chunks. HDF5's Fletcher-32 sums 16-bit words in one's
    complement: it cannot tell a word ``0x0000`` from ``0xFFFF`` (nor other damage that leaves both sums
    equal mod 65535), so such damage comes back as wrong values; uncompressed chunks without ``fletcher32``
    have no check at all.

    Raises:
        FileNotFoundError: the file does not exist. DataLossError: not a readable HDF5 file, or a chunk that
            cannot be read (see above). MemoryBudgetError: a chunk that does not fit in the budget (see Memory).
        ValueError: a key that is missing (naming the file, the key and the datasets the file has), a group
            or a scalar, datasets of different lengths (naming each key's length), bad arguments.
    """

    _node_attributes = frozenset({"path", "keys", "batch_size", "num_shards", "index", "length", "start", "stop",
                                  "block_rows", "row_bytes", "chunks", "chunk_need"})

    def __init__(self, path: Any, keys: str | list[str] | tuple[str, ...], batch_size: int | None = None,
                 num_shards: int = 1, index: int = 0) -> None:
        super().__init__(HDF5Node(path, keys, batch_size, num_shards, index))


class HDF5Node(DatasetNode):
    """The recipe node of :class:`HDF5Dataset` (same arguments; reads the file's metadata once)."""

    label = "HDF5Dataset"

    def __init__(self, path: Any, keys: str | list[str] | tuple[str, ...], batch_size: int | None,
                 num_shards: int, index: int) -> None:
        super().__init__()
        check_batch_size(batch_size, _WHAT)
        check_shard(num_shards, index, _WHAT)
        self.path = files.to_str_path(path)
        self.single = isinstance(keys, str)
        self.keys = [keys] if isinstance(keys, str) else list(keys)
        if not self.keys or not all(isinstance(k, str) for k in self.keys):
            raise ValueError(f"{_WHAT}: keys={keys!r} must be a dataset path or a non-empty list of them")
        self.batch_size = None if batch_size is None else int(batch_size)
        self.num_shards, self.index = int(num_shards), int(index)
        f, handle = _open(self.path)
        try:
            self.length, (self.block_rows, self.row_bytes) = self._check(f)
        finally:
            close_quietly(f, handle)
        self.start, self.stop = shard_range(self.length, self.num_shards, self.index)

    def _check(self, f: Any) -> tuple[int, tuple[int, int]]:
        h5py = require("h5py", _WHAT)

        datasets: list[Any] = []  # h5py.Dataset objects
        for key in self.keys:
            with damaged_metadata(self.path, f"dataset {key!r}"):
                obj = f[key] if key in f else None  # noqa: SIM401 (f.get() calls a damaged object missing)
                ndim = obj.ndim if isinstance(obj, h5py.Dataset) else None
            if ndim is None:
                what = "is a group, not a dataset" if obj is not None else "is missing"
                raise ValueError(f"{_WHAT}: key {key!r} {what} in {self.path}; the file has datasets "
                                 f"{dataset_names(f, self.path)}")
            if ndim == 0:
                raise ValueError(f"{_WHAT}: key {key!r} in {self.path} is a scalar; rows need at least one "
                                 "dimension (read it with h5py directly)")
            datasets.append(obj)
        with damaged_metadata(self.path, f"the shape and chunk layout of datasets {self.keys}"):
            self.chunks = {k: d.chunks for k, d in zip(self.keys, datasets)}
            self.chunk_bytes = {k: _chunk_bytes(d) for k, d in zip(self.keys, datasets)}
            self.chunk_need = {k: _chunk_need(d) for k, d in zip(self.keys, datasets)}
            lengths = {k: d.shape[0] for k, d in zip(self.keys, datasets)}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{_WHAT}: datasets of {self.path} are misaligned on axis 0: lengths {lengths}; "
                             "every key must have one row per example")
        return datasets[0].shape[0], _block_rows(datasets)

    def cardinality(self) -> int:
        n = self.stop - self.start
        return n if self.batch_size is None else -(-n // self.batch_size)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _HDF5Iterator(ctx, self)


class _HDF5Iterator(BlockRowIterator):
    kind = "hdf5"

    def __init__(self, ctx: IteratorContext, ds: HDF5Node) -> None:
        super().__init__(ctx, ds, "hdf5", ds.batch_size)
        self._ds = ds
        self.row_key = ds.keys[0] if ds.single else None
        self._file: Any = None
        self._handle: Any = None
        self._next = ds.start          # next row to read from the file
        self._block_start = ds.start   # first row of the block in hand
        limit = ctx.budget.limit_bytes
        self.open_work(max((n for n in ds.chunk_need.values() if n <= limit), default=0))

    def _read_block(self) -> dict[str, np.ndarray] | None:
        ds = self._ds
        if self._next >= ds.stop:
            return None
        if self._file is None:
            self._file, self._handle = _open(ds.path)
        start = self._next
        if ds.batch_size is not None:
            end = min(ds.stop, start + ds.batch_size)
        else:  # up to the next multiple of the block length: whole chunks
            block = self.rows_per_block(ds.row_bytes, ds.block_rows)
            end = min(ds.stop, (start // block + 1) * block)
        try:
            return self._read_rows(start, end)
        except (OSError, RuntimeError) as e:
            if ds.batch_size is None:  # a block cut at a budget-sized length may hold good rows of other chunks
                bad = self._damaged_chunk(start, end)
                if bad is not None and bad[0] > start:
                    return self._read_rows(start, bad[0])
                if bad is not None:
                    end = bad[1]
            # Continue after the failed rows (ignore_errors would otherwise re-read them forever); they are
            # lost: one element (a batch) or the rows of the damaged chunk.
            self._block_start, self._next = end, end
            raise DataLossError(f"{_WHAT}: cannot read rows {start}..{end} of {ds.keys} in {ds.path}: {e}; "
                                "the chunk is corrupt (those rows are skipped under ignore_errors)",
                                path=ds.path, reason="bad chunk",
                                lost_elements=1 if ds.batch_size is not None else end - start) from e

    def _read_rows(self, start: int, end: int) -> dict[str, np.ndarray]:
        """Rows ``[start, end)`` of every key, now the block in hand (the read's buffers released after)."""
        try:
            block = {key: self._read(key, start, end) for key in self._ds.keys}
        finally:
            self.release_work()
        self._block_start, self._next = start, end
        return block

    def _damaged_chunk(self, start: int, end: int) -> tuple[int, int] | None:
        """The rows ``(first, stop)`` of the first chunk in ``[start, end)`` that cannot be read (one row
        read from each chunk that overlaps it, per key), clipped to this shard; ``None`` if each reads now.
        A block is cut to fit the budget, not to chunk boundaries, so it may start in a damaged chunk and go
        on into good ones: only the damaged chunk's rows are lost (a block of rows 15..30 over a damaged
        chunk 0..16 lost rows 16..29 too)."""
        ds = self._ds
        lengths = {key: ds.chunks[key][0] if ds.chunks[key] else ds.stop for key in ds.keys}
        firsts = {start} | {c for n in lengths.values() for c in range((start // n + 1) * n, end, n)}
        for row in sorted(firsts):
            for key, n in lengths.items():
                try:
                    self._read(key, row, row + 1)
                except (OSError, RuntimeError):
                    return row, min(ds.stop, (row // n + 1) * n)
                finally:
                    self.release_work()
        return None

    def _read(self, key: str, start: int, end: int) -> np.ndarray:
        """Rows ``[start, end)`` of dataset ``key``, its decoded chunks charged while h5py reads them."""
        ds = self._ds
        need = ds.chunk_need[key]
        if need:
            chunks, chunk = ds.chunks[key], ds.chunk_bytes[key]
            rows = int(self.ctx.budget.limit_bytes / 4 / max(need / chunks[0], 1))
            fix = (f"rewrite it with chunks of at most {rows} rows (h5py create_dataset(..., chunks=({rows}, ...)))"
                   if rows >= 1 else "rewrite it with one-row chunks split along the other axes too")
            self.charge_work(need, f"{_WHAT}: reading dataset {key!r} of {ds.path} (chunk shape {chunks}, "
                                   f"{format_bytes(chunk)} decoded, held with its stored copy of up to "
                                   f"{format_bytes(need - chunk)})",
                             f"{fix}, or raise Options(memory_budget=...)",
                             selection=0 if ds.batch_size is not None else (end - start) * ds.row_bytes)
        return self._file[key][start:end]

    def __next__(self) -> Any:
        el = super().__next__()
        return el[self._ds.keys[0]] if self._ds.single else el

    def _settings(self) -> dict[str, Any]:
        ds = self._ds
        return {"path": ds.path, "keys": ds.keys, "single_key": ds.single, "batch_size": ds.batch_size,
                "num_shards": ds.num_shards, "index": ds.index, "length": ds.length}

    def get_state(self) -> dict[str, Any]:
        # between blocks (none in hand: at the start, after a restore, at the end) the next read starts at _next
        in_hand = self._ds.batch_size is None and self._block is not None
        row = self._block_start + self._offset if in_hand else self._next
        return {"kind": self.kind, **self._settings(), "row": row}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, **self._settings())
        row = int(state["row"])
        if not self._ds.start <= row <= self._ds.stop:
            raise state_error(self.kind, f"row {row} is outside this shard's rows {self._ds.start}..{self._ds.stop}")
        self._drop()
        self._next = self._block_start = row

    def _close_self(self) -> None:
        super()._close_self()
        close_quietly(self._file, self._handle)
        self._file = self._handle = None
