"""Building tf.train.Example / SequenceExample bytes from Python and numpy values.

Kind inference (one feature's value):

==========================================  ===============
value                                       list kind
==========================================  ===============
``bytes`` / ``str`` (UTF-8) / list of them  ``bytes_list``
``bool`` / ``int`` / integer arrays         ``int64_list``
``float`` / floating arrays / lists mixing  ``float_list`` (stored as float32)
ints and floats
``BytesList`` / ``Int64List`` /             that kind, explicitly (for empty lists and other
``FloatList`` wrappers                      ambiguous values)
==========================================  ===============

Arrays are flattened row-major. Keys are written sorted, so the same dict always gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._proto import messages as pb


@dataclass(frozen=True)
class BytesList:
    """Explicitly a ``bytes_list`` (``str`` items are UTF-8 encoded).

    >>> hr.io.example.encode({"tags": hr.io.example.BytesList([])})  # an empty bytes_list
    """

    values: Sequence[Any]


@dataclass(frozen=True)
class Int64List:
    """Explicitly an ``int64_list`` (values must fit int64).

    >>> hr.io.example.encode({"ids": hr.io.example.Int64List([])})  # an empty int64_list
    """

    values: Sequence[Any]


@dataclass(frozen=True)
class FloatList:
    """Explicitly a ``float_list`` (values are rounded to float32).

    >>> hr.io.example.encode({"x": hr.io.example.FloatList([1, 2])})  # floats, not int64
    """

    values: Sequence[Any]


_WRAPPER_FIELD = {BytesList: "bytes_list", Int64List: "int64_list", FloatList: "float_list"}


def _as_bytes(v: Any, key: str) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, bytearray | memoryview | np.bytes_):
        return bytes(v)
    raise TypeError(f"feature {key!r}: {v!r} ({type(v).__name__}) is not bytes or str")


def _infer(value: Any, key: str) -> tuple[str, list[Any]]:
    """(list field, Python values) for one feature's value."""
    wrapper = _WRAPPER_FIELD.get(type(value))
    if wrapper is not None:
        vals = value.values.reshape(-1).tolist() if isinstance(value.values, np.ndarray) else list(value.values)
        return wrapper, ([_as_bytes(v, key) for v in vals] if wrapper == "bytes_list" else vals)
    if isinstance(value, bytes | str | bytearray | memoryview | np.bytes_ | np.str_):
        return "bytes_list", [_as_bytes(value.item() if isinstance(value, np.str_) else value, key)]
    if isinstance(value, bool | int | np.integer | np.bool_):
        return "int64_list", [int(value)]
    if isinstance(value, float | np.floating):
        return "float_list", [float(value)]
    if isinstance(value, np.ndarray):
        kind = value.dtype.kind
        if kind in "iub":
            return "int64_list", value.reshape(-1).tolist()
        if kind == "f":
            return "float_list", value.reshape(-1).tolist()
        if kind in "SUO":
            return "bytes_list", [_as_bytes(v, key) for v in value.reshape(-1).tolist()]
        raise TypeError(f"feature {key!r}: arrays of dtype {value.dtype} cannot be stored; use integer, "
                        "floating or bytes arrays")
    if isinstance(value, list | tuple):
        if not value:
            raise ValueError(f"feature {key!r}: an empty list has no kind; wrap it: Int64List([]), "
                             "FloatList([]) or BytesList([])")
        if all(isinstance(v, bytes | str | bytearray | np.bytes_) for v in value):
            return "bytes_list", [_as_bytes(v, key) for v in value]
        if all(isinstance(v, bool | int | np.integer) for v in value):
            return "int64_list", [int(v) for v in value]
        if all(isinstance(v, bool | int | float | np.integer | np.floating) for v in value):
            return "float_list", [float(v) for v in value]
        raise TypeError(f"feature {key!r}: the list {value!r} mixes kinds; a feature holds only bytes, only "
                        "ints or only floats")
    raise TypeError(f"feature {key!r}: cannot store {type(value).__name__} {value!r}; use bytes/str, int, float, "
                    "lists or numpy arrays of them, or BytesList / Int64List / FloatList")


def _fill(feature: Any, value: Any, key: str) -> None:
    field, vals = _infer(value, key)
    lst = getattr(feature, field)
    try:
        lst.value.extend(vals)
    except (ValueError, TypeError, OverflowError) as e:
        raise ValueError(f"feature {key!r}: cannot store {vals[:5]!r}... as {field} ({e}); int64 values must "
                         "lie in [-2**63, 2**63-1]") from None
    if not vals:
        lst.SetInParent()  # keep the (empty) kind


def _fill_features(fmap: Any, features: Mapping[str, Any], where: str) -> None:
    if not isinstance(features, Mapping):
        raise TypeError(f"{where}: expected a dict of feature name -> value, got {type(features).__name__}")
    for key in sorted(features):
        if not isinstance(key, str):
            raise TypeError(f"{where}: feature names must be str, got {key!r}")
        _fill(fmap[key], features[key], key)


def encode(features: Mapping[str, Any]) -> bytes:
    """Serialize a ``tf.train.Example`` from ``{name: value}`` (kinds inferred, see the module docstring).

    >>> record = hr.io.example.encode({"label": 3, "image": jpeg_bytes, "box": np.zeros(4, np.float32)})

    Keys are written sorted, so the same dict always gives the same bytes (TensorFlow's ``example.proto``).

    Args:
        features: ``{name (str): value}``; a value is bytes / str, int / bool, float, a list or array of one of
            them (flattened row-major), or a ``BytesList`` / ``Int64List`` / ``FloatList``.

    Returns:
        bytes: the serialized Example.

    Raises:
        TypeError: not a dict, a non-str name, or a value that cannot be stored (naming the feature).
        ValueError: an empty list without a wrapper, or values that do not fit the kind (naming the feature).
    """
    ex = pb.Example()
    _fill_features(ex.features.feature, features, "encode")
    return ex.SerializeToString(deterministic=True)


def encode_sequence_example(context: Mapping[str, Any] | None = None,
                            feature_lists: Mapping[str, Sequence[Any]] | None = None) -> bytes:
    """Serialize a ``tf.train.SequenceExample``.

    >>> record = hr.io.example.encode_sequence_example({"id": 7}, {"tokens": [[1, 2], [3]]})

    Args:
        context: ``{name: value}`` as in :func:`encode`.
        feature_lists: maps a name to a sequence of steps, each step a value as in :func:`encode` (an array's
            first axis is steps).

    Returns:
        bytes: the serialized SequenceExample.

    Raises:
        TypeError: as :func:`encode`.
        ValueError: as :func:`encode`.
    """
    ex = pb.SequenceExample()
    _fill_features(ex.context.feature, context or {}, "encode_sequence_example(context)")
    lists = feature_lists or {}
    for key in sorted(lists):
        fl = ex.feature_lists.feature_list[key]
        for step in lists[key]:
            _fill(fl.feature.add(), step, key)
    return ex.SerializeToString(deterministic=True)
