"""The iterator of :mod:`headrace.io.text`: reads the files one after another in chunks, cuts each chunk into
elements at C speed (``bytes.split`` / slices) and holds them as the block in hand of a
:class:`~headrace.io._blocks.BlockRowIterator` (charged to the budget, handed to ``batch`` in runs: slices of the
block's object array by ``fill_columns``, of its list by ``fill`` below a ``map``).

Budget: before each read the reader's ``buffers`` account reserves the stream's buffers, the chunk, the
unfinished element carried over and the Python objects the chunk's elements will be (estimated from the mean
element size so far); an element that outgrows the whole budget is refused there, before it is read further.
"""

from __future__ import annotations

import io
import sys
import threading
from typing import Any

import numpy as np

from .._engine.context import IteratorContext
from .._engine.stage_support import check_state, stop_flag
from .._errors import DataLossError, MemoryBudgetError
from .._files.streams import ReadAhead, buffer_bytes, compression_of, open_input, seek_input
from .._memory import format_bytes
from ._blocks import BlockRowIterator, close_quietly
from ._filenames import NameSource

CHUNK_BYTES = 1024 * 1024
"""The most bytes one read takes (smaller under a small budget: 1/64 of it, at least 4 KiB). The read buffer
(``buffer_size``) is at most 1/32 of the budget too."""
READ_AHEAD = 2
"""Chunks read (and decompressed) ahead by a thread of the reader's (``_files.streams.ReadAhead``), charged too; 1
where a chunk is more than 1/64 of the budget (records larger than that)."""
_OBJECT_BYTES = sys.getsizeof(b"") + 8  # one element as a Python bytes object in a list, beside its data
_FIRST_MEAN = 16.0  # the mean element size assumed before any is read (lines: short ones are the costly case)


class TextFileIterator(BlockRowIterator):
    """Reads the files of a :class:`~headrace.io.text.TextFileNode` one after another (see the module docstring)."""

    def __init__(self, ctx: IteratorContext, ds: Any) -> None:  # (a headrace.io.text.TextFileNode)
        fmt = ds.format
        super().__init__(ctx, ds, fmt.label, None)
        self.kind = fmt.kind
        self.row_key = fmt.unit
        self._ds, self._fmt = ds, fmt
        self._names = NameSource(ctx, ds._files)
        self._file_index = 0
        self._path: str | None = None
        self._stream: Any = None
        self._compression = ""
        limit = ctx.budget.limit_bytes
        self._chunk = max(4096, min(CHUNK_BYTES, limit // 64))
        if isinstance(getattr(fmt, "record_bytes", None), int):
            self._chunk = max(self._chunk // fmt.record_bytes, 1) * fmt.record_bytes
        self._ahead = READ_AHEAD if self._chunk * 64 <= limit else 1
        self._buffer_size = min(ds.buffer_size, max(io.DEFAULT_BUFFER_SIZE, limit // 32))  # (a small budget: less)
        self._buffers = buffer_bytes(ds.compression_type, self._buffer_size)
        self._parts: list[bytes] = []  # bytes read past the last whole element (an unfinished one)
        self._pending = 0
        self._next_offset = 0  # uncompressed offset just past the last whole element cut
        self._skip = 0  # elements still to skip from _next_offset (a restore)
        self._block_offset = 0  # offset where the block in hand's first cut element starts
        self._block_skip = 0  # elements cut there before the block's first row
        self._done = 0  # whole elements cut from this file (the next one's number is _done + 1)
        self._block_first = 0  # elements of the file before the block's first row
        self._list: list[bytes] = []  # the block's rows (fill takes slices of it, fill_columns of _col), their
        self._col = np.empty(0, object)  # lengths and cumulative sum
        self._lens = np.zeros(0, np.int64)
        self._cum = np.zeros(1, np.int64)
        self._block_rows_next = 0
        self._seen_bytes = self._seen_items = 0
        self._first_mean = float(getattr(fmt, "record_bytes", _FIRST_MEAN))
        self._failed: BaseException | None = None
        self._damage: DataLossError | None = None
        self._resume: tuple[int, int, int] | None = None  # (offset, skip, elements before) to reopen at
        self._unit = self._read_need(0)
        self.open_work(self._unit)

    # ---- reading -------------------------------------------------------------------------------------------
    def _read_need(self, pending: int) -> int:
        """What one read holds at once: the buffers, the chunk, the carried part (joined: twice) and the chunk's
        elements as Python objects (from the mean element size so far)."""
        mean = self._seen_bytes / self._seen_items if self._seen_items else self._first_mean
        objects = int(self._chunk / (mean + 1) * _OBJECT_BYTES)
        return self._buffers + (2 + self._ahead) * self._chunk + 2 * pending + objects

    def _open(self) -> bool:
        while True:
            name = self._names.get(self._file_index)
            if name is None:
                return False
            resumed, self._resume = self._resume, None
            offset, skip, done = resumed or (self._fmt.header_bytes, 0, 0)
            self._path, self._compression = name, compression_of(name, self._ds.compression_type)
            stream = open_input(name, self._compression, self._buffer_size)
            try:
                if not self._compression and stream.seekable():
                    size = stream.seek(0, 2)
                    stream.seek(0)
                    why = self._fmt.check_size(size)
                    if why is not None:
                        raise DataLossError(f"{self._fmt.label}: {name} ({size} bytes): {why}", path=name,
                                            offset=0, reason="partial record")
                seek_input(stream, offset, name, stop_flag(self.ctx))
            except DataLossError as e:
                close_quietly(stream)
                self._file_index += 1
                if resumed is None and e.reason == "truncated":  # (a compressed file shorter than its header)
                    raise DataLossError(f"{self._fmt.label}: {name}: its uncompressed bytes end before the end of "
                                        f"its header (header_bytes={offset}); check header_bytes and "
                                        "compression_type", path=name, offset=0, reason="partial record") from None
                raise
            except BaseException:
                close_quietly(stream)
                self._file_index += 1
                raise
            self._stream = ReadAhead(stream, self._chunk, self._ahead, f"{self._fmt.label}", stop_flag(self.ctx))
            self._next_offset, self._skip, self._parts, self._pending = offset, skip, [], 0
            self._done = done - skip
            return True

    def _finish_file(self) -> None:
        close_quietly(self._stream)
        self._stream = None
        self._parts, self._pending = [], 0
        self._file_index += 1

    def _charge(self) -> None:
        """Reserve what the next read holds (``_read_need``), growing the buffers' unit of work when it grew (so
        that the budget's shares leave room for it); refused when it cannot fit the whole budget."""
        fmt, path, need = self._fmt, self._path, self._read_need(self._pending)
        if need > self._unit:
            self._work.grow_unit(need)  # type: ignore[union-attr]
            self._unit = need
        if self._pending <= self._chunk:
            self.charge_work(need, f"{fmt.label}: reading {path}", "raise Options(memory_budget=...)")
            return
        self.charge_work(need, f"{fmt.label}: {fmt.unit} {self._done + 1} of {path} (at least "
                               f"{format_bytes(self._pending)} ({self._pending} bytes) long so far, read in chunks)",
                         f"split the {fmt.unit} or raise Options(memory_budget=...)")

    def _read_items(self) -> list[bytes] | None:
        """The next whole elements of the open file (possibly none yet), or None at its end; they start at the
        ``_next_offset`` before the call, which moves past them."""
        fmt, stream = self._fmt, self._stream
        while True:
            self._charge()
            try:  # (one decompression per chunk: a damaged stream loses no whole element read before it)
                chunk: bytes | None = stream.read()
            except DataLossError as e:
                if not self._pending:
                    raise
                self._damage, chunk = e, None  # the whole elements read before it are handed out first
            if chunk and not fmt.whole(chunk, self._pending):
                self._parts.append(chunk)
                self._pending += len(chunk)
                continue
            if not chunk and not self._pending:
                return None
            if chunk is not None:
                self._parts.append(chunk)
            parts, self._parts = self._parts, []
            try:
                items, used, rest = fmt.cut(parts, chunk == b"")
            except ValueError as e:
                raise DataLossError(f"{fmt.label}: {self._path} at uncompressed byte {self._next_offset}: {e}",
                                    path=self._path, offset=self._next_offset, reason="partial record") from None
            if not chunk:  # the end (footer bytes, or a damaged element's start): nothing is carried over
                used, rest = used + len(rest), b""
            self._pending = len(rest)
            if rest:
                self._parts.append(rest)
            self._next_offset += used
            return items

    def _read_block(self) -> dict[str, np.ndarray] | None:
        if self._failed is not None:
            raise self._failed
        while True:
            if self._damage is not None:  # a damaged compressed stream, after the whole elements before it
                damage, self._damage = self._damage, None
                self._finish_file()  # the rest of this file cannot be read: ignore_errors goes on with the next
                raise damage
            if self._stream is None and not self._open():
                self.release_work()  # (the end: no buffers left)
                return None
            start = self._next_offset
            try:
                items = self._read_items()
            except MemoryBudgetError as e:
                self._failed = e  # (raised again on every later call: never a silent skip, never a hang)
                raise
            except DataLossError:
                self._finish_file()  # the rest of this file cannot be read: ignore_errors goes on with the next
                raise
            if items is None:
                self._finish_file()
                continue
            n = len(items)
            self._seen_items += n - min(self._skip, n)
            skip = min(self._skip, n)
            self._skip -= skip
            self._block_offset, self._block_skip, self._block_first = start, skip, self._done + skip
            self._done += n
            if skip == n:
                continue
            rows = items[skip:] if skip else items
            col = np.empty(len(rows), dtype=object)
            col[:] = rows
            self._list, self._col, self._block_rows_next = rows, col, len(rows)
            self._lens = np.fromiter(map(len, rows), np.int64, len(rows))
            self._cum = np.zeros(len(rows) + 1, np.int64)
            np.cumsum(self._lens, out=self._cum[1:])
            self._seen_bytes += int(self._cum[-1])
            return {self._fmt.unit: col}

    # ---- batch in runs -------------------------------------------------------------------------------------
    def fill(self, items: list[Any], k: int, per: int) -> tuple[int, int]:
        """``Stage.fill`` taking the elements of the block in hand by slices, sized from the block's lengths (no
        Python call per element); stops after an element of more than ``per`` bytes, as ``Stage.fill``."""
        start, held, largest = len(items), 0, 0
        while len(items) - start < k:
            if self._run is not None:
                self._end_run()
            pos, rows = self._pos, self._block_rows
            if pos >= rows:
                x = self.__next__()  # the next block (or StopIteration)
                items.append(x)
                held += len(x)
                largest = max(largest, len(x))
                if len(x) > per:
                    break
                continue
            end = min(pos + k - (len(items) - start), rows)
            lens = self._lens[pos:end]
            big = int(lens.max())
            if big > per:  # stop after the first element larger than per
                end = pos + int(np.flatnonzero(lens > per)[0]) + 1
                big = int(self._lens[pos:end].max())
            items.extend(self._list[pos:end])
            self._pos = end
            held += int(self._cum[end] - self._cum[pos])
            largest = max(largest, big)
            if big > per:
                break
        return held, largest

    def fill_columns(self, runs: list[Any], k: int, per: int) -> tuple[int, int, int]:
        """``Stage.fill_columns``: runs of the block's elements as slices of its object array (views), for ``batch``
        to concatenate into its batch (no list of elements, no stacking, no pass over them to size the batch)."""
        taken = held = largest = 0
        while taken < k:
            if self._run is not None:
                self._end_run()
            pos, rows = self._pos, self._block_rows
            if pos >= rows:
                if self._read_held() is None:
                    raise StopIteration
                continue
            end = min(pos + k - taken, rows)
            big = int(self._lens[pos:end].max())
            if big > per:  # stop after the first element larger than per
                end = pos + int(np.flatnonzero(self._lens[pos:end] > per)[0]) + 1
                big = int(self._lens[pos:end].max())
            runs.append(self._col[pos:end])
            self._pos = end
            taken += end - pos
            held += int(self._cum[end] - self._cum[pos])
            largest = max(largest, big)
            if big > per:
                break
        return taken, held, largest

    def block_nbytes(self, block: dict[str, np.ndarray]) -> int:
        """``nbytes`` (a slot per element and its bytes), moved from the read's charge (which counted them in the
        chunk it cut) to the block's: what stays there is the buffers, the read-ahead, the part carried over and
        the elements' Python objects."""
        size = 8 * self._block_rows_next + int(self._cum[-1])
        keep = self._buffers + self._ahead * self._chunk + 2 * self._pending
        if self._work_held - keep > 0:
            self.release_work(min(size, self._work_held - keep))
        return size

    def __next__(self) -> Any:
        return super().__next__()[self._fmt.unit]

    # ---- state ---------------------------------------------------------------------------------------------
    def _position(self) -> tuple[int, int, int, int]:
        """``(file index, offset, skip, elements of the file before the next one)``."""
        if self._stream is None and self._resume is not None:
            return (self._file_index, *self._resume)
        if self._block is not None and self._offset < self._block_rows:
            taken = self._offset
            offset, skip = self._fmt.advance(self._block_offset, self._block_skip + taken)
            return self._file_index, offset, skip, self._block_first + taken
        if self._stream is None:
            return self._file_index, self._fmt.header_bytes, 0, 0
        return (self._file_index, *self._fmt.advance(self._next_offset, self._skip), self._done + self._skip)

    def get_state(self) -> dict[str, Any]:
        file_index, offset, skip, number = self._position()
        return {"kind": self.kind, "compression_type": self._ds.compression_type, "file_index": file_index,
                "path": self._names.known(file_index), "offset": offset, "skip": skip, "number": number,
                "names": self._names.state(file_index)}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, compression_type=self._ds.compression_type)
        self._drop()
        self._finish_file()
        self._failed = self._damage = None
        self._file_index = self._names.restore_checked(state, self.kind)
        self._resume = (int(state["offset"]), int(state["skip"]), int(state.get("number", 0)))

    def _children(self) -> list[Any]:
        return self._names.children()

    def _signal_self(self) -> None:
        if self._stream is not None:
            self._stream.signal_stop()

    def _own_threads(self) -> list[threading.Thread]:
        return [self._stream.thread] if self._stream is not None else []

    def _close_self(self) -> None:
        super()._close_self()
        close_quietly(self._stream)
        self._stream = None
