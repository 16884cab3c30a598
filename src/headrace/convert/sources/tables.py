"""Tabular sources: CSV, JSON Lines and Parquet files; one row per record, one feature per column.

Source IDs are ``<file relative to the source>:<position>``: the line number (1-based, the line where the
record starts) for CSV and JSON Lines, the row number in the file (0-based) for Parquet. Work units are
whole files (CSV, JSON Lines: a quoted CSV field may span lines, so a file cannot be split at arbitrary
bytes) and row groups (Parquet).

- **CSV** (RFC 4180 as Python's :mod:`csv` reads it, UTF-8; ``.csv``, or compressed ``.csv.gz`` (GZIP) /
  ``.csv.zz`` / ``.csv.zlib`` (ZLIB), decompressed by ``headrace._files.streams``): the first line names the
  columns; an empty cell is a missing value; a column's kind is inferred over the whole dataset (int64,
  float32 or string; see :mod:`headrace.convert.schema`). A line with the wrong number of fields is rejected.
- **JSON Lines** (https://jsonlines.org, UTF-8): each non-blank line one JSON object; ``null`` is a missing
  value; arrays of numbers or strings become list features. A line that is not valid JSON, not an object,
  or holds a nested object or array is rejected.
- **Parquet**: read one row group at a time with pyarrow; nulls are missing values; list columns become
  list features; timestamps, dates and durations become int64 (their Arrow unit), decimals float.
"""

from __future__ import annotations

import codecs
import csv
import json
from collections.abc import Iterator
from typing import Any

from ..._deps import require
from ..._files.streams import open_input
from ...io import files
from ...io.files import join
from ..schema import TEXT, Values, typed
from .base import Item, Rejected, Source, list_files, total_size


class _FileSource(Source):
    extensions: tuple[str, ...] = ()

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.root, self.files = list_files(path, self.extensions, self.kind)

    def units(self) -> list[Any]:
        return list(self.files)

    def estimate_bytes(self) -> int:
        return total_size(self.root, self.files)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "files": len(self.files)}


def _typed_row(obj: dict[str, Any], rel: str) -> dict[str, Any]:
    out = {}
    for key, value in obj.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"column name {key!r} is not a non-empty string")
        t = typed(value, key)
        if t is not None:
            out[key] = t
    return out


class CSVSource(_FileSource):
    """CSV files (module docstring)."""

    kind = "csv"
    extensions = (".csv", ".csv.gz", ".csv.zz", ".csv.zlib")

    def read(self, unit: str) -> Iterator[Item]:
        path = join(self.root, unit)
        with open_input(path, "AUTO") as raw:  # (by extension: .gz GZIP, .zz / .zlib ZLIB)
            reader = csv.reader((line.decode("utf-8") for line in raw), strict=True)  # decoded line by line
            header: list[str] | None = None
            line = 1
            while True:
                start = line
                try:
                    fields = next(reader)
                except StopIteration:
                    return
                except (csv.Error, UnicodeDecodeError) as e:
                    yield Rejected(f"{unit}:{start}", f"{path}:{start}", f"{type(e).__name__}: {e}; the rest "
                                   "of the file is not read: fix the file's quoting / encoding (UTF-8)")
                    return
                line = reader.line_num + 1
                if header is None:
                    header = fields
                    bad: list[str] = [h for h in header if not h] or sorted({h for h in header if header.count(h) > 1})
                    if bad:
                        yield Rejected(f"{unit}:1", f"{path}:1", f"the header line has empty or repeated column "
                                       f"names {bad}; give every column a unique name")
                        return
                    continue
                if len(fields) != len(header):
                    yield Rejected(f"{unit}:{start}", f"{path}:{start}", f"malformed CSV line: {len(fields)} "
                                   f"fields but the header has {len(header)} columns")
                    continue
                row: dict[str, Values] = {k: (TEXT, [v]) for k, v in zip(header, fields) if v != ""}
                yield f"{unit}:{start}", row


class JSONLinesSource(_FileSource):
    """JSON Lines files (module docstring)."""

    kind = "jsonl"
    extensions = (".jsonl", ".ndjson", ".json")

    def read(self, unit: str) -> Iterator[Item]:
        path = join(self.root, unit)
        decoder = codecs.getincrementaldecoder("utf-8")()
        with files.open_file(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                rid, where = f"{unit}:{number}", f"{path}:{number}"
                try:
                    line = decoder.decode(raw)
                    if not line.strip():
                        continue
                    obj = json.loads(line)
                    if not isinstance(obj, dict):
                        raise ValueError(f"a JSON {type(obj).__name__}, not an object ({{...}})")
                    yield rid, _typed_row(obj, unit)
                except (ValueError, UnicodeDecodeError) as e:
                    yield Rejected(rid, where, f"{type(e).__name__}: {e}")


class ParquetSource(_FileSource):
    """Parquet files (module docstring); units are ``(file, row group, first row)``."""

    kind = "parquet"
    extensions = (".parquet",)

    def units(self) -> list[tuple[str, int, int]]:
        pq = require("pyarrow.parquet", "headrace.convert (Parquet)")

        out = []
        for rel in self.files:
            with files.open_file(join(self.root, rel), "rb") as f:
                meta = pq.ParquetFile(f).metadata
            first = 0
            for g in range(meta.num_row_groups):
                out.append((rel, g, first))
                first += meta.row_group(g).num_rows
        return out

    def estimate_bytes(self) -> int:
        pq = require("pyarrow.parquet", "headrace.convert (Parquet)")

        total = 0
        for rel in self.files:
            with files.open_file(join(self.root, rel), "rb") as f:
                meta = pq.ParquetFile(f).metadata
            total += sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups))
        return total

    def read(self, unit: tuple[str, int, int]) -> Iterator[Item]:
        pq = require("pyarrow.parquet", "headrace.convert (Parquet)")

        rel, group, first = unit
        path = join(self.root, rel)
        try:
            with files.open_file(path, "rb") as f:
                table = pq.ParquetFile(f).read_row_group(group)
        except Exception as e:  # a damaged file: every row of the group is lost; say so
            yield Rejected(f"{rel}:row group {group}", f"{path} row group {group}",
                           f"{type(e).__name__}: {e}; the row group cannot be read")
            return
        cols = {name: _plain(table.column(name)).to_pylist() for name in table.column_names}
        for i in range(table.num_rows):
            rid = f"{rel}:{first + i}"
            try:
                yield rid, _typed_row({name: col[i] for name, col in cols.items()}, rel)
            except ValueError as e:
                yield Rejected(rid, f"{path} row {first + i}", str(e))


def _plain(col: Any) -> Any:
    """Temporal columns as int64, decimals as float64, dictionaries decoded (so ``to_pylist`` gives plain
    Python values)."""
    pa = require("pyarrow", "headrace.convert (Parquet)")
    t = require("pyarrow.types", "headrace.convert (Parquet)")

    typ = col.type
    if t.is_dictionary(typ):
        col = col.cast(typ.value_type)
        typ = typ.value_type
    if t.is_timestamp(typ) or t.is_date(typ) or t.is_time(typ) or t.is_duration(typ):
        return col.cast(pa.int64()) if not t.is_date32(typ) and not t.is_time32(typ) else col.cast(
            pa.int32()).cast(pa.int64())
    if t.is_decimal(typ):
        return col.cast(pa.float64())
    return col
