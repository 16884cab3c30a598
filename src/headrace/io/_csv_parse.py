"""CSV records as tf.data's ``CsvDataset`` parses them: the record grammar, the field conversions, and the two
ways a chunk of records is parsed (pyarrow's CSV reader at C speed; the exact record-by-record parser).

The grammar (tf.data's ``CSVDatasetOp``; RFC 4180 with its own edges): records end at ``\\n``, ``\\r`` or
``\\r\\n`` (a final terminator at the end of the file ends nothing more); fields are split by ``field_delim``
(one byte). With ``use_quote_delim`` a field that starts with ``"`` is quoted: it runs to a ``"`` followed by
the delimiter, a terminator or the end of the file, ``""`` inside it is one ``"``, and it may hold delimiters
and line breaks; a ``"`` followed by anything else, a ``"`` inside an unquoted field and a quoted field the file
ends inside are errors. An empty line is a record of one empty field. A field that is empty or equals
``na_value`` (after unquoting) takes its column's default, or is an error where the column is required.
Numbers: int32 / int64 are optional ASCII whitespace, an optional sign, decimal digits, optional whitespace,
in range; float32 / float64 are what C's ``strtof`` / ``strtod`` read (decimal or hexadecimal, ``inf``,
``infinity``, ``nan``, any case, whitespace around; overflow gives inf). Strings are the field's bytes.

The fast path hands a chunk of whole records to ``pyarrow.csv.read_csv`` with the column types; it is used only
where pyarrow and tf.data agree: the chunk's quotes are well placed (``quotes_valid``), it has no empty line
(with more than one column) and no UTF-8 byte order mark at its start (pyarrow drops one), pyarrow converts
every value, and every null (empty or NA field) is in a column with a default. Anything else - a bad row, a
value pyarrow does not read (``+5``, ``0x1A``, padded numbers) - sends the chunk to the exact parser
(``parse_records``), which keeps the good rows and reports each bad one as an error of its own.
"""

from __future__ import annotations

import ctypes
import re
from typing import Any

import numpy as np

from .._deps import require

STRING = np.dtype(object)
DTYPES = (np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float32), np.dtype(np.float64), STRING)
BOM = b"\xef\xbb\xbf"
_INT = re.compile(rb"[ \t\n\v\f\r]*[+-]?[0-9]+[ \t\n\v\f\r]*\Z")
_SPACE = b" \t\n\v\f\r"
_LIMITS = {np.dtype(np.int32): (-(2**31), 2**31 - 1), np.dtype(np.int64): (-(2**63), 2**63 - 1)}
_QUOTED_REST = re.compile(rb'(?:[^"]|"")*+"')  # a quoted field's content and its closing quote
_LIBC: Any = None


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        lib = ctypes.CDLL(None)
        for name, res in (("strtof", ctypes.c_float), ("strtod", ctypes.c_double)):
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)]
        _LIBC = lib
    return _LIBC


def parse_float(field: bytes, single: bool) -> float | None:
    """``field`` read as C's ``strtof`` (``single``) / ``strtod`` read it, whitespace after it allowed; None where
    it is not a number."""
    buf = ctypes.create_string_buffer(field)
    end = ctypes.c_char_p()
    lib = _libc()
    value = (lib.strtof if single else lib.strtod)(buf, ctypes.byref(end))
    used = ctypes.cast(end, ctypes.c_void_p).value - ctypes.addressof(buf)  # type: ignore[operator]
    if used <= 0 or field[used:].strip(_SPACE):
        return None
    return value


class CsvFormat:
    """What a CSV file holds and how it is split: the delimiter, quoting, NA value, and the output columns
    (dtype, default or ``None`` where required) with the fields they come from (``select_cols`` /
    ``exclude_cols``)."""

    def __init__(self, dtypes: list[np.dtype], defaults: list[Any], delim: bytes, quote: bool, na: bytes,
                 select: list[int] | None, exclude: list[int] | None) -> None:
        self.dtypes, self.defaults = dtypes, defaults
        self.delim, self.quote, self.na = delim, quote, na
        self.select, self.exclude = select, exclude
        self.n = len(dtypes)
        self._selected = frozenset(select or ())
        self._excluded = frozenset(exclude or ())
        d = re.escape(delim)
        self._unquoted = re.compile(rb"[^" + d + rb"\r\n]*")
        self.names = [f"f{i}" for i in range(self.n)]

    def included(self, i: int) -> bool:
        """Whether field ``i`` of a record is an output column (tf.data's rule)."""
        if self.select is None and self.exclude is None:
            return True
        if self.select is not None:
            return i in self._selected
        return i not in self._excluded

    def fixed_fields(self) -> int | None:
        """The number of fields every record must have where the arguments say it, else None."""
        if self.select is not None:
            return None
        return self.n + len(self.exclude or ())

    # ---- one field ----------------------------------------------------------------------------------
    def convert(self, field: bytes, k: int) -> Any:
        """Output column ``k``'s value of ``field``; ``ValueError`` (column and value) where it is not one."""
        dtype = self.dtypes[k]
        if field == b"" or field == self.na:
            default = self.defaults[k]
            if default is None:
                raise ValueError(f"column {k} is required but the field is {'empty' if not field else 'NA'} "
                                 f"({field!r}); give the column a default in record_defaults")
            return default
        if dtype is STRING:
            return field
        if dtype.kind == "i":
            lo, hi = _LIMITS[dtype]
            if _INT.match(field):
                v = int(field)
                if lo <= v <= hi:
                    return dtype.type(v)
            raise ValueError(f"column {k}: {field!r} is not a valid {dtype.name} (decimal digits with an optional "
                             f"sign, {lo}..{hi})")
        x = parse_float(field, dtype == np.float32)
        if x is None:
            raise ValueError(f"column {k}: {field!r} is not a valid {dtype.name}")
        return dtype.type(x)

    # ---- one record ---------------------------------------------------------------------------------
    def read_record(self, buf: bytes, pos: int, eof: bool) -> tuple[int, list[bytes], int, str | None] | None:
        """The record starting at ``pos`` (< ``len(buf)``): ``(end, included fields, number of fields, first
        syntax error or None)``; ``end`` is where the next record starts. None when ``buf`` ends before the record
        does and more bytes may follow (not ``eof``)."""
        fields: list[bytes] = []
        error: str | None = None
        n = len(buf)
        i = 0
        delim = self.delim[0]
        while True:
            if pos >= n:  # a field starting at the end of the buffer
                if not eof:
                    return None
                if self.included(i):
                    fields.append(b"")
                return n, fields, i + 1, error
            if self.quote and buf[pos] == 34:
                got = self._quoted(buf, pos, eof)
                if got is None:
                    return None
                value, nxt, bad = got
                error = error or bad
            else:
                m = self._unquoted.match(buf, pos)  # (a ``*`` pattern: it always matches, maybe empty)
                nxt = m.end() if m is not None else pos
                value = buf[pos:nxt]
                if nxt >= n and not eof:
                    return None
                if self.quote and 34 in value and error is None:
                    error = f"field {i} ({value[:40]!r}) has a '\"' but does not start with one"
            if self.included(i):
                fields.append(value)
            i += 1
            if nxt >= n:
                return n, fields, i, error
            c = buf[nxt]
            if c == delim:
                pos = nxt + 1
                continue
            if c == 13:  # \r, or \r\n
                if nxt + 1 >= n and not eof:
                    return None
                return nxt + (2 if buf[nxt + 1:nxt + 2] == b"\n" else 1), fields, i, error
            return nxt + 1, fields, i, error  # \n

    def _quoted(self, buf: bytes, pos: int, eof: bool) -> tuple[bytes, int, str | None] | None:
        """A quoted field at ``pos``: ``(unescaped value, index after its closing quote, error or None)``."""
        start, at, error = pos, pos + 1, None
        n = len(buf)
        while True:
            m = _QUOTED_REST.match(buf, at)
            if m is None:
                if not eof:
                    return None
                return buf[start + 1:], n, error or (f"a quoted field ({buf[start:start + 40]!r}...) is not "
                                                     "closed before the end of the file")
            end = m.end()
            if end >= n:
                if not eof:
                    return None
                break
            c = buf[end]
            if c == self.delim[0] or c in (10, 13):
                break
            error = error or (f"a quoted field ({buf[start:end + 1][:40]!r}) has a '\"' followed by {bytes([c])!r}; "
                              "a '\"' inside a quoted field must be doubled")
            at = end + 1
        return buf[start + 1:end - 1].replace(b'""', b'"'), end, error

    def record_values(self, fields: list[bytes], nfields: int, error: str | None) -> tuple[Any, ...]:
        """The output tuple of a record's included fields; ``ValueError`` for its first problem (tf.data's order:
        syntax and field errors in field order, then the field count)."""
        values = []
        for k, field in enumerate(fields):
            if error is not None:
                raise ValueError(error)
            if k >= self.n:
                raise ValueError(f"the record has more fields than the {self.n} columns of record_defaults "
                                 f"({nfields} fields)")
            values.append(self.convert(field, k))
        if error is not None:
            raise ValueError(error)
        if len(values) != self.n:
            raise ValueError(f"the record has {len(values)} of the {self.n} columns of record_defaults "
                             f"({nfields} fields)")
        return tuple(values)


def count_lines(data: bytes, stop: int | None = None) -> int:
    """The record terminators (``\\n``, ``\\r``, ``\\r\\n``) in ``data[:stop]`` (counted in place)."""
    end = len(data) if stop is None else stop
    n = data.count(b"\n", 0, end)
    if data.find(b"\r", 0, end) < 0:
        return n
    return n + data.count(b"\r", 0, end) - data.count(b"\r\n", 0, end)


def quotes_valid(chunk: bytes | memoryview, delim: bytes, at_eof: bool) -> bool:
    """Whether every ``"`` of ``chunk`` (whole records) sits where tf.data's grammar puts one: each opening quote at
    a field's start, each closing quote before a delimiter, a terminator or the end of the file, doubled quotes
    inside (counted by parity, in numpy)."""
    arr = np.frombuffer(chunk, np.uint8)
    q = np.flatnonzero(arr == 34)
    if len(q) == 0:
        return True
    if len(q) % 2:
        return False
    ends = np.array([delim[0], 10, 13, 34], np.uint8)
    prev = arr[np.maximum(q - 1, 0)]
    nxt = arr[np.minimum(q + 1, len(arr) - 1)]
    ok_open = np.isin(prev, ends) | (q == 0)
    ok_close = np.isin(nxt, ends) | ((q == len(arr) - 1) & at_eof)
    opening = (np.arange(len(q)) % 2) == 0
    return bool(np.all(np.where(opening, ok_open, ok_close)))


_CUT_WINDOW = 1 << 20  # cut_point looks at the buffer in windows of this many bytes (its temporaries: a few)


def _last_terminator(buf: bytes, start: int, stop: int, eof: bool) -> int:
    """The index of the last ``\\n`` / ``\\r`` in ``buf[start:stop]`` that ends a record there (a ``\\r`` at the
    buffer's end is not one unless ``eof``: its ``\\n`` may follow), or -1."""
    while stop > start:
        t = max(buf.rfind(b"\n", start, stop), buf.rfind(b"\r", start, stop))
        if t < 0 or buf[t] == 10 or t + 1 < len(buf) or eof:
            return t
        stop = t
    return -1


def cut_point(buf: bytes, start: int, stop: int, quote: bool, eof: bool) -> int:
    """The end of the last whole record in ``buf[start:stop]`` (a terminator outside quotes, by quote parity), or
    ``start`` when there is none; with ``eof`` and ``stop == len(buf)``, ``stop``.

    Memory: no copy of ``buf``; with quotes, boolean temporaries of one window (``_CUT_WINDOW`` bytes) at a time,
    from the end, the quote parity before each window counted in place (``bytes.count``)."""
    if eof and stop >= len(buf):
        return len(buf)
    if not quote or buf.find(b'"', start, stop) < 0:
        t = _last_terminator(buf, start, stop, eof)
        return start if t < 0 else t + 1
    quotes_before = buf.count(b'"', start, stop)  # (before the window, once it is taken off below)
    hi = stop
    while hi > start:
        lo = max(start, hi - _CUT_WINDOW)
        w = np.frombuffer(buf, np.uint8, hi - lo, lo)
        is_quote = w == 34
        quotes_before -= int(np.count_nonzero(is_quote))
        inside = np.bitwise_xor.accumulate(is_quote)  # parity of the window's quotes up to each byte
        if quotes_before % 2:
            np.logical_not(inside, out=inside)
        ends = (w == 10) | (w == 13)
        ends &= ~inside
        cands = np.flatnonzero(ends)
        for t in cands[::-1][:2].tolist():  # (at most one \r at the buffer's end is passed over)
            at = lo + t
            if buf[at] == 13 and at + 1 >= len(buf) and not eof:  # a \r whose \n may follow
                continue
            return at + 1
        hi = lo
    return start


def _has_empty_line(buf: bytes, stop: int, cr: bool) -> bool:
    """Whether ``buf[:stop]`` has an empty line inside (``cr``: it has a ``\\r``; else only ``\\n\\n`` is sought)."""
    return buf.find(b"\n\n", 0, stop) >= 0 or (cr and (
        buf.find(b"\r\r", 0, stop) >= 0 or buf.find(b"\n\r", 0, stop) >= 0))


class FastParser:
    """A chunk of whole records through ``pyarrow.csv.read_csv``: the output columns as numpy arrays, or None
    where the chunk needs the exact parser (see the module docstring)."""

    def __init__(self, fmt: CsvFormat) -> None:
        self.fmt = fmt
        self.pa = require("pyarrow", "CsvDataset")
        self.csv = require("pyarrow.csv", "CsvDataset")
        types = {np.dtype(np.int32): self.pa.int32(), np.dtype(np.int64): self.pa.int64(),
                 np.dtype(np.float32): self.pa.float32(), np.dtype(np.float64): self.pa.float64(),
                 STRING: self.pa.binary()}
        self._types = [types[d] for d in fmt.dtypes]
        self._parse = [self.csv.ParseOptions(delimiter=fmt.delim.decode("latin-1"),
                                             quote_char='"' if fmt.quote else False, double_quote=True,
                                             newlines_in_values=quoted, ignore_empty_lines=False)
                       for quoted in (False, True)]  # (line breaks in values: only where quotes are, 2x slower)
        self._nulls = sorted({"", fmt.na.decode("latin-1")})
        self.pc = require("pyarrow.compute", "CsvDataset")
        self._converts: dict[int, tuple[list[str], list[str], Any]] = {}
        self._fixed = sum(d.itemsize for d in fmt.dtypes if d is not STRING)

    def _convert_options(self, total: int) -> tuple[list[str], list[str], Any]:
        """The column names of a chunk of ``total`` fields, the output ones, and pyarrow's convert options for them
        (made once per field count)."""
        got = self._converts.get(total)
        if got is None:
            names = [f"c{i}" for i in range(total)]
            wanted = [names[i] for i in range(total) if self.fmt.included(i)]
            got = self._converts[total] = (names, wanted, self.csv.ConvertOptions(
                column_types=dict(zip(wanted, self._types)), include_columns=wanted, null_values=self._nulls,
                strings_can_be_null=True, quoted_strings_can_be_null=True))
        return got

    def parse(self, buf: bytes, cut: int, at_eof: bool, quotes: bool = True) -> tuple[
            list[np.ndarray], np.ndarray | None, int | None] | None:
        """The records of ``buf[:cut]`` (whole records) as ``(the output columns, each row's bytes (its numbers'
        itemsizes plus its strings' lengths; None without string columns), the record terminators in the chunk
        where known without counting them (no quote, no ``\\r``: one line a record), else None)``, or None where
        the chunk needs the exact parser. ``at_eof``: the chunk ends the file; ``quotes``: False where ``buf`` is known
        to hold no ``"``."""
        fmt = self.fmt
        if buf.startswith(BOM) or buf[:1] in (b"\n", b"\r"):
            return None
        chunk = memoryview(buf)[:cut] if cut < len(buf) else buf  # (no copy of the chunk)
        quoted = quotes and fmt.quote and buf.find(b'"', 0, cut) >= 0
        if quoted and not quotes_valid(chunk, fmt.delim, at_eof):
            return None
        cr = buf.find(b"\r", 0, cut) >= 0
        if (fmt.n + len(fmt.exclude or ()) > 1 or fmt.select is not None) and _has_empty_line(buf, cut, cr):
            return None  # (tf.data: an empty line is a record of one empty field; pyarrow: a row of nulls)
        total = fmt.fixed_fields()
        if total is None:
            first = fmt.read_record(buf, 0, True)
            if first is None or first[3] is not None:
                return None
            total = first[2]
        names, wanted, convert = self._convert_options(total)
        if len(wanted) != fmt.n:
            return None
        pa, csv = self.pa, self.csv
        try:
            table = csv.read_csv(pa.py_buffer(chunk), read_options=csv.ReadOptions(
                column_names=names, use_threads=False, block_size=cut + 1), parse_options=self._parse[quoted],
                convert_options=convert)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        columns, sizes = [], None
        for k, name in enumerate(wanted):
            col = table.column(name)
            col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
            if col.null_count:
                default = fmt.defaults[k]
                if default is None:
                    return None
                col = col.fill_null(pa.scalar(default, self._types[k]))
            if fmt.dtypes[k] is STRING:  # (the strings' lengths from Arrow's offsets, not from the bytes objects)
                lengths = self.pc.binary_length(col).to_numpy()
                sizes = lengths.astype(np.int64) if sizes is None else sizes + lengths
            columns.append(col.to_numpy(zero_copy_only=False))
        if sizes is not None:
            sizes += self._fixed
        lines = None if quoted or cr else table.num_rows - (buf[cut - 1] != 10)
        return columns, sizes, lines


def parse_records(fmt: CsvFormat, buf: bytes, pos: int, stop: int, eof: bool) -> tuple[
        list[tuple[Any, ...]], list[tuple[int, int, int, Exception]], int] | None:
    """The exact parser: the records of ``buf`` from ``pos`` while a record starts before ``stop``; ``(good rows,
    errors as (rows before it, record start, its terminators count before, error), end)`` where ``end`` is the
    start of the next record; None where a record needs bytes past ``buf`` (not ``eof``)."""
    rows: list[tuple[Any, ...]] = []
    errors: list[tuple[int, int, int, Exception]] = []
    while pos < stop:
        got = fmt.read_record(buf, pos, eof)
        if got is None:
            return (rows, errors, pos) if rows or errors else None
        end, fields, nfields, error = got
        try:
            rows.append(fmt.record_values(fields, nfields, error))
        except ValueError as e:
            errors.append((len(rows), pos, end, e))
        pos = end
    return rows, errors, pos


def as_columns(fmt: CsvFormat, rows: list[tuple[Any, ...]]) -> list[np.ndarray]:
    """Rows (tuples of numpy scalars / bytes) as one numpy array per output column."""
    out = []
    for k, dtype in enumerate(fmt.dtypes):
        if dtype is STRING:
            col = np.empty(len(rows), dtype=object)
            col[:] = [r[k] for r in rows]
        else:
            col = np.array([r[k] for r in rows], dtype=dtype)
        out.append(col)
    return out
