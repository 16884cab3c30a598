"""tf.train.Example without TensorFlow: encode, decode and parse with TensorFlow's feature specs.

Messages follow TensorFlow's ``example.proto`` / ``feature.proto`` (defined in ``_proto/messages.py``); bytes are
parsed by the ``protobuf`` package (its upb C runtime); see docs/how-to/tfrecord.md for why not a hand-written decoder.

Parsing results (numpy; ``"string"`` values are ``bytes``, arrays of them numpy object arrays):

==========================  ==============================  ======================================
spec                        ``parse_single_example``        ``parse_example`` (batch of B records)
==========================  ==============================  ======================================
``FixedLenFeature([], d)``  a scalar: ``bytes``,            array ``(B,)``
                            ``np.int64`` or ``np.float32``
``FixedLenFeature(s, d)``   array of shape ``s``            array ``(B, *s)``
``VarLenFeature(d)``        1-D array of the values         :class:`VarLenBatch` ``(values,
                                                            row_lengths)``: ``values`` 1-D, all
                                                            records' values concatenated;
                                                            ``row_lengths`` int64 ``(B,)``
``FixedLenSequenceFeature`` array ``(n, *s)``               array ``(B, max n, *s)``, padded with
                                                            the spec's ``default_value``
==========================  ==============================  ======================================

Errors: a missing feature without ``default_value``, a value of the wrong kind (``float_list`` where the
spec says int64) or the wrong number of values raise ``ValueError`` naming the feature, the record index
and, when given (``source=``), the file. Bytes that are not an Example raise ``ValueError`` the same way.
``parse_example`` is vectorized: it converts each feature once per batch, not once per record, and is
several times faster per record than ``parse_single_example`` (figures in docs/how-to/tfrecord.md).
"""

from __future__ import annotations

from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from ._example_encode import BytesList, FloatList, Int64List, encode, encode_sequence_example
from ._example_spec import (
    FLOAT32,
    INT64,
    NP_DTYPE,
    STRING,
    FixedLenFeature,
    FixedLenSequenceFeature,
    Spec,
    VarLenBatch,
    VarLenFeature,
    check_specs,
)
from ._proto import messages as pb

_KIND_DTYPE = {"bytes_list": STRING, "int64_list": INT64, "float_list": FLOAT32}


def _where(index: int, source: str | None) -> str:
    return f"record {index}" + (f" of {source}" if source else "")


def _message(cls: Any, serialized: Any, index: int, source: str | None) -> Any:
    if not isinstance(serialized, bytes):
        if isinstance(serialized, bytearray | memoryview):
            serialized = bytes(serialized)
        else:
            raise TypeError(f"{_where(index, source)}: expected serialized bytes, got {type(serialized).__name__}")
    try:
        return cls.FromString(serialized)
    except DecodeError as e:
        raise ValueError(f"{_where(index, source)}: {len(serialized)} bytes that are not a serialized "
                         f"tf.train.{cls.__name__} ({e}); check the file holds {cls.__name__}s") from None


def _values(fmap: Any, key: str, spec: Spec, index: int, source: str | None) -> Any:
    """The repeated values of ``key`` of the spec's kind; ``None`` if missing (or its kind is unset)."""
    f = fmap.get(key)
    if f is None:
        return None
    v = getattr(f, spec.field).value
    if not v:
        kind = f.WhichOneof("kind")
        if kind is None:
            return None
        if kind != spec.field:
            raise ValueError(f"feature {key!r} in {_where(index, source)} is a {kind} ({_KIND_DTYPE[kind]}) but "
                             f"the spec {spec!r} wants {spec.dtype} ({spec.field}); fix the spec's dtype")
    return v


def _missing(key: str, spec: Spec, index: int, source: str | None) -> ValueError:
    fix = ("give it a default_value or use VarLenFeature" if isinstance(spec, FixedLenFeature)
           else "pass allow_missing=True")
    return ValueError(f"feature {key!r} is missing in {_where(index, source)} and {spec!r} requires it; {fix}")


def _bad_count(key: str, spec: FixedLenFeature | FixedLenSequenceFeature, n: int, index: int,
               source: str | None) -> ValueError:
    if isinstance(spec, FixedLenFeature):
        need = f"exactly {spec.size} (shape {list(spec.shape)})"
    else:
        need = f"a multiple of {spec.size} (items of shape {list(spec.shape)})"
    return ValueError(f"feature {key!r} in {_where(index, source)} has {n} {spec.dtype} values but {spec!r} needs "
                      f"{need}; fix the spec's shape or use VarLenFeature")


def _array(values: Any, dtype: str) -> np.ndarray:
    if dtype == STRING:
        out = np.empty(len(values), dtype=object)
        out[:] = values if isinstance(values, list) else list(values)
        return out
    return np.array(values if isinstance(values, list) else list(values), dtype=NP_DTYPE[dtype])


# ---- single record ----------------------------------------------------------------------------------------
def _fixed_single(v: Any, key: str, spec: FixedLenFeature, index: int, source: str | None) -> Any:
    if v is None:
        if spec.default is None:
            raise _missing(key, spec, index, source)
        return spec.default[()] if spec.scalar else spec.default.copy()
    if len(v) != spec.size:
        raise _bad_count(key, spec, len(v), index, source)
    if spec.scalar:
        x = v[0]
        return x if spec.dtype == STRING else NP_DTYPE[spec.dtype](x)
    return _array(v, spec.dtype).reshape(spec.shape)


def _sequence_single(v: Any, key: str, spec: FixedLenSequenceFeature, index: int, source: str | None) -> Any:
    if v is None:
        if not spec.allow_missing:
            raise _missing(key, spec, index, source)
        return np.empty((0, *spec.shape), dtype=NP_DTYPE[spec.dtype])
    if len(v) % spec.size:
        raise _bad_count(key, spec, len(v), index, source)
    return _array(v, spec.dtype).reshape((-1, *spec.shape))


def _parse_features(fmap: Any, features: dict[str, Spec], index: int, source: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, spec in features.items():
        v = _values(fmap, key, spec, index, source)
        if isinstance(spec, FixedLenFeature):
            out[key] = _fixed_single(v, key, spec, index, source)
        elif isinstance(spec, VarLenFeature):
            out[key] = _array(v if v is not None else [], spec.dtype)
        else:
            out[key] = _sequence_single(v, key, spec, index, source)
    return out


def parse_single_example(serialized: bytes, features: dict[str, Spec], *, source: str | None = None,
                         record_index: int = 0) -> dict[str, Any]:
    """Parse one serialized ``tf.train.Example`` into ``{name: value}``, as ``tf.io.parse_single_example``.

    >>> hr.io.parse_single_example(record, {"label": hr.io.FixedLenFeature([], "int64")})  # {'label': np.int64(3)}

    The format is TensorFlow's ``example.proto``; the values per spec are in the module's table.

    Args:
        serialized: one serialized Example (``bytes``).
        features: ``{name: FixedLenFeature | VarLenFeature | FixedLenSequenceFeature}``.
        source: a file name, only for error messages.
        record_index: the record's index, only for error messages.

    Returns:
        dict: ``{name: value}``: ``bytes``, ``np.int64`` / ``np.float32`` scalars or numpy arrays (see the table).

    Raises:
        ValueError: a missing feature without ``default_value``, a value of the wrong kind or count, or bytes that
            are not an Example (naming the feature, the record index and the file when given).
        TypeError: ``serialized`` is not bytes, or bad specs.
    """
    check_specs(features, "parse_single_example")
    fmap = _message(pb.Example, serialized, record_index, source).features.feature
    return _parse_features(fmap, features, record_index, source)


# ---- batches ----------------------------------------------------------------------------------------------
class _Column:
    """Accumulates one feature's values over a batch, converted to numpy once at the end."""

    __slots__ = ("key", "lengths", "spec", "values")

    def __init__(self, key: str, spec: Spec) -> None:
        self.key = key
        self.spec = spec
        self.values: list[Any] = []
        self.lengths: list[int] = []

    def add(self, v: Any, index: int, source: str | None) -> None:
        spec = self.spec
        if isinstance(spec, FixedLenFeature):
            if v is None:
                if spec.default is None:
                    raise _missing(self.key, spec, index, source)
                self.values.extend(spec.default.reshape(-1).tolist())
            elif len(v) != spec.size:
                raise _bad_count(self.key, spec, len(v), index, source)
            elif spec.scalar:
                self.values.append(v[0])
            else:
                self.values.extend(v)
            return
        if v is None:
            if isinstance(spec, FixedLenSequenceFeature) and not spec.allow_missing:
                raise _missing(self.key, spec, index, source)
            self.lengths.append(0)
            return
        if isinstance(spec, FixedLenSequenceFeature) and len(v) % spec.size:
            raise _bad_count(self.key, spec, len(v), index, source)
        self.values.extend(v)
        self.lengths.append(len(v))

    def result(self, batch: int) -> Any:
        spec = self.spec
        values = _array(self.values, spec.dtype)
        if isinstance(spec, FixedLenFeature):
            return values.reshape((batch, *spec.shape))
        lengths = np.array(self.lengths, dtype=np.int64)
        if isinstance(spec, VarLenFeature):
            return VarLenBatch(values, lengths)
        return _pad(values, lengths // spec.size, spec)


def _pad(values: np.ndarray, items: np.ndarray, spec: FixedLenSequenceFeature) -> np.ndarray:
    """``(B, max items, *shape)`` from concatenated items, padded with the spec's default."""
    batch, longest = len(items), int(items.max()) if len(items) else 0
    out = np.empty((batch, longest, spec.size), dtype=values.dtype)
    out[...] = spec.default
    mask = np.arange(longest)[None, :] < items[:, None]
    out[mask] = values.reshape(-1, spec.size)
    return out.reshape((batch, longest, *spec.shape))


def _batch_list(serialized_batch: Any) -> list[Any]:
    if isinstance(serialized_batch, np.ndarray):
        if serialized_batch.dtype.kind == "S":
            raise ValueError("parse_example: a fixed-width bytes array (dtype S) drops trailing zero bytes, which "
                             "corrupts serialized records; pass a list or an object array (dtype=object)")
        if serialized_batch.ndim != 1:
            raise ValueError(f"parse_example: expected a 1-D batch of serialized records, got shape "
                             f"{serialized_batch.shape}; use parse_single_example for one record")
        return serialized_batch.tolist()
    if isinstance(serialized_batch, bytes | str):
        raise TypeError("parse_example: expected a batch (list or 1-D object array) of serialized records, got a "
                        "single record; use parse_single_example")
    return list(serialized_batch)


def _parse_all(cls: Any, records: list[Any], first_index: int, source: str | None) -> list[Any]:
    try:
        return list(map(cls.FromString, records))  # one C-level loop; errors are located below
    except (DecodeError, TypeError):
        return [_message(cls, r, first_index + i, source) for i, r in enumerate(records)]


def _fast_column(fmaps: list[Any], key: str, spec: Spec) -> Any:
    """The column in a few C-level passes, or ``None`` when a record needs the careful path (a missing
    feature, a wrong count or kind: ``_Column`` then fills defaults or raises the precise error).

    ``fmap[key]`` inserts an empty Feature for a missing key; its kind is unset, which the careful path
    treats as missing, exactly like an absent key.
    """
    vs = list(map(attrgetter(spec.field + ".value"), map(itemgetter(key), fmaps)))
    lens = list(map(len, vs))
    if isinstance(spec, FixedLenFeature):
        if spec.size == 0 or lens.count(spec.size) != len(lens):
            return None
        flat = list(map(itemgetter(0), vs)) if spec.scalar else list(chain.from_iterable(vs))
        return _array(flat, spec.dtype).reshape((len(vs), *spec.shape))
    if isinstance(spec, FixedLenSequenceFeature) and any(n % spec.size for n in lens):
        return None
    if 0 in lens:  # empty or missing: fine unless it is another kind (or a required sequence)
        if isinstance(spec, FixedLenSequenceFeature) and not spec.allow_missing:
            return None
        if any(fmaps[i][key].WhichOneof("kind") not in (None, spec.field) for i, n in enumerate(lens) if not n):
            return None
    values = _array(list(chain.from_iterable(vs)), spec.dtype)
    lengths = np.array(lens, dtype=np.int64)
    if isinstance(spec, VarLenFeature):
        return VarLenBatch(values, lengths)
    return _pad(values, lengths // spec.size, spec)


def parse_example(serialized_batch: Any, features: dict[str, Spec], *, source: str | None = None,
                  first_index: int = 0) -> dict[str, Any]:
    """Parse a batch of serialized ``tf.train.Example`` into ``{name: batched value}``, as ``tf.io.parse_example``.

    >>> ds = hr.io.TFRecordDataset(files).batch(256).map(lambda b: hr.io.parse_example(b, features))

    Vectorized: records are parsed in one C-level loop, then each feature is gathered column by column
    and converted to numpy once per batch.

    Args:
        serialized_batch: a list or 1-D object array of ``bytes`` (e.g. the output of
            ``TFRecordDataset(...).batch(n)``), ``B`` records.
        features: ``{name: FixedLenFeature | VarLenFeature | FixedLenSequenceFeature}``.
        source: a file name, only for error messages.
        first_index: record ``i`` of the batch is called ``first_index + i`` in error messages.

    Returns:
        dict: ``{name: value}``: arrays of shape ``(B, *shape)``, or :class:`VarLenBatch` ``(values, row_lengths)``
        for ``VarLenFeature`` (see the module's table).

    Raises:
        ValueError: as :func:`parse_single_example`.
        TypeError: as :func:`parse_single_example`.
    """
    check_specs(features, "parse_example")
    records = _batch_list(serialized_batch)
    fmaps = list(map(attrgetter("features.feature"), _parse_all(pb.Example, records, first_index, source)))
    out: dict[str, Any] = {}
    for key, spec in features.items():
        col = _fast_column(fmaps, key, spec)
        if col is None:
            slow = _Column(key, spec)
            for i, fmap in enumerate(fmaps):
                slow.add(_values(fmap, key, spec, first_index + i, source), first_index + i, source)
            col = slow.result(len(fmaps))
        out[key] = col
    return out


# ---- SequenceExample --------------------------------------------------------------------------------------
def _feature_list(flist: Any, key: str, spec: Spec, index: int, source: str | None) -> Any:
    where = f"{_where(index, source)}, feature_lists[{key!r}]"
    steps = [_values_of_step(f, key, spec, where, step) for step, f in enumerate(flist.feature)]
    if isinstance(spec, VarLenFeature):
        lengths = np.array([len(v) for v in steps], dtype=np.int64)
        return VarLenBatch(_array([x for v in steps for x in v], spec.dtype), lengths)
    for v in steps:
        if len(v) != spec.size:
            raise ValueError(f"feature list {key!r} in {where}: a step has {len(v)} values but {spec!r} needs "
                             f"{spec.size} per step (shape {list(spec.shape)}); fix the spec's shape")
    return _array([x for v in steps for x in v], spec.dtype).reshape((len(steps), *spec.shape))


def _values_of_step(feature: Any, key: str, spec: Spec, where: str, step: int) -> Any:
    v = getattr(feature, spec.field).value
    kind = feature.WhichOneof("kind") if not v else spec.field
    if kind not in (None, spec.field):
        raise ValueError(f"feature list {key!r} in {where}: step {step} is a {kind} but {spec!r} wants "
                         f"{spec.dtype} ({spec.field}); fix the spec's dtype")
    return v


def parse_single_sequence_example(serialized: bytes, context_features: dict[str, Spec] | None = None,
                                  sequence_features: dict[str, Spec] | None = None, *,
                                  source: str | None = None, record_index: int = 0
                                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parse one serialized ``tf.train.SequenceExample`` into ``(context, sequences)``.

    >>> ctx, seq = hr.io.parse_single_sequence_example(rec, {"id": hr.io.FixedLenFeature([], "int64")},
    ...                                                 {"tokens": hr.io.VarLenFeature("int64")})

    As ``tf.io.parse_single_sequence_example``; the format is TensorFlow's ``example.proto``.

    Args:
        serialized: one serialized SequenceExample (``bytes``).
        context_features: specs of the context, parsed as :func:`parse_single_example` parses an Example.
        sequence_features: ``FixedLenSequenceFeature(shape, dtype)`` -> array ``(steps, *shape)`` (each step must
            hold ``prod(shape)`` values) or ``VarLenFeature(dtype)`` -> :class:`VarLenBatch` with one row per step.
        source: a file name, only for error messages.
        record_index: the record's index, only for error messages.

    Returns:
        tuple: ``(context, sequences)``, two ``{name: value}`` dicts.

    Raises:
        ValueError: as :func:`parse_single_example`; a missing feature list unless ``allow_missing=True`` (then
            zero steps; a ``VarLenFeature`` list may always be missing); a step with the wrong kind or count.
        TypeError: a ``FixedLenFeature`` among ``sequence_features``; bad specs.
    """
    context_features = check_specs(context_features or {}, "parse_single_sequence_example(context_features)")
    sequence_features = check_specs(sequence_features or {}, "parse_single_sequence_example(sequence_features)")
    ex = _message(pb.SequenceExample, serialized, record_index, source)
    context = _parse_features(ex.context.feature, context_features, record_index, source)
    lists = ex.feature_lists.feature_list
    sequences: dict[str, Any] = {}
    for key, spec in sequence_features.items():
        if isinstance(spec, FixedLenFeature):
            raise TypeError(f"sequence_features[{key!r}] is {spec!r}; feature lists need FixedLenSequenceFeature "
                            "or VarLenFeature")
        flist = lists.get(key)
        if flist is None:
            if isinstance(spec, FixedLenSequenceFeature) and not spec.allow_missing:
                raise _missing(key, spec, record_index, source)
            flist = pb.FeatureList()
        sequences[key] = _feature_list(flist, key, spec, record_index, source)
    return context, sequences


def decode(serialized: bytes) -> dict[str, np.ndarray]:
    """Every feature of a serialized Example as a 1-D array of its own kind (no spec needed).

    >>> hr.io.example.decode(hr.io.example.encode({"a": [1, 2]}))  # {'a': array([1, 2])}

    Args:
        serialized: one serialized Example (``bytes``).

    Returns:
        dict: ``{name: array}`` sorted by name: ``bytes_list`` -> object array of ``bytes``, ``int64_list`` ->
        int64, ``float_list`` -> float32; a feature with no kind set -> an empty float32 array.

    Raises:
        ValueError: bytes that are not an Example.
    """
    fmap = _message(pb.Example, serialized, 0, None).features.feature
    out: dict[str, np.ndarray] = {}
    for key in sorted(fmap):
        f = fmap[key]
        kind = f.WhichOneof("kind") or "float_list"
        out[key] = _array(getattr(f, kind).value, _KIND_DTYPE[kind])
    return out


__all__ = [
    "BytesList",
    "FixedLenFeature",
    "FixedLenSequenceFeature",
    "FloatList",
    "Int64List",
    "VarLenBatch",
    "VarLenFeature",
    "decode",
    "encode",
    "encode_sequence_example",
    "parse_example",
    "parse_single_example",
    "parse_single_sequence_example",
]
