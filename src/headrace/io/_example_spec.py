"""Feature specs for parsing tf.train.Example: ``FixedLenFeature``, ``VarLenFeature``,
``FixedLenSequenceFeature`` (TensorFlow's names and arguments), validated once at construction.

dtypes: ``"string"`` (``bytes``; numpy object arrays), ``"int64"``, ``"float32"``; numpy dtypes and
types (``np.int64``, ``np.float32``, ``object``, ``bytes``, ``str``) and objects with a ``.name`` of one of
those (``tf.int64``) are accepted.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

STRING, INT64, FLOAT32 = "string", "int64", "float32"
LIST_FIELD = {STRING: "bytes_list", INT64: "int64_list", FLOAT32: "float_list"}
NP_DTYPE: dict[str, Any] = {STRING: object, INT64: np.int64, FLOAT32: np.float32}
_ALIASES = {"string": STRING, "bytes": STRING, "str": STRING, "object": STRING, "int64": INT64,
            "float32": FLOAT32, "float": FLOAT32}


def normalize_dtype(dtype: Any, where: str) -> str:
    """``"string"`` / ``"int64"`` / ``"float32"`` for any accepted spelling; ``ValueError`` otherwise."""
    name: Any = dtype
    if dtype in (bytes, str, object):
        name = dtype.__name__
    elif (isinstance(dtype, type) and issubclass(dtype, np.generic)) or isinstance(dtype, np.dtype):
        name = np.dtype(dtype).name
    elif not isinstance(dtype, str):
        name = getattr(dtype, "name", None)
    out = _ALIASES.get(name) if isinstance(name, str) else None
    if out is None or (name == "object" and dtype is not object and np.dtype(dtype) != np.dtype(object)):
        raise ValueError(f"{where}: dtype {dtype!r} is not supported; tf.train.Example holds only 'string' "
                         "(bytes), 'int64' and 'float32' (np.int64, np.float32 and object are accepted too)")
    return out


def normalize_shape(shape: Any, where: str) -> tuple[int, ...]:
    if isinstance(shape, int | np.integer) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"{where}: shape {shape!r} must be a tuple or list of ints (e.g. [] or [4])") from None
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 0:
            raise ValueError(f"{where}: shape {list(dims)} must hold ints >= 0 (unknown dimensions are only "
                             "possible with VarLenFeature or FixedLenSequenceFeature)")
    return tuple(int(d) for d in dims)


def fill_array(value: Any, dtype: str, shape: tuple[int, ...], where: str) -> np.ndarray:
    """``value`` (scalar or array-like with exactly ``prod(shape)`` elements) as an array of ``shape``."""
    size = math.prod(shape)
    if dtype == STRING:
        items = [v.encode() if isinstance(v, str) else v for v in np.asarray(value, dtype=object).reshape(-1).tolist()]
        if not all(isinstance(v, bytes) for v in items):
            raise TypeError(f"{where}: a 'string' default_value must hold bytes or str, got {value!r}")
        flat: Any = items
    else:
        try:
            flat = np.asarray(value).astype(NP_DTYPE[dtype], casting="same_kind" if dtype == FLOAT32 else
                                            "safe").reshape(-1)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{where}: default_value {value!r} cannot be {dtype} ({e})") from None
    if len(flat) == 1 and size != 1:
        flat = list(flat) * size
    if len(flat) != size:
        raise ValueError(f"{where}: default_value has {len(flat)} values but shape {list(shape)} needs "
                         f"{size}; pass a scalar or exactly {size} values")
    out = np.empty(size, dtype=NP_DTYPE[dtype])
    out[:] = flat
    return out.reshape(shape)


class FixedLenFeature:
    """A feature with exactly ``prod(shape)`` values in every record (``tf.io.FixedLenFeature``).

    >>> spec = {"label": hr.io.FixedLenFeature([], "int64"), "box": hr.io.FixedLenFeature([4], "float32", 0.0)}

    Args:
        shape: the value's shape (``[]`` for a scalar, ``[4]``, ``[2, 3]``...); values fill it row-major.
        dtype: ``"string"``, ``"int64"`` or ``"float32"``.
        default_value: used where the feature is missing (a scalar is broadcast); ``None`` makes the
            feature required (missing -> ``ValueError``).

    Raises:
        ValueError: an unsupported dtype, a dimension that is not an int >= 0, or a default with the wrong
            number of values.
        TypeError: a shape that is not iterable (nor an int), or a default that cannot be the dtype.
    """

    __slots__ = ("default", "default_value", "dtype", "field", "scalar", "shape", "size")

    def __init__(self, shape: Any, dtype: Any, default_value: Any = None) -> None:
        where = f"FixedLenFeature(shape={shape!r}, dtype={dtype!r})"
        self.shape = normalize_shape(shape, where)
        self.dtype = normalize_dtype(dtype, where)
        self.default_value = default_value
        self.size = math.prod(self.shape)
        self.scalar = self.shape == ()
        self.field = LIST_FIELD[self.dtype]
        self.default = None if default_value is None else fill_array(default_value, self.dtype, self.shape, where)

    def __repr__(self) -> str:
        extra = "" if self.default_value is None else f", default_value={self.default_value!r}"
        return f"FixedLenFeature(shape={list(self.shape)}, dtype={self.dtype!r}{extra})"


class VarLenFeature:
    """A feature with any number of values per record (``tf.io.VarLenFeature``).

    >>> spec = {"tokens": hr.io.VarLenFeature("int64")}

    ``parse_single_example`` gives a 1-D array of the values; ``parse_example`` gives a
    :class:`VarLenBatch` ``(values, row_lengths)``. A missing feature has zero values.

    Args:
        dtype: ``"string"``, ``"int64"`` or ``"float32"``.

    Raises:
        ValueError: an unsupported dtype.
    """

    __slots__ = ("dtype", "field")

    def __init__(self, dtype: Any) -> None:
        self.dtype = normalize_dtype(dtype, f"VarLenFeature(dtype={dtype!r})")
        self.field = LIST_FIELD[self.dtype]

    def __repr__(self) -> str:
        return f"VarLenFeature(dtype={self.dtype!r})"


class FixedLenSequenceFeature:
    """A feature holding a sequence of items of ``shape`` (``tf.io.FixedLenSequenceFeature``).

    >>> spec = {"frames": hr.io.FixedLenSequenceFeature([3], "float32", allow_missing=True)}

    In an Example the values of one feature are split into ``n`` items of ``shape``; in a
    SequenceExample's ``feature_lists`` each step holds one item. Results have shape ``(n, *shape)``;
    ``parse_example`` pads every record to the batch's longest sequence with ``default_value``.

    Args:
        shape: one item's shape (at least one value).
        dtype: ``"string"``, ``"int64"`` or ``"float32"``.
        allow_missing: ``False`` makes a missing feature an error; ``True`` gives zero items.
        default_value: the padding (default ``0`` / ``b""``).

    Raises:
        ValueError: an unsupported dtype, a dimension that is not an int >= 0, or a shape holding no value.
        TypeError: a shape that is not iterable (nor an int), or a default that cannot be the dtype.
    """

    __slots__ = ("allow_missing", "default", "default_value", "dtype", "field", "shape", "size")

    def __init__(self, shape: Any, dtype: Any, allow_missing: bool = False, default_value: Any = None) -> None:
        where = f"FixedLenSequenceFeature(shape={shape!r}, dtype={dtype!r})"
        self.shape = normalize_shape(shape, where)
        self.dtype = normalize_dtype(dtype, where)
        self.allow_missing = bool(allow_missing)
        self.default_value = default_value
        self.size = math.prod(self.shape)
        if self.size == 0:
            raise ValueError(f"{where}: every item must hold at least one value; shape {list(self.shape)} "
                             "holds none")
        self.field = LIST_FIELD[self.dtype]
        pad = (b"" if self.dtype == STRING else 0) if default_value is None else default_value
        self.default = fill_array(pad, self.dtype, (), where)[()]

    def __repr__(self) -> str:
        return (f"FixedLenSequenceFeature(shape={list(self.shape)}, dtype={self.dtype!r}, "
                f"allow_missing={self.allow_missing})")


class VarLenBatch(NamedTuple):
    """Variable-length values of a batch, as ``parse_example`` returns them for a ``VarLenFeature``.

    >>> hr.io.VarLenBatch(np.array([1, 2, 3]), np.array([2, 1])).to_list()  # [array([1, 2]), array([3])]

    ``values``: 1-D, all records' values concatenated in order; ``row_lengths``: 1-D int64, the number of values
    of each record (``sum == len(values)``).
    """

    values: np.ndarray
    row_lengths: np.ndarray

    def row_splits(self) -> np.ndarray:
        """Offsets of the rows in ``values``.

        Returns:
            numpy.ndarray: int64 ``[0, l0, l0+l1, ...]`` (length ``len(row_lengths) + 1``): row ``i`` is
            ``values[splits[i]:splits[i+1]]``.
        """
        out = np.zeros(len(self.row_lengths) + 1, dtype=np.int64)
        np.cumsum(self.row_lengths, out=out[1:])
        return out

    def to_list(self) -> list[np.ndarray]:
        """One array per record.

        Returns:
            list[numpy.ndarray]: ``len(row_lengths)`` 1-D arrays (views of ``values``).
        """
        s = self.row_splits()
        return [self.values[s[i]:s[i + 1]] for i in range(len(self.row_lengths))]


Spec = FixedLenFeature | VarLenFeature | FixedLenSequenceFeature


def check_specs(features: Any, where: str) -> dict[str, Spec]:
    if not isinstance(features, dict):
        raise TypeError(f"{where}: features must be a dict of feature name -> FixedLenFeature / VarLenFeature / "
                        f"FixedLenSequenceFeature, got {type(features).__name__}")
    for key, spec in features.items():
        if not isinstance(spec, FixedLenFeature | VarLenFeature | FixedLenSequenceFeature):
            raise TypeError(f"{where}: features[{key!r}] is {spec!r}; use FixedLenFeature, VarLenFeature or "
                            "FixedLenSequenceFeature")
    return features
