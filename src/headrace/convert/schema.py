"""Rows, their feature kinds, the dataset's feature spec and statistics, and rows encoded as tf.train.Example.

A *row* is what a source yields for one record: ``(source_id, {feature name: (kind, values)})`` where
``values`` is a flat Python list and ``kind`` is one of

===========  =====================================================================================
kind         values
===========  =====================================================================================
``string``   ``bytes`` (``str`` is UTF-8 encoded by :func:`typed`)
``int64``    ``int`` in ``[-2**63, 2**63 - 1]`` (``bool`` becomes 0 / 1)
``float32``  ``float`` (stored as float32 in the Example, statistics use the float64 source values)
``text``     ``str`` of a CSV cell: its kind is inferred over the whole column (below)
``None``     an empty list (the feature is present with no values; its kind comes from other rows)
===========  =====================================================================================

A missing value (JSON ``null``, a Parquet null, an empty CSV cell) is left out of the row.

**Kinds of a feature over all rows** (:class:`SchemaAccumulator`, merged like a Beam ``CombineFn``):
``int64`` and ``float32`` values together give ``float32``; CSV text gives the narrowest of
``int64`` < ``float32`` < ``string`` that every cell parses as; a feature that is ``string`` in some rows and
a number in others is a :class:`SchemaConflictError` naming the feature and one row of each kind.

**Feature spec**: ``FixedLenFeature([], dtype)`` when every row has exactly one value,
``FixedLenFeature([k], dtype)`` when every row has ``k`` values, else ``VarLenFeature(dtype)``.

**Statistics** per feature: ``present`` (rows that have it), ``min_values`` / ``max_values`` per row; for
numbers ``min``, ``max``, ``mean`` (NaN values are counted in ``nan`` and left out); for label features a
``histogram`` ``{value: rows}`` of at most :data:`MAX_HISTOGRAM` distinct values (``histogram_truncated``
past that).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .._errors import SchemaConflictError

STRING, INT64, FLOAT32, TEXT = "string", "int64", "float32", "text"
NUMERIC = (INT64, FLOAT32)
MAX_HISTOGRAM = 10_000
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_RECORD_OVERHEAD_BYTES = 16 + 8  # TFRecord framing + Example/Features message headers
_FEATURE_OVERHEAD_BYTES = 8

Values = tuple[str | None, list[Any]]
Row = tuple[str, dict[str, Values]]


# ---- values -----------------------------------------------------------------------------------------------
def _scalar(v: Any, name: str) -> tuple[str, Any]:
    if isinstance(v, bytes):
        return STRING, v
    if isinstance(v, str):
        return STRING, v.encode("utf-8")
    if isinstance(v, bool | np.bool_):
        return INT64, int(v)
    if isinstance(v, int | np.integer):
        i = int(v)
        if not INT64_MIN <= i <= INT64_MAX:
            raise ValueError(f"feature {name!r}: the integer {i} does not fit int64 [-2**63, 2**63 - 1]; store it "
                             "as a string or a float")
        return INT64, i
    if isinstance(v, float | np.floating):
        return FLOAT32, float(v)
    if isinstance(v, bytearray | memoryview | np.bytes_):
        return STRING, bytes(v)
    if isinstance(v, np.str_):
        return STRING, str(v).encode("utf-8")
    raise ValueError(f"feature {name!r}: cannot store {type(v).__name__} {v!r}; a tf.train.Example holds bytes/str, "
                     "ints and floats, or flat lists of one of them")


def typed(value: Any, name: str) -> Values | None:
    """``(kind, values)`` of one feature's value; ``None`` for a missing value (``None``).

    Scalars become one-value lists; lists, tuples and numpy arrays (flattened) must hold one kind (ints and
    floats together become floats). Raises ``ValueError`` naming the feature for nested objects (dicts,
    lists of lists), ``None`` inside a list, strings mixed with numbers and ints beyond int64.
    """
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        value = value.reshape(-1).tolist()
    if isinstance(value, list | tuple):
        if not value:
            return None, []
        kinds, out = set(), []
        for v in value:
            if v is None or isinstance(v, list | tuple | dict | np.ndarray):
                raise ValueError(f"feature {name!r}: the list {_short(value)} holds {_short(v)}; only flat lists "
                                 "of bytes/str, ints or floats (no nulls, no nesting) can be stored")
            kind, x = _scalar(v, name)
            kinds.add(kind)
            out.append(x)
        if len(kinds) == 1:
            return kinds.pop(), out
        if kinds == {INT64, FLOAT32}:
            return FLOAT32, [float(x) for x in out]
        raise ValueError(f"feature {name!r}: the list {_short(value)} mixes strings and numbers; a feature holds "
                         "one kind")
    if isinstance(value, dict):
        raise ValueError(f"feature {name!r}: nested objects ({_short(value)}) cannot be stored in a tf.train.Example; "
                         "flatten them into top-level keys")
    kind, x = _scalar(value, name)
    return kind, [x]


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def text_kind(s: str) -> str:
    """The narrowest kind a CSV cell parses as: ``int64``, ``float32`` or ``string``."""
    try:
        i = int(s)
        return INT64 if INT64_MIN <= i <= INT64_MAX else FLOAT32
    except ValueError:
        pass
    try:
        float(s)
        return FLOAT32
    except ValueError:
        return STRING


def _number(v: Any, kind: str | None) -> float | None:
    if kind in NUMERIC:
        return float(v)
    if kind == TEXT:
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _label_key(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def estimate_bytes(features: Mapping[str, Values]) -> int:
    """About the size of the row as a framed tf.train.Example (for ``shard_size``)."""
    n = _RECORD_OVERHEAD_BYTES
    for name, (kind, values) in features.items():
        n += len(name) + _FEATURE_OVERHEAD_BYTES
        if kind in (STRING, TEXT):
            n += sum(len(v) + 2 for v in values)
        else:
            n += (4 if kind == FLOAT32 else 5) * len(values)
    return n


# ---- accumulation -----------------------------------------------------------------------------------------
class _Feature:
    """What one feature looked like over the rows seen so far."""

    __slots__ = ("first_id", "hist", "hist_truncated", "max_len", "min_len", "nan", "num_max", "num_min", "num_n",
                 "num_sum", "present", "text")

    def __init__(self) -> None:
        self.first_id: dict[str, str] = {}  # kind -> the first row (by id) that has it
        self.text = False
        self.present = 0
        self.min_len = math.inf
        self.max_len = 0
        self.num_n = 0
        self.num_sum = 0.0
        self.num_min = math.inf
        self.num_max = -math.inf
        self.nan = 0
        self.hist: Counter[str] | None = None
        self.hist_truncated = False

    def add(self, row_id: str, kind: str | None, values: list[Any], label: bool) -> None:
        self.present += 1
        n = len(values)
        self.min_len = min(self.min_len, n)
        self.max_len = max(self.max_len, n)
        if kind == TEXT:
            self.text = True
            kinds = {text_kind(v) for v in values}
        else:
            kinds = {kind} if kind is not None else set()
        for k in kinds:
            old = self.first_id.get(k)
            if old is None or row_id < old:
                self.first_id[k] = row_id
        for v in values:
            x = _number(v, kind)
            if x is None:
                continue
            if math.isnan(x):
                self.nan += 1
                continue
            self.num_n += 1
            self.num_sum += x
            self.num_min = min(self.num_min, x)
            self.num_max = max(self.num_max, x)
        if label and n == 1:
            self._count(Counter({_label_key(values[0]): 1}))

    def _count(self, counts: Counter[str]) -> None:
        if self.hist is None:
            self.hist = Counter()
        for key, c in counts.items():
            if key in self.hist or len(self.hist) < MAX_HISTOGRAM:
                self.hist[key] += c
            else:
                self.hist_truncated = True

    def merge(self, other: _Feature) -> None:
        for k, rid in other.first_id.items():
            old = self.first_id.get(k)
            if old is None or rid < old:
                self.first_id[k] = rid
        self.text |= other.text
        self.present += other.present
        self.min_len = min(self.min_len, other.min_len)
        self.max_len = max(self.max_len, other.max_len)
        self.num_n += other.num_n
        self.num_sum += other.num_sum
        self.num_min = min(self.num_min, other.num_min)
        self.num_max = max(self.num_max, other.num_max)
        self.nan += other.nan
        if other.hist is not None:
            self._count(other.hist)
        self.hist_truncated |= other.hist_truncated

    def kind(self, name: str) -> str:
        kinds = set(self.first_id)
        if self.text:
            return STRING if STRING in kinds else FLOAT32 if FLOAT32 in kinds else INT64 if kinds else STRING
        if STRING in kinds and kinds & set(NUMERIC):
            num = FLOAT32 if FLOAT32 in kinds else INT64
            raise SchemaConflictError(
                f"feature {name!r} holds strings (first in {self.first_id[STRING]}) and numbers ({num}, first in "
                f"{self.first_id[num]}); a tf.train.Example feature has one kind: fix the source so the feature "
                "has one type in every record")
        if STRING in kinds:
            return STRING
        return FLOAT32 if FLOAT32 in kinds or not kinds else INT64


class SchemaAccumulator:
    """Kinds, value counts and statistics of every feature over a set of rows; ``merge`` two of them in any
    order and get the same result (it is the accumulator of the pipeline's ``CombineFn``).

    Args:
        label_features: names whose values get a histogram (one-value rows only).
    """

    def __init__(self, label_features: Iterable[str] = ()) -> None:
        self.labels = frozenset(label_features)
        self.rows = 0
        self.est_bytes = 0
        self.features: dict[str, _Feature] = {}

    def add(self, row: Row) -> SchemaAccumulator:
        row_id, feats = row
        self.rows += 1
        self.est_bytes += estimate_bytes(feats)
        for name, (kind, values) in feats.items():
            f = self.features.get(name)
            if f is None:
                f = self.features[name] = _Feature()
            f.add(row_id, kind, values, name in self.labels)
        return self

    def merge(self, other: SchemaAccumulator) -> SchemaAccumulator:
        self.rows += other.rows
        self.est_bytes += other.est_bytes
        for name, f in other.features.items():
            mine = self.features.get(name)
            if mine is None:
                self.features[name] = f
            else:
                mine.merge(f)
        return self

    def schema(self) -> Schema:
        """The result; raises :class:`SchemaConflictError` for a feature with strings and numbers."""
        return Schema(self)


class Schema:
    """The feature spec and statistics of a finished :class:`SchemaAccumulator`.

    ``kinds`` maps each feature (sorted) to ``string`` / ``int64`` / ``float32``; ``spec`` to a JSON-friendly
    ``{"type": "FixedLenFeature" | "VarLenFeature", "dtype": kind, "shape": [..]}``; ``stats`` to the
    statistics (module docstring); ``rows`` and ``est_bytes`` count the rows and about their framed bytes.
    """

    def __init__(self, acc: SchemaAccumulator) -> None:
        self.rows = acc.rows
        self.est_bytes = acc.est_bytes
        self.kinds: dict[str, str] = {}
        self.spec: dict[str, dict[str, Any]] = {}
        self.stats: dict[str, dict[str, Any]] = {}
        for name in sorted(acc.features):
            f = acc.features[name]
            kind = self.kinds[name] = f.kind(name)
            fixed = f.present == acc.rows and f.min_len == f.max_len
            shape = [] if fixed and f.max_len == 1 else [f.max_len] if fixed else None
            self.spec[name] = ({"type": "FixedLenFeature", "dtype": kind, "shape": shape} if shape is not None
                               else {"type": "VarLenFeature", "dtype": kind})
            self.stats[name] = _stats(f, kind, acc.rows)

    def to_specs(self) -> dict[str, Any]:
        """The spec as :mod:`headrace.io.example` objects (for ``parse_example``)."""
        return specs_from_json(self.spec)


def specs_from_json(spec: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``{name: FixedLenFeature | VarLenFeature}`` from the manifest's ``features`` entry."""
    from ..io.example import FixedLenFeature, VarLenFeature

    return {name: FixedLenFeature(s["shape"], s["dtype"]) if s["type"] == "FixedLenFeature"
            else VarLenFeature(s["dtype"]) for name, s in spec.items()}


def _stats(f: _Feature, kind: str, rows: int) -> dict[str, Any]:
    out: dict[str, Any] = {"present": f.present, "missing": rows - f.present,
                           "min_values": int(f.min_len) if f.present else 0, "max_values": int(f.max_len)}
    if kind in NUMERIC and f.num_n:
        out.update(min=f.num_min, max=f.num_max, mean=f.num_sum / f.num_n, count=f.num_n)
        if kind == INT64:
            out["min"], out["max"] = int(f.num_min), int(f.num_max)
    if kind in NUMERIC and f.nan:
        out["nan"] = f.nan
    if f.hist is not None:
        out["histogram"] = dict(sorted(f.hist.items(), key=lambda kv: (-kv[1], kv[0])))
        if f.hist_truncated:
            out["histogram_truncated"] = True
    return out


# ---- encoding ---------------------------------------------------------------------------------------------
def _convert(values: list[Any], kind: str | None, target: str, name: str) -> list[Any]:
    if kind == target or kind is None:
        return values
    if kind == TEXT:
        if target == STRING:
            return [v.encode("utf-8") for v in values]
        return [int(v) for v in values] if target == INT64 else [float(v) for v in values]
    if kind == INT64 and target == FLOAT32:
        return [float(v) for v in values]
    raise SchemaConflictError(f"feature {name!r}: {kind} values cannot be stored as {target}")


def columns(features: Mapping[str, Values], kinds: Mapping[str, str]) -> dict[str, list[Any]]:
    """The row's values converted to the dataset's kinds: ``{name: list}`` (missing features left out)."""
    return {name: _convert(values, kind, kinds[name], name) for name, (kind, values) in features.items()}


def encode_row(features: Mapping[str, Values], kinds: Mapping[str, str]) -> bytes:
    """The row as a serialized ``tf.train.Example`` with the dataset's kinds (int64 / float / bytes lists)."""
    from ..io.example import BytesList, FloatList, Int64List, encode

    wrap = {STRING: BytesList, INT64: Int64List, FLOAT32: FloatList}
    return encode({name: wrap[kinds[name]](vals) for name, vals in columns(features, kinds).items()})
