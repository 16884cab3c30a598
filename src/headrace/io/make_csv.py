"""``make_csv_dataset``: tf.data's ``tf.data.experimental.make_csv_dataset``, composed of headrace's own pieces.

The steps are tf.data's (TensorFlow 2.21, ``tensorflow/python/data/experimental/ops/readers.py``): the files of
``file_pattern`` (each pattern globbed, all sorted), shuffled when ``shuffle``; the column names from the first
file's header (every file's must match); the column types, where ``column_defaults`` is not given, inferred from
the first ``num_rows_for_inference`` records of the files (Python's ``csv`` module over the decoded text; the
least permissive of int32, int64, float32, float64, string that reads every non-empty, non-NA value, with numpy's
conversions; such columns are optional, default 0 or ``b""``); then one ``CsvDataset`` per file, interleaved
(``num_parallel_reads``, ``sloppy``), ``ignore_errors`` if asked, ``shuffle(shuffle_buffer_size, shuffle_seed)``,
``repeat(num_epochs)``, ``batch(batch_size, drop_remainder=num_epochs is None)``, a map into
``(OrderedDict(column -> batch), label batch)`` and ``prefetch``. One difference: tf.data cannot infer names or
types of ``"ZLIB"`` files (it raises); headrace reads them like ``"GZIP"`` ones.
"""

from __future__ import annotations

import collections
import contextlib
import csv
import io
from collections.abc import Generator
from typing import Any

import numpy as np

from .._dataset import Dataset
from .._files.streams import normalize_compression, open_input
from .._options import AUTOTUNE
from . import files
from .csv import CsvDataset

_WHAT = "make_csv_dataset"
_INFER = (np.int32, np.int64, np.float32, np.float64)


def _file_names(file_pattern: Any) -> list[str]:
    patterns = [file_pattern] if isinstance(file_pattern, str | bytes) else list(file_pattern)
    if not patterns:
        raise ValueError(f"{_WHAT}: file_pattern is empty; pass a glob pattern or a list of them")
    names: list[str] = []
    for p in patterns:
        path = files.to_str_path(p)
        names.extend(files.glob(path) if set("*?[") & set(path) else ([path] if files.exists(path) else []))
    if not names:
        raise ValueError(f"{_WHAT}: no files match file_pattern {file_pattern!r}")
    return sorted(names)


_FIX = "pass column_names=[...] and column_defaults=[...] (nothing is then read before the dataset)"


def _records(path: str, compression: str, encoding: str, delim: str,
             quote: bool) -> Generator[tuple[int, list[str]], None, None]:
    """``(line number, fields)`` of each record of ``path`` (Python's ``csv`` module over the decoded text).

    Raises:
        ValueError: a record the ``csv`` module cannot read (a field over its limit of ``csv.field_size_limit()``
            characters, ...) or bytes that do not decode: one line naming the file, the line and the fix.
    """
    text = io.TextIOWrapper(open_input(path, compression), encoding=encoding, newline="")
    rows = csv.reader(text, delimiter=delim, quoting=csv.QUOTE_MINIMAL if quote else csv.QUOTE_NONE)
    with text:
        while True:
            try:
                row = next(rows)
            except StopIteration:
                return
            except csv.Error as e:
                raise ValueError(f"{_WHAT}: cannot read line {rows.line_num} of {path} to infer the columns: {e}; "
                                 f"{_FIX}") from None
            except UnicodeDecodeError as e:
                raise ValueError(f"{_WHAT}: {path} has bytes that are not {encoding} text at line {rows.line_num + 1} "
                                 f"or after it ({e.reason}: {e.object[e.start:e.start + 4]!r}); give the file's "
                                 f"encoding=... or {_FIX}") from None
            yield rows.line_num, row


def _column_names(names: list[str], compression: str, encoding: str, delim: str, quote: bool) -> list[str]:
    first: list[str] | None = None
    for path in names:
        with contextlib.closing(_records(path, compression, encoding, delim, quote)) as rows:
            row = next(rows, (0, None))[1]
        if row is None:
            raise ValueError(f"{_WHAT}: cannot read the header line of {path}: is it an empty file?")
        if first is None:
            first = row
        elif row != first:
            raise ValueError(f"{_WHAT}: {path} has the header {row}, {names[0]} has {first}; all files must have the "
                             "same column names")
    return first or []


def _valid(value: str, k: int) -> bool:
    t = _INFER[k]
    try:
        if k == 0:
            return bool(np.int32(value) == np.int64(value))
        if k == 1:
            np.int64(value)
            return True
        return bool(t(value) < np.inf)
    except (ValueError, OverflowError):
        return False


def _infer_type(value: str, na: str, prev: int | None) -> int | None:
    """tf.data's ``_infer_type``: the index in (int32, int64, float32, float64, string) of the least permissive type
    that reads ``value`` and is not below ``prev``."""
    if value in ("", na):
        return prev
    for k in range(4):
        if _valid(value, k) and (prev is None or prev <= k):
            return k
    return 4


def _infer_defaults(names: list[str], ncols: int, select: list[int] | None, compression: str, encoding: str,
                    delim: str, quote: bool, na: str, header: bool, rows_for_inference: int | None) -> list[Any]:
    cols = select if select is not None else list(range(ncols))
    kinds: list[int | None] = [None] * len(cols)
    seen = 0
    for path in names:
        with contextlib.closing(_records(path, compression, encoding, delim, quote)) as rows:
            if header:
                next(rows, None)
            for n, row in rows:
                if rows_for_inference is not None and seen >= rows_for_inference:
                    break
                if len(row) != ncols:
                    raise ValueError(f"{_WHAT}: cannot infer the column types: the record ending at line {n} of "
                                     f"{path} has {len(row)} fields, expected {ncols}; pass column_defaults=[...]")
                for j, c in enumerate(cols):
                    kinds[j] = _infer_type(row[c], na, kinds[j])
                seen += 1
        if rows_for_inference is not None and seen >= rows_for_inference:
            break
    return [[b""] if k in (None, 4) else np.array([0], dtype=_INFER[k]) for k in kinds]


def _select_indices(select: Any, names: list[str]) -> list[int]:
    index = {n: i for i, n in enumerate(names)}
    out = []
    for v in select:
        if isinstance(v, int | np.integer) and not isinstance(v, bool):
            if not 0 <= int(v) < len(names):
                raise ValueError(f"{_WHAT}: select_columns has the index {v}; the files have {len(names)} columns "
                                 f"(0..{len(names) - 1})")
            out.append(int(v))
        elif v in index:
            out.append(index[v])
        else:
            raise ValueError(f"{_WHAT}: select_columns names {v!r}, not one of the columns {names}")
    if len(set(out)) != len(out):
        raise ValueError(f"{_WHAT}: select_columns {list(select)} names a column twice")
    return sorted(out)


class _ToFeatures:
    """The map after ``batch``: column batches into ``OrderedDict(name -> batch)`` and, with a label, the pair."""

    def __init__(self, names: list[str], label: str | None) -> None:
        self.names, self.label = names, label

    def __call__(self, *columns: Any) -> Any:
        features = collections.OrderedDict(zip(self.names, columns))
        if self.label is None:
            return features
        label = features.pop(self.label)
        return features, label


class _OpenCsv:
    """One file's ``CsvDataset`` (with ``ignore_errors``), the function ``interleave`` calls."""

    def __init__(self, kwargs: dict[str, Any], ignore: bool) -> None:
        self.kwargs, self.ignore = kwargs, ignore

    def __call__(self, name: Any) -> Dataset:
        ds = CsvDataset(name, **self.kwargs)
        return ds.ignore_errors() if self.ignore else ds


def make_csv_dataset(file_pattern: Any, batch_size: int, column_names: list[str] | None = None,
                     column_defaults: list[Any] | None = None, label_name: str | None = None,
                     select_columns: list[Any] | None = None, field_delim: str = ",", use_quote_delim: bool = True,
                     na_value: str = "", header: bool = True, num_epochs: int | None = None, shuffle: bool = True,
                     shuffle_buffer_size: int = 10000, shuffle_seed: int | None = None,
                     prefetch_buffer_size: int | None = None, num_parallel_reads: int | None = None,
                     sloppy: bool = False, num_rows_for_inference: int | None = 100,
                     compression_type: str | None = None, ignore_errors: bool = False,
                     encoding: str = "utf-8") -> Dataset:
    """Batches of CSV records as ``(OrderedDict(column name -> batch), label batch)`` (without ``label_name``: the
    dict alone), as ``tf.data.experimental.make_csv_dataset`` (steps in the module docstring).

    Example::

        ds = hr.io.make_csv_dataset("train-*.csv", batch_size=32, label_name="y", num_epochs=1)
        for features, label in ds: ...   # features["x"]: array (32,), label: array (32,)

    Args:
        file_pattern: a glob pattern, a path or a list of them (all matches, sorted).
        batch_size: rows per batch.
        column_names: the columns' names (default: the header of the first file; every file's must match).
        column_defaults: as ``CsvDataset``'s ``record_defaults``, one per selected column (default: inferred).
        label_name: the column returned apart as the label (default: none; the elements are the dicts).
        select_columns: names or indices of the columns to read.
        field_delim, use_quote_delim, na_value, header, compression_type: as ``CsvDataset``'s.
        num_epochs: passes over the files (``None``: forever, and the last partial batch is dropped).
        shuffle, shuffle_buffer_size, shuffle_seed: shuffle the files and the records.
        prefetch_buffer_size: batches prefetched (default ``AUTOTUNE``).
        num_parallel_reads: files read at once (``AUTOTUNE``: one per core).
        sloppy: read the files' records in any order (``deterministic=False``).
        num_rows_for_inference: records read to infer the types (``None``: all).
        ignore_errors: skip records that do not parse.
        encoding: the text encoding of the header and the records read for inference.

    Returns:
        A Dataset of ``(OrderedDict, label)`` batches: arrays of shape ``(batch_size,)`` of int32, int64, float32,
        float64 or ``bytes`` (object).

    Raises:
        ValueError: no file matches; no header and no ``column_names``; duplicate names; a bad ``select_columns``
            or ``label_name``; defaults and selected columns of different lengths; a record of the wrong length
            met while inferring types, or one Python's ``csv`` module cannot read there (a field over
            ``csv.field_size_limit()``, 128 Ki characters), or header / inference bytes not in ``encoding``: each one
            line naming the file and line. While iterating: ``CsvDataset``'s errors (unless ``ignore_errors``).
    """
    reads = 1 if num_parallel_reads is None else num_parallel_reads
    prefetch = AUTOTUNE if prefetch_buffer_size is None else prefetch_buffer_size
    names = _file_names(file_pattern)
    compression = normalize_compression(compression_type, f"{_WHAT}(compression_type)")
    if column_names is None:
        if not header:
            raise ValueError(f"{_WHAT}: give column_names=[...] or header=True (the names are read from the header)")
        column_names = _column_names(names, compression, encoding, field_delim, use_quote_delim)
    column_names = list(column_names)
    if len(set(column_names)) != len(column_names):
        dup = sorted({n for n in column_names if column_names.count(n) > 1})
        raise ValueError(f"{_WHAT}: duplicate column names {dup}; give unique column_names")
    select = None if select_columns is None else _select_indices(select_columns, column_names)
    if column_defaults is not None:
        defaults = list(column_defaults)
    else:
        defaults = _infer_defaults(names, len(column_names), select, compression, encoding, field_delim,
                                   use_quote_delim, na_value, header, num_rows_for_inference)
    if select is not None and len(defaults) != len(select):
        raise ValueError(f"{_WHAT}: column_defaults has {len(defaults)} entries but select_columns {len(select)}; "
                         "give one default per selected column")
    if select is not None and len(column_names) > len(select):
        column_names = [column_names[i] for i in select]
    if label_name is not None and label_name not in column_names:
        raise ValueError(f"{_WHAT}: label_name={label_name!r} is not one of the columns {column_names}")
    ds = Dataset.from_tensor_slices(np.array(names, dtype=object))
    if shuffle:
        ds = ds.shuffle(len(names), shuffle_seed)
    kwargs = {"record_defaults": defaults, "field_delim": field_delim, "use_quote_delim": use_quote_delim,
              "na_value": na_value, "select_cols": select, "header": header, "compression_type": compression}
    opener = _OpenCsv(kwargs, ignore_errors)
    if reads == AUTOTUNE:
        ds = ds.interleave(opener, num_parallel_calls=AUTOTUNE, deterministic=not sloppy)
    else:
        ds = ds.interleave(opener, cycle_length=reads, block_length=1,
                           num_parallel_calls=reads if reads > 1 else None, deterministic=not sloppy)
    if shuffle:
        ds = ds.shuffle(shuffle_buffer_size, shuffle_seed)
    if num_epochs != 1:
        ds = ds.repeat(num_epochs)
    ds = ds.batch(batch_size, drop_remainder=num_epochs is None)
    return ds.map(_ToFeatures(column_names, label_name)).prefetch(prefetch)
