"""The arguments of tf.data's CSV readers checked and turned into a :class:`~headrace.io._csv_parse.CsvFormat`:
``record_defaults`` (dtypes and defaults, tf.data's conversions), ``field_delim``, ``na_value``, ``select_cols`` /
``exclude_cols``."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ._csv_parse import DTYPES, STRING, CsvFormat

_NAMES: dict[str, np.dtype] = {
    "int32": np.dtype(np.int32), "int64": np.dtype(np.int64), "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64), "string": STRING, "str": STRING, "bytes": STRING, "object": STRING}
_ALLOWED = "int32, int64, float32, float64 or string (bytes)"


def _as_csv_dtype(x: Any, where: str) -> np.dtype | None:
    """The column dtype ``x`` names (a type, a numpy dtype or a name), or None when ``x`` is not a dtype."""
    if isinstance(x, str) and x in _NAMES:
        return _NAMES[x]
    if x in (bytes, str, object):
        return STRING
    if (isinstance(x, type) and issubclass(x, np.generic)) or isinstance(x, np.dtype):
        dt = np.dtype(x)
        if dt.kind in "SUO":
            return STRING
        if dt not in DTYPES:
            raise ValueError(f"{where}: dtype {dt} is not a CSV column type; use {_ALLOWED}")
        return dt
    dtype = getattr(x, "dtype", None)
    if dtype is not None and not isinstance(x, np.ndarray | np.generic) and hasattr(dtype, "as_numpy_dtype"):
        return _as_csv_dtype(dtype.as_numpy_dtype, where)  # a tf.DType given where a dtype is meant
    return None


def _default(x: Any, where: str) -> tuple[np.dtype, Any]:
    """``(dtype, default or None)`` of one ``record_defaults`` entry (see ``CsvDataset``)."""
    dt = _as_csv_dtype(x, where)
    if dt is not None:
        return dt, None
    if isinstance(x, list | tuple) and len(x) == 0:
        return np.dtype(np.float32), None  # tf.constant([]) is float32
    arr = np.asarray(x) if isinstance(x, np.ndarray | np.generic) else None
    if arr is None:
        values = list(x) if isinstance(x, list | tuple) else [x]
        if len(values) > 1:
            raise ValueError(f"{where}: {x!r} holds {len(values)} values; give one default per column (or [] / a "
                             "dtype for a required column)")
        if not values:
            return np.dtype(np.float32), None
        v = values[0]
        if isinstance(v, bool):
            raise ValueError(f"{where}: {v!r} is a bool; CSV columns are {_ALLOWED}")
        if isinstance(v, str | bytes):
            return STRING, v.encode("utf-8") if isinstance(v, str) else v
        if isinstance(v, int):
            dt = np.dtype(np.int32) if -(2**31) <= v < 2**31 else np.dtype(np.int64)
            return dt, dt.type(v)
        if isinstance(v, float):
            return np.dtype(np.float32), np.float32(v)
        arr = np.asarray(v)
    if arr.size > 1:
        raise ValueError(f"{where}: an array of {arr.size} values; give one default per column")
    dt = _as_csv_dtype(arr.dtype, where)
    if dt is None:
        raise ValueError(f"{where}: {x!r} is not a dtype or a default value; use {_ALLOWED}")
    if arr.size == 0:
        return dt, None
    v = arr.reshape(-1)[0]
    if dt is STRING:
        v = v.encode("utf-8") if isinstance(v, str) else bytes(v)
        return dt, v
    return dt, dt.type(v)


def _indices(x: Any, name: str, what: str) -> list[int] | None:
    if x is None:
        return None
    out = [int(v) for v in np.asarray(x).reshape(-1).tolist()]
    if not out:
        return None
    if out[0] < 0 or any(b <= a for a, b in itertools.pairwise(out)):
        raise ValueError(f"{what}({name}={out}): must be non-negative, strictly increasing field indices")
    return out


def _one_byte(x: Any, name: str, what: str) -> bytes:
    b = x.encode("utf-8") if isinstance(x, str) else bytes(x)
    if len(b) != 1 or b in (b"\n", b"\r"):
        raise ValueError(f"{what}({name}={x!r}): must be one byte other than a line break (e.g. ',' or '\\t')")
    return b


def csv_format(record_defaults: Any, field_delim: Any, use_quote_delim: bool, na_value: Any, select_cols: Any,
               exclude_cols: Any, what: str) -> CsvFormat:
    """The checked arguments of a CSV reader as a ``CsvFormat``; ``ValueError`` / ``TypeError`` naming the bad one."""
    if isinstance(record_defaults, str | bytes) or not hasattr(record_defaults, "__len__"):
        raise TypeError(f"{what}(record_defaults={record_defaults!r}): expected a list with one entry per column")
    if len(record_defaults) == 0:
        raise ValueError(f"{what}: record_defaults is empty; give one dtype or default per column")
    pairs = [_default(x, f"{what}: record_defaults[{i}]") for i, x in enumerate(record_defaults)]
    delim = _one_byte(field_delim, "field_delim", what)
    quote = bool(use_quote_delim)
    if quote and delim == b'"':
        raise ValueError(f"{what}(field_delim='\"') with use_quote_delim=True: pick another delimiter or "
                         "use_quote_delim=False")
    na = na_value.encode("utf-8") if isinstance(na_value, str) else bytes(na_value)
    select = _indices(select_cols, "select_cols", what)
    exclude = _indices(exclude_cols, "exclude_cols", what)
    if select is not None and exclude is not None:
        raise ValueError(f"{what}: give select_cols or exclude_cols, not both")
    if select is not None and len(select) != len(pairs):
        raise ValueError(f"{what}: select_cols has {len(select)} indices but record_defaults {len(pairs)} entries; "
                         "give one default per selected column")
    return CsvFormat([p[0] for p in pairs], [p[1] for p in pairs], delim, quote, na, select, exclude)
