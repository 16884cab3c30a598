"""Elements: nested structures of numpy values, with tf.data's dtype rules.

An *element* is a nested structure whose containers are ``dict``, ``tuple``, ``list`` and namedtuples and
whose leaves are numpy arrays, numpy scalars or ``bytes``. Everything a pipeline yields is normalized:

=====================================  ========================================================
input leaf                             yielded as (tf.data's rule where it has one)
=====================================  ========================================================
Python ``bool``                        ``np.bool_``
Python ``int``                         ``np.int64`` (tf.constant would give int32; headrace keeps
                                       every integer 64-bit, as ``Dataset.range`` does)
Python ``float``                       ``np.float32`` (as ``tf.constant``)
``str``                                ``bytes`` (UTF-8), as ``tf.string`` comes back from tf.data
``bytes`` / ``bytearray``              ``bytes``
numpy array / scalar                   unchanged (float32 stays float32, float64 stays float64)
numpy ``str_`` / unicode arrays        ``bytes`` / object arrays of ``bytes``
objects with ``__array__`` (torch)     ``np.asarray(obj)``
=====================================  ========================================================

``None`` is a valid component (tf.data's ``NoneTensorSpec``): it stays ``None`` through ``batch`` and
``unbatch``.

A ``list`` is a tensor, as in tf.data (whose ``nest`` does not recurse into lists): ``[1, 2, 3]`` becomes
``np.array([1, 2, 3], np.int64)`` and a list of Python floats becomes float32, in ``from_tensors`` /
``from_tensor_slices`` and inside what a function returns. The one exception is tf.data's too: a list
returned by a function *at the top level* (``map(lambda x: [x, x + 1])``) becomes a tuple, so its items
may have different shapes and dtypes (``normalize``). Batches of ``bytes`` are numpy object arrays of
``bytes`` (what tf.data's ``as_numpy_iterator`` gives for a batched ``tf.string``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

SCALAR_TYPES = frozenset({bytes, np.int64, np.int32, np.float32, np.float64, np.bool_, np.uint8, np.int8,
                          np.int16, np.uint16, np.uint32, np.uint64, np.float16})
"""Leaf types that normalization returns unchanged (the fast path of ``map``)."""
_PASS_TYPES = SCALAR_TYPES | {np.ndarray}
_PYTHON_LEAVES = frozenset({int, float, bool, str})  # converted by ``_normalize_leaf`` (the table above)
_SIZED_OBJECTS = frozenset({bytes, str})  # the items of object arrays whose length ``nbytes`` counts
SCALAR_NBYTES: dict[type, int] = {t: np.dtype(t).itemsize for t in SCALAR_TYPES if t is not bytes}
"""``nbytes`` of the fixed-size numpy scalar types, for a lookup in place of a call on hot paths."""


def is_namedtuple(x: object) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _normalize_leaf(x: Any, where: str) -> Any:
    t = type(x)
    if t is np.ndarray:
        if x.dtype.kind in "US":
            return _bytes_array(x)
        return x
    if t is bool:
        return np.bool_(x)
    if t is int:
        if not -(2**63) <= x < 2**63:
            raise ValueError(f"{where}: the integer {x} does not fit int64 (range -2**63 .. 2**63-1); "
                             "pass it as bytes or split it")
        return np.int64(x)
    if t is float:
        return np.float32(x)
    if t is str:
        return x.encode("utf-8")
    if t is bytes:
        return x
    if isinstance(x, np.generic):
        if isinstance(x, np.str_):
            return str(x).encode("utf-8")
        if isinstance(x, np.bytes_):
            return bytes(x)
        return x
    if isinstance(x, bytearray | memoryview):
        return bytes(x)
    if isinstance(x, complex):
        return np.complex128(x)
    if x is None:
        return None
    if hasattr(x, "__array__"):
        return np.asarray(x)
    raise TypeError(f"{where}: unsupported leaf of type {t.__name__}; leaves must be numpy arrays or "
                    "scalars, Python numbers, str or bytes (nest them in dict / tuple / list)")


def _bytes_array(a: np.ndarray) -> np.ndarray:
    out = np.empty(a.shape, dtype=object)
    flat_in = a.reshape(-1)
    flat_out = out.reshape(-1)
    for i, v in enumerate(flat_in.tolist()):
        flat_out[i] = v.encode("utf-8") if isinstance(v, str) else bytes(v)
    return out


def normalize(x: Any, where: str = "element") -> Any:
    """What a function returns (``map``, a source's ``__next__``), as an element: a top-level ``list``
    becomes a tuple (tf.data's rule for function results), lists below it are tensors, every leaf is
    converted by the table in the module docstring.

    Raises ``TypeError`` naming ``where`` for unsupported leaves (arbitrary objects) and ``ValueError`` for
    ragged lists.
    """
    t = type(x)
    if t is np.ndarray:
        return _bytes_array(x) if x.dtype.kind in "US" else x
    if t in _PASS_TYPES:
        return x
    if t is list:
        return tuple(normalize_tensors(v, where) for v in x)
    return normalize_tensors(x, where)


def _python_numbers_only(x: Any) -> bool:
    """Whether a (nested) list holds only Python ints / floats (its float64 result becomes float32)."""
    if isinstance(x, list | tuple):
        return all(_python_numbers_only(v) for v in x)
    return type(x) in (int, float)


def to_tensor(x: Any, where: str) -> Any:
    """Convert a leaf in *tensor position* (``from_tensors`` / ``from_tensor_slices``) to numpy."""
    if isinstance(x, list):
        try:
            arr = np.asarray(x)
        except ValueError as e:
            raise ValueError(f"{where}: a ragged list cannot be a tensor ({e}); pad it to a rectangular "
                             "shape or yield the rows from Dataset.from_generator") from e
        if arr.dtype == object:
            if all(isinstance(v, bytes | str) for v in arr.reshape(-1)):
                return _bytes_array(arr)
            raise ValueError(f"{where}: a ragged or mixed list cannot be a tensor; pad it to a rectangular "
                             "shape or yield the rows from Dataset.from_generator")
        if arr.dtype == np.float64 and _python_numbers_only(x):
            arr = arr.astype(np.float32)
        elif arr.dtype.kind in "US":
            arr = _bytes_array(arr)
        return arr
    return _normalize_leaf(x, where)


def normalize_tensors(x: Any, where: str) -> Any:
    """Normalize a structure whose ``list`` leaves are tensors (see the module docstring)."""
    t = type(x)
    if t is np.ndarray:
        return _bytes_array(x) if x.dtype.kind in "US" else x
    if t in _PASS_TYPES:
        return x
    if t in _PYTHON_LEAVES:
        return _normalize_leaf(x, where)
    if t is tuple:
        return tuple(normalize_tensors(v, where) for v in x)
    if t is dict:  # the common element (a row, a parsed Example): its scalar leaves pass without a call
        return {k: v if type(v) in SCALAR_TYPES else normalize_tensors(v, where) for k, v in x.items()}
    if isinstance(x, dict):
        return {k: normalize_tensors(v, where) for k, v in x.items()}
    if is_namedtuple(x):
        return t(*(normalize_tensors(v, where) for v in x))
    return to_tensor(x, where)


def normalize_sized(x: dict[Any, Any] | tuple[Any, ...], where: str) -> tuple[Any, int]:
    """``normalize(x)`` of a plain ``dict`` or ``tuple`` element and its ``nbytes``, in one pass over its values
    (a row, a parsed Example, ``(image, label)``: the common elements of a ``map`` inside a ``batch``). Raises as
    :func:`normalize`."""
    sizes = SCALAR_NBYTES
    ndarray = np.ndarray
    total = 0
    values = []
    for v in (x.values() if type(x) is dict else x):
        n = sizes.get(type(v))
        if n is None:
            t = type(v)
            if t is ndarray and v.dtype.kind not in "OUS":  # (strings are converted, objects summed)
                n = v.nbytes
            elif t is int or t is float:  # -> np.int64 / np.float32 (the table above)
                v = _normalize_leaf(v, where)
                n = 8 if t is int else 4
            else:
                v = normalize_tensors(v, where)
                n = nbytes(v)
        values.append(v)
        total += n
    return (dict(zip(x, values)) if type(x) is dict else tuple(values)), total


_COLUMN_DTYPES = {int: np.int64, float: np.float32, bool: np.bool_}  # the table above, a column at a time


def scalar_columns(ys: list[Any]) -> tuple[tuple[Any, ...] | None, list[np.ndarray], bool] | None:
    """The components of ``ys`` as 1-D arrays, where ``ys`` is a run of plain ``dict`` s with one set of keys (or
    plain ``tuple`` s of one length) whose values are fixed-size scalars, one type per component: numpy's (the
    array of their dtype), or Python ``int`` / ``float`` / ``bool`` (int64 / float32 / bool, as :func:`normalize`
    converts each: the same values; beside numpy values of that type too). ``(the dict keys in the first one's
    order, or None for tuples; the arrays; whether a component was of Python values)``. None for any other run
    (mixed types in a component, ``bytes``, arrays, nesting, an integer outside int64): the caller normalizes
    those one by one, raising as ``normalize``."""
    first = ys[0]
    t = type(first)
    if (t is not dict and t is not tuple) or not first or set(map(type, ys)) != {t} or set(map(len, ys)) != {
            len(first)}:
        return None
    names: tuple[Any, ...] | None = None
    columns: list[Any]
    if t is dict:
        names = tuple(first)
        try:  # (as many keys as the first, every one of its keys: the same keys)
            columns = [list(map(itemgetter(k), ys)) for k in names]
        except KeyError:
            return None
    else:
        columns = list(zip(*ys))
    arrays: list[np.ndarray] = []
    python = False
    for col in columns:
        kinds = set(map(type, col))
        kind = next(iter(kinds)) if len(kinds) == 1 else next((p for p in kinds if p in _COLUMN_DTYPES), None)
        if kind is None or len(kinds) > 2 or (len(kinds) == 2 and kinds != {kind, _COLUMN_DTYPES[kind]}):
            return None  # (Python values beside the numpy type they normalize to are one column)
        dtype = kind if kind in SCALAR_NBYTES else _COLUMN_DTYPES.get(kind)
        if dtype is None:
            return None
        python = python or kind in _COLUMN_DTYPES
        try:
            arrays.append(np.fromiter(col, dtype, len(col)))
        except OverflowError:  # an int outside int64: normalize names it
            return None
    return names, arrays, python


def scalar_row(y: Any) -> bool:
    """Whether ``y`` (normalized) is a flat ``dict`` / ``tuple`` of fixed-size numpy scalars (what
    :func:`scalar_columns` takes a run of)."""
    return (type(y) is dict or type(y) is tuple) and all(
        type(v) in SCALAR_NBYTES for v in (y.values() if type(y) is dict else y))


def normalize_rows(ys: list[Any]) -> tuple[list[Any], int, int] | None:
    """``normalize`` of each of ``ys``, a run of flat rows of scalars (:func:`scalar_columns`; None for another
    run), a column at a time: ``(the normalized elements, their bytes, the largest)``."""
    got = scalar_columns(ys)
    if got is None:
        return None
    names, arrays, python = got
    if python:  # (rebuilt from the arrays' values: numpy scalars)
        rows = zip(*map(list, arrays))
        ys = list(map(dict, map(zip, repeat(names), rows))) if names is not None else list(rows)
    size = sum(a.itemsize for a in arrays)
    return ys, size * len(ys), size


def flatten(x: Any) -> list[Any]:
    """Leaves of ``x`` in a fixed order (dict keys sorted, like ``tf.nest``)."""
    out: list[Any] = []
    _flatten_into(x, out)
    return out


def _flatten_into(x: Any, out: list[Any]) -> None:
    if isinstance(x, dict):
        for k in sorted(x):
            _flatten_into(x[k], out)
    elif isinstance(x, tuple | list):
        for v in x:
            _flatten_into(v, out)
    else:
        out.append(x)


def pack_as(structure: Any, leaves: Iterable[Any]) -> Any:
    """Inverse of :func:`flatten`: put ``leaves`` into the shape of ``structure``."""
    it = iter(leaves)
    result = _pack(structure, it)
    return result


def _pack(s: Any, it: Any) -> Any:
    if isinstance(s, dict):
        vals = {k: _pack(s[k], it) for k in sorted(s)}
        return {k: vals[k] for k in s}
    if is_namedtuple(s):
        return type(s)(*(_pack(v, it) for v in s))
    if isinstance(s, tuple):
        return tuple(_pack(v, it) for v in s)
    if isinstance(s, list):
        return [_pack(v, it) for v in s]
    return next(it)


def structure_signature(x: Any) -> Any:
    """A hashable description of the containers of ``x`` (leaves replaced by ``None``)."""
    if isinstance(x, dict):
        return ("dict", tuple((k, structure_signature(x[k])) for k in sorted(x)))
    if isinstance(x, tuple | list):
        return (type(x).__name__, tuple(structure_signature(v) for v in x))
    return None


def map_structure(fn: Callable[..., Any], *structures: Any) -> Any:
    """Apply ``fn`` leaf-wise over structures of the same shape."""
    first = structures[0]
    flats = [flatten(s) for s in structures]
    n = len(flats[0])
    for s, f in zip(structures[1:], flats[1:]):
        if len(f) != n or structure_signature(s) != structure_signature(first):
            raise ValueError("the structures do not match: "
                             f"{describe(first)} vs {describe(s)}")
    return pack_as(first, [fn(*leaves) for leaves in zip(*flats)])


def describe(x: Any) -> str:
    """A short human description of an element's structure, shapes and dtypes (for error messages)."""
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in x.items()) + "}"
    if isinstance(x, tuple | list):
        inner = ", ".join(describe(v) for v in x)
        return f"({inner})" if isinstance(x, tuple) else f"[{inner}]"
    if isinstance(x, np.ndarray):
        return f"{x.dtype}{list(x.shape)}"
    if isinstance(x, np.generic):
        return f"{x.dtype}[]"
    if isinstance(x, bytes):
        return "bytes"
    return type(x).__name__


def nbytes(x: Any) -> int:
    """Bytes an element holds: numpy ``nbytes`` plus the lengths of ``bytes`` / ``str`` leaves.

    Object arrays count 8 bytes per slot plus the length of each ``bytes`` item.
    """
    t = type(x)
    n = SCALAR_NBYTES.get(t)
    if n is not None:
        return n
    if t is np.ndarray:
        if x.dtype.hasobject:
            items = x.reshape(-1).tolist()
            if set(map(type, items)) <= _SIZED_OBJECTS:  # (a column of strings: summed in C)
                return x.nbytes + sum(map(len, items))
            return x.nbytes + sum(len(v) for v in items if isinstance(v, bytes | str))
        return x.nbytes
    if t is bytes:
        return len(x)
    if t is tuple or t is list:
        return _nbytes_of(x)
    if t is dict:
        return _nbytes_of(x.values())
    if isinstance(x, np.generic):
        return x.nbytes
    if isinstance(x, tuple):
        return sum(nbytes(v) for v in x)
    if isinstance(x, dict):
        return sum(nbytes(v) for v in x.values())
    if isinstance(x, str):
        return len(x)
    return 0


def _nbytes_of(values: Iterable[Any]) -> int:
    """The sum of ``nbytes`` over ``values``, fixed-size scalars looked up without a call (rows, Examples)."""
    total = 0
    sizes = SCALAR_NBYTES
    for v in values:
        n = sizes.get(type(v))
        total += nbytes(v) if n is None else n
    return total
