"""``CsvDataset``: the records of CSV files as tuples of scalars, as ``tf.data.experimental.CsvDataset`` yields them.

Format: RFC 4180 as tf.data reads it (``headrace.io._csv_parse``: records end at ``\\n``, ``\\r`` or ``\\r\\n``;
``"``-quoted fields with ``""`` inside; empty or NA fields take the column's default). Files are read in order,
local paths or fsspec URLs, uncompressed, ``"GZIP"`` or ``"ZLIB"`` (``headrace._files.streams``).

Reading: a file is read in chunks of whole records (about 1 MiB, at most 1/32 of the memory budget), each parsed by
pyarrow's CSV reader into numpy columns; a chunk pyarrow does not read as tf.data would (a bad row, quotes out of
place, values such as ``+5``) goes through the exact record-by-record parser, which keeps the good rows. Rows
reach the next stage in runs (``fill`` / ``elements_ready``), not one Python call per record.

Memory: the read buffers (the stream's buffer, the chunk and what pyarrow makes of it, three times the chunk) are
charged to the budget while a file is read, the parsed block of rows while rows are cut from it. A record that
cannot fit 1/4 of the budget is refused with ``MemoryBudgetError`` naming the file, the line and its size so far,
before more of it is read; the iterator then goes on with the next file.

Damage: a truncated or damaged compressed file (``DataLossError`` from the stream) ends that file where the damage
is: the whole records read before it are yielded, then the error (naming the file and the uncompressed offset)
once, then the next file is read (so ``ignore_errors()`` skips only the damage).

State: ``{"file", "path", "offset", "line", "skip"}``: the file's index and name (a restore into a pipeline where
that file has another name raises ``StateError``), the uncompressed byte offset of a record boundary, its line
number and the positions (rows and bad records) read after it. ``set_state`` only checks and records it; the next
call opens the file, moves to the offset (a seek; in a compressed file, decompressing from the start: O(offset)
CPU, little memory, stopped by ``close()``) and parses on from there, skipping ``skip`` positions. The stream is
kept only once it got there: an interrupted catch-up leaves the restored position as it was.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._args import as_int
from .._dataset import Dataset
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage
from .._engine.stage_support import check_state, stop_flag
from .._errors import DataLossError, MemoryBudgetError, RecordParseError
from .._files.streams import buffer_bytes, normalize_compression, open_input, seek_input
from .._memory import format_bytes
from .._spec import TensorSpec
from ._blocks import BlockRowIterator, close_quietly, state_error
from ._csv_args import csv_format
from ._csv_parse import CsvFormat, FastParser, as_columns, count_lines, cut_point, parse_records
from ._filenames import FileNames, NameSource, name_list

_WHAT = "CsvDataset"
CHUNK_BYTES = 1 << 20
_DEFAULT_BUFFER = 4 << 20  # tf.data's CsvDataset buffer_size


class CsvDataset(Dataset):
    """The records of CSV files, one tuple of scalars per record (``tf.data.experimental.CsvDataset``).

    Example::

        ds = hr.io.CsvDataset("table.csv", [np.int64, np.float32, [b"none"]], header=True)
        for label, score, tag in ds: ...

    Args:
        filenames: a path or fsspec URL, or a list of them (read in order; no glob expansion, as tf.data).
        record_defaults: one entry per output column: a dtype (``np.int32``, ``np.int64``, ``np.float32``,
            ``np.float64``, ``bytes`` / ``str`` / ``object`` for strings, or their names), or an empty list
            (a required column: an empty field is an error); or a default value (a scalar or a one-element list:
            ``0``, ``[0.0]``, ``[b""]``, ``np.int64(-1)``; Python ints are int32, floats float32, strings bytes).
        compression_type: ``None`` / ``""``, ``"GZIP"`` or ``"ZLIB"``.
        buffer_size: read buffer in bytes (> 0; default 4 MiB, capped at the chunk size).
        header: skip each file's first record.
        field_delim: the one-byte field delimiter.
        use_quote_delim: ``"`` quotes fields (``False``: ``"`` is an ordinary character).
        na_value: a field equal to it (after unquoting) is missing (takes the default).
        select_cols, exclude_cols: strictly increasing field indices to keep / to drop (at most one of them).
        name: the stage's name (errors, ``explain()``).

    Returns:
        A Dataset of tuples, one numpy scalar (or ``bytes``) per column; ``element_spec`` is known at once.

    Raises:
        ValueError: bad arguments (when the dataset is built); while iterating, a record that does not parse
            (one line naming the file, line, byte offset, column and value; ``.ignore_errors()`` skips and
            counts them).
        TypeError: arguments of the wrong type (when the dataset is built).
        FileNotFoundError: while iterating, a missing file.
        DataLossError: while iterating, a damaged compressed stream.
        MemoryBudgetError: while iterating, a record larger than the budget allows.
    """

    _node_attributes = frozenset({"filenames", "record_defaults", "compression_type", "header"})

    def __init__(self, filenames: Any, record_defaults: Any, compression_type: str | None = None,
                 buffer_size: int | None = None, header: bool = False, field_delim: str = ",",
                 use_quote_delim: bool = True, na_value: str = "", select_cols: Any = None,
                 exclude_cols: Any = None, name: str | None = None) -> None:
        super().__init__(CsvNode(filenames, record_defaults, compression_type, buffer_size, header, field_delim,
                                 use_quote_delim, na_value, select_cols, exclude_cols).named(name))


class CsvNode(DatasetNode):
    """The recipe node of :class:`CsvDataset` (same arguments)."""

    label = _WHAT

    def __init__(self, filenames: Any, record_defaults: Any, compression_type: str | None, buffer_size: Any,
                 header: bool, field_delim: Any, use_quote_delim: bool, na_value: Any, select_cols: Any,
                 exclude_cols: Any) -> None:
        super().__init__()
        self.filenames = name_list(filenames, _WHAT)
        if not self.filenames:
            raise ValueError(f"{_WHAT}: filenames is empty; pass a path or a list of paths")
        self.record_defaults = record_defaults
        self.fmt: CsvFormat = csv_format(record_defaults, field_delim, use_quote_delim, na_value, select_cols,
                                         exclude_cols, _WHAT)
        self.compression_type = normalize_compression(compression_type, f"{_WHAT}(compression_type)")
        self.buffer_size = _DEFAULT_BUFFER if buffer_size is None else as_int(
            buffer_size, f"{_WHAT}(buffer_size)", minimum=1, fix="use None for the default (4 MiB)")
        self.header = bool(header)
        FastParser(self.fmt)  # without pyarrow: MissingDependencyError here, not at the first element

    def compute_spec(self, spec_of: Any) -> Any:
        return tuple(TensorSpec((), d) for d in self.fmt.dtypes)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return CsvIterator(ctx, self)


class CsvIterator(BlockRowIterator):
    """Reads the files' records in chunks into blocks of numpy columns (see the module docstring)."""

    kind = "csv"

    def __init__(self, ctx: IteratorContext, ds: CsvNode) -> None:
        super().__init__(ctx, ds, _WHAT, None)
        self._ds, self._fmt = ds, ds.fmt
        self._fast = FastParser(ds.fmt)
        limit = ctx.budget.limit_bytes
        self._chunk = int(max(4096, min(CHUNK_BYTES, limit // 32)))
        self._max_buf = max(self._chunk, limit // 4)
        self._read_size = min(ds.buffer_size, self._chunk)
        self._fixed = sum(d.itemsize for d in ds.fmt.dtypes if d.kind != "O")
        self._strings = [k for k, d in enumerate(ds.fmt.dtypes) if d.kind == "O"]
        self._names = NameSource(ctx, FileNames(ds.filenames, _WHAT))
        self._f = 0
        self._stream: Any = None
        self._damage: DataLossError | None = None  # a damaged compressed stream, raised after the records before it
        self._resume: tuple[int, int, int] | None = None  # a restored (offset, line, skip), opened by next()
        self._skip_left = 0  # positions (rows and bad records) still to skip after a restore
        self._close_stream()
        self._errs: list[tuple[int, Exception]] = []
        self._err_i = 0
        self._cols: list[np.ndarray] = []
        self._sizes: _RowSizes | None = None  # (of the block in hand)
        self._blk = (0, 0, 1)  # (file, offset, line) of the block in hand
        self.open_work(0)

    # ---- the stream ----------------------------------------------------------------------------------
    def _path(self) -> str:
        return self._ds.filenames[self._f]

    def _open(self) -> None:
        """Open the current file at its start, or at the restored position (the stream is kept only once the
        seek is over: an interrupted restore leaves nothing half-moved, and the next call starts it again)."""
        self._close_stream()
        ds = self._ds
        offset, line, skip = self._resume or (0, 1, 0)
        stream = open_input(self._path(), ds.compression_type, self._read_size)
        try:
            seek_input(stream, offset, self._path(), stop_flag(self.ctx))
        except DataLossError:
            close_quietly(stream)
            self._resume = None
            self._f += 1  # (the file is shorter than the state says: the next call goes on with the next file)
            raise
        except BaseException:
            close_quietly(stream)
            raise
        self._stream, self._resume, self._skip_left = stream, None, skip
        self._base, self._line, self._header_due = offset, line, ds.header and offset == 0
        self._charge(self._chunk)

    def _close_stream(self) -> None:
        close_quietly(self._stream)
        self._stream, self._buf, self._base, self._line, self._eof = None, b"", 0, 1, False
        self._header_due, self._damage, self._skip_left = False, None, 0
        self.release_work()

    def _charge(self, size: int) -> None:
        need = 3 * size + buffer_bytes(self._ds.compression_type, self._read_size)
        self.charge_work(need, f"{_WHAT}: reading {self._path()} in chunks of {format_bytes(size)}",
                         "raise Options(memory_budget=...)")

    def _fill(self, want: int, at: int) -> None:
        """Read until the buffer holds ``want`` bytes or the file ends; a record (starting at buffer index ``at``)
        that would need more than the budget allows is refused before it is read."""
        if want > self._max_buf and len(self._buf) < self._max_buf:
            want = self._max_buf  # (grown to the most a record may take, then refused)
        elif want > self._max_buf:
            self._dead = True
            line = self._line + count_lines(self._buf, at)
            raise _too_long(f"line {line} of {self._path()} (byte offset {self._base + at})", len(self._buf) - at,
                            self.ctx.budget.limit_bytes, self._max_buf)
        if self._damage is not None:  # more bytes are needed past the damage
            self._raise_damage()
        if want > 3 * self._chunk:
            self._charge(want)
        if not self._eof:
            self._buf, self._eof, self._damage = _read_more(self._stream, self._buf, want)

    def _raise_damage(self) -> None:
        """The file ends at its damage (the records before it were handed out): raised once, then the next file."""
        damage = self._damage
        self._close_stream()
        self._f += 1  # (ignore_errors goes on with the next file)
        raise damage  # type: ignore[misc]

    def _consume(self, n: int, lines: int | None = None) -> None:
        """The buffer's first ``n`` bytes are parsed (``lines``: the terminators in them, where known)."""
        self._line += count_lines(self._buf, n) if lines is None else lines
        self._base += n
        self._buf = self._buf[n:]

    # ---- parsing -------------------------------------------------------------------------------------
    _dead = False

    def _read_block(self) -> dict[str, np.ndarray] | None:
        while True:
            if self._dead:
                self._dead = False
                self._close_stream()
                self._f += 1
            if self._stream is None:
                if self._names.get(self._f) is None:
                    return None
                self._open()
            self._blk = (self._f, self._base, self._line)
            block = self._parse_chunk()
            if block is not None:
                return block
            self._close_stream()
            self._f += 1

    def _parse_chunk(self) -> dict[str, np.ndarray] | None:
        """The next block of the open file (None at its end): ``self._errs`` gets its bad records."""
        self._errs, self._err_i = [], 0
        if self._header_due:
            return self._skip_header()
        self._fill(self._chunk, 0)
        if not self._buf:
            if self._damage is not None:
                self._raise_damage()
            return None
        quotes = self._fmt.quote and b'"' in self._buf  # (looked for once: the cut and the parser both ask)
        cut = cut_point(self._buf, 0, len(self._buf), quotes, self._eof)
        while cut == 0:
            self._fill(2 * len(self._buf), 0)
            quotes = self._fmt.quote and b'"' in self._buf
            cut = cut_point(self._buf, 0, len(self._buf), quotes, self._eof)
        fast = self._fast.parse(self._buf, cut, self._eof and cut == len(self._buf), quotes)
        if fast is not None:
            cols, sizes, lines = fast
            self._consume(cut, lines)
            return self._as_block(cols, sizes)
        rows: list[tuple[Any, ...]] = []
        pos = 0
        while pos < cut:
            got = parse_records(self._fmt, self._buf, pos, cut, self._eof)
            if got is None and self._damage is not None:  # the rows before the damage first
                break
            if got is None:  # a record past the buffer: the rows before it are done, the buffer grows
                self._consume(pos)
                cut, pos = cut - pos, 0
                self._fill(2 * len(self._buf), 0)
                continue
            good, errs, end = got
            for before, start, _, e in errs:
                self._errs.append((len(rows) + before, self._row_error(start, e)))
            rows.extend(good)
            pos = end
        self._consume(pos)
        return self._as_block(as_columns(self._fmt, rows))

    def _skip_header(self) -> dict[str, np.ndarray] | None:
        self._header_due = False
        self._fill(self._chunk, 0)
        if not self._buf and self._damage is not None:
            self._raise_damage()
        while True:
            got = self._fmt.read_record(self._buf, 0, self._eof) if self._buf else (0, [], 0, "the file is empty")
            if got is not None:
                break
            self._fill(2 * len(self._buf), 0)
        end, _, _, error = got
        if error is not None:
            self._errs.append((0, RecordParseError(
                f"{_WHAT}: cannot read the header line of {self._path()}: {error}")))
        self._consume(end)
        return self._as_block(as_columns(self._fmt, []))

    def _row_error(self, start: int, e: Exception) -> RecordParseError:
        line = self._line + count_lines(self._buf, start)
        err = RecordParseError(f"{_WHAT}: {self._path()} line {line} (byte offset {self._base + start}): {e}; "
                               "fix the record or skip bad records with .ignore_errors()")
        err.__cause__ = e
        return err

    def _as_block(self, cols: list[np.ndarray], sizes: Any = False) -> dict[str, np.ndarray]:
        """The block of ``cols``; ``sizes``: each row's bytes where known (None: no strings), else counted here."""
        self._cols = cols
        self._sizes = _RowSizes(_row_sizes(cols, self._fixed, self._strings) if sizes is False else sizes,
                                self._fixed, len(cols[0]), len(self._strings))
        return {str(k): c for k, c in enumerate(cols)}

    def block_nbytes(self, block: dict[str, np.ndarray]) -> int:
        return self._sizes.nbytes  # type: ignore[union-attr]

    def _read_held(self) -> dict[str, np.ndarray] | None:
        block = super()._read_held()
        if block is not None and self._skip_left:  # a restore's positions to skip
            self._pos, self._err_i, self._skip_left = _skip(self._errs, self._block_rows, self._pos, self._err_i,
                                                            self._skip_left)
        return block

    # ---- rows ----------------------------------------------------------------------------------------
    row_tuples = True

    def ready_stop(self) -> int:
        """The next bad record's position in the block in hand (or its end)."""
        return self._errs[self._err_i][0] if self._err_i < len(self._errs) else self._block_rows

    def _ensure(self) -> int:
        """Rows left before the next bad record in the block in hand (reading blocks as needed); raises that
        record's error when it is next, ``StopIteration`` at the end."""
        while True:
            stop = self.ready_stop()
            if self._pos < stop:
                return stop
            if self._err_i < len(self._errs):
                self._err_i += 1
                raise self._errs[self._err_i - 1][1]
            if self._read_held() is None:
                raise StopIteration

    def __next__(self) -> tuple[Any, ...]:
        if self._run is not None:
            self._end_run()
        self._ensure()
        i = self._pos
        self._pos = i + 1
        return tuple(col[i] for col in self._cols)

    def _take(self, left: int, per: int) -> tuple[int, int, int, int]:
        """The next run of rows ``[i, j)`` of the block (at most ``left``, ending before a bad record or after a row
        larger than ``per``), with its bytes and its largest row; the position moves past it."""
        stop = self._ensure()  # (an error or the end: the caller keeps what it has)
        i = self._pos
        j, n_bytes, big = self._sizes.run(i, min(stop, i + left), per)  # type: ignore[union-attr]
        self._pos = j
        return i, j, n_bytes, big

    def _runs(self, k: int, per: int, emit: Any) -> tuple[int, int, int]:
        """Up to ``k`` rows handed to ``emit(i, j)`` run by run; ``(rows, bytes, largest)``."""
        if self._run is not None:
            self._end_run()
        held = largest = 0
        left = k
        while left > 0:
            i, j, n_bytes, big = self._take(left, per)
            emit(i, j)
            left -= j - i
            held += n_bytes
            largest = max(largest, big)
            if big > per:
                break
        return k - left, held, largest

    def fill(self, items: list[Any], k: int, per: int) -> tuple[int, int]:
        """``Stage.fill`` in runs of rows cut from the block's columns (C loops)."""
        _, held, largest = self._runs(k, per, lambda i, j: items.extend(zip(*[list(c[i:j]) for c in self._cols])))
        return held, largest

    def fill_columns(self, runs: list[list[Any]], k: int, per: int) -> tuple[int, int, int]:
        """``Stage.fill_columns``: the rows as slices of the block's columns, for ``batch`` to concatenate."""
        return self._runs(k, per, lambda i, j: runs.append([c[i:j] for c in self._cols]))

    # ---- state ---------------------------------------------------------------------------------------
    def _settings(self) -> dict[str, Any]:
        ds = self._ds
        return {"files": len(ds.filenames), "header": ds.header, "columns": len(ds.fmt.dtypes)}

    def get_state(self) -> dict[str, Any]:
        if self._resume is not None:
            f, (offset, line, skip) = self._f, self._resume
        elif self._block is not None:
            f, offset, line = self._blk
            skip = self._offset + self._err_i + self._skip_left
        else:
            f, offset, line, skip = self._f, self._base, self._line, self._skip_left
            if self._stream is not None and self._header_due:
                offset = 0
        return {"kind": self.kind, **self._settings(), "file": f, "path": self._names.known(f), "offset": offset,
                "line": line, "skip": skip}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, **self._settings())
        self._drop()
        self._close_stream()
        self._dead = False
        self._errs, self._err_i = [], 0
        self._resume = None
        f = int(state["file"])
        if not 0 <= f <= len(self._ds.filenames):
            raise state_error(self.kind, f"file {f} is outside 0..{len(self._ds.filenames)}")
        self._f = self._names.restore_checked({"file_index": f, "path": state.get("path")}, self.kind)
        if f < len(self._ds.filenames):  # (opened, moved to the offset and skipped by the next call)
            self._resume = (int(state["offset"]), int(state["line"]), int(state["skip"]))

    def _close_self(self) -> None:
        self._close_stream()
        super()._close_self()


def _read_more(stream: Any, buf: bytes, want: int) -> tuple[bytes, bool, DataLossError | None]:
    """``buf`` and the bytes read after it, until ``want`` in all: ``(the bytes, whether the file ended, a damaged
    stream's error met, or None)``. One decompression a call (``read1``): the bytes read before a damaged stream's
    error are kept (its whole records are parsed before the error is raised)."""
    parts = [buf] if buf else []
    have, ended, damage = len(buf), False, None
    read = getattr(stream, "read1", None) or stream.read
    while have < want:
        try:
            data = read(want - have)
        except DataLossError as e:
            damage = e
            break
        if not data:
            ended = True
            break
        parts.append(data)
        have += len(data)
    return (parts[0] if len(parts) == 1 else b"".join(parts)), ended, damage


def _too_long(where: str, size: int, budget: int, most: int) -> MemoryBudgetError:
    return MemoryBudgetError(
        f"{_WHAT}: the record at {where} is longer than {format_bytes(size)} and does not fit the reader's share of "
        f"the memory budget of {format_bytes(budget)} ({format_bytes(most)} for one record); raise "
        "Options(memory_budget=...) or split the record; the rest of the file is skipped")


def _row_sizes(cols: list[np.ndarray], fixed: int, strings: list[int]) -> np.ndarray | None:
    """Each row's bytes: ``fixed`` (its numbers) plus its strings' lengths; None without strings (all ``fixed``)."""
    if not strings or not len(cols[0]):
        return None
    sizes = np.full(len(cols[0]), fixed, np.int64)
    for k in strings:
        sizes += np.fromiter(map(len, cols[k]), np.int64, len(cols[k]))
    return sizes


class _RowSizes:
    """A block's row sizes (``nbytes`` of each row: ``sizes``, or ``fixed`` each without strings), their running sum
    and the largest: runs of rows and the block sized without a pass over their strings."""

    __slots__ = ("cum", "fixed", "largest", "nbytes", "sizes")

    def __init__(self, sizes: np.ndarray | None, fixed: int, rows: int, strings: int) -> None:
        self.sizes, self.fixed = (sizes if sizes is not None and len(sizes) else None), fixed
        if self.sizes is not None:
            self.cum = np.zeros(rows + 1, np.int64)
            np.cumsum(self.sizes, out=self.cum[1:])
            self.largest = int(self.sizes.max())
        self.nbytes = (fixed * rows if self.sizes is None else int(self.cum[-1])) + 8 * rows * strings  # (pointers)

    def run(self, i: int, j: int, per: int) -> tuple[int, int, int]:
        """Rows ``[i, j)`` cut after the first one larger than ``per``: ``(its end, its bytes, its largest row)``."""
        sizes = self.sizes
        if sizes is None:
            return j, self.fixed * (j - i), self.fixed
        if self.largest > per:
            over = np.flatnonzero(sizes[i:j] > per)
            if len(over):
                j = i + int(over[0]) + 1
        return j, int(self.cum[j] - self.cum[i]), int(sizes[i:j].max())


def _skip(errs: list[tuple[int, Exception]], rows: int, pos: int, err_i: int, left: int) -> tuple[int, int, int]:
    """A restore's ``left`` positions (rows and bad records, reported before the state was taken) skipped in a block
    of ``rows`` rows with the bad records ``errs`` ((rows before it, error)), from row ``pos`` and bad record
    ``err_i``: ``(pos, err_i, left)``, ``left`` > 0 where the block is used up (the rest: in the next one)."""
    while left > 0:
        stop = errs[err_i][0] if err_i < len(errs) else rows
        if pos < stop:
            take = min(left, stop - pos)
            pos, left = pos + take, left - take
        elif err_i < len(errs):
            err_i, left = err_i + 1, left - 1
        else:
            break
    return pos, err_i, left
