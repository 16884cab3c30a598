"""Stacking elements into batches and padding them (shared by ``batch``, ``padded_batch``, ``unbatch``).

Batching rules (tf.data's): every leaf gains a leading axis of the batch size; leaves must agree in
structure, dtype and shape (``padded_batch`` pads shapes); ``bytes`` leaves become object arrays of
``bytes``; numpy scalars become 1-D arrays of their dtype; ``None`` components stay ``None``.

Output buffers (:class:`BufferPool`): a large batched leaf (>= ``BufferPool.MIN_BYTES``) is written into a
buffer recycled from an earlier batch of the same shape and dtype once nothing outside the pool refers
to that earlier batch any more (CPython reference count: no user variable, view, tensor or buffer
holds it), else into a fresh one. The values are the same as ``np.stack``'s; what is saved is the kernel
zero-filling and page-faulting a fresh multi-megabyte block per batch (about half the cost of stacking
64 float32 224x224x3 images). At most ``BufferPool.SIZE`` buffers per leaf are kept; buffers in use are
charged to the memory budget by the stages holding the batches, idle ones are not, so each stacking frees
every idle buffer but the one it reuses (between two stackings, what the consumer has released since).
A pool only recycles leaves of at most ``max_bytes``, so the idle buffer it may keep between two stackings
stays a small part of the budget. A pool bound to an account (``lend_from``: a sequential ``batch``) lends
large leaves of any size instead and charges them while idle (``headrace._engine.batch_buffers``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from .._memory import StageAccount
from .._spec import TensorShape
from .._structure import describe, flatten, pack_as, structure_signature
from .._sync import Lock as TimedLock
from .batch_buffers import SpareBuffers

_CONTAINERS = (dict, tuple, list)


def _is_structure(x: Any) -> bool:
    return isinstance(x, dict | tuple | list)


class BufferPool:
    """Recycled output buffers for large batched leaves (see the module docstring). Thread-safe."""

    MIN_BYTES = 1 << 20
    SIZE = 4

    def __init__(self, max_bytes: int | None = None) -> None:
        self._lock = TimedLock("batch buffer pool")
        self._buffers: dict[int, list[np.ndarray]] = {}
        self.max_bytes = max_bytes
        self.spares: SpareBuffers | None = None

    def lend_from(self, account: StageAccount) -> SpareBuffers:
        """From now on, lend large leaves of any size and take them back charged to ``account`` while idle
        (``headrace._engine.batch_buffers``) instead of the reference-count recycling above."""
        self.spares = SpareBuffers(account)
        return self.spares

    def stack(self, col: Sequence[Any], k: int) -> np.ndarray | None:
        """``np.stack(col)`` into a recycled buffer; None when ``col`` is not uniform large arrays."""
        f = col[0]
        shape, dtype = f.shape, f.dtype
        total = f.nbytes * len(col)
        spares = self.spares
        if total < self.MIN_BYTES or dtype.hasobject or (
                spares is None and self.max_bytes is not None and total > self.max_bytes):
            return None
        for v in col:
            if type(v) is not np.ndarray or v.shape != shape or v.dtype != dtype:
                return None  # the plain path stacks it or raises its clear error
        if spares is not None:
            return spares.lend(k, np.stack(col, out=spares.take(k, (len(col), *shape), dtype)))
        out = self._take(k, (len(col), *shape), dtype)
        return np.stack(col, out=out)

    def _take(self, k: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        with self._lock:
            kept = self._buffers.setdefault(k, [])
            # 2 references: the list's and getrefcount's argument; more means someone still holds it.
            idle = [b for b in kept if sys.getrefcount(b) == 3]  # + this comprehension's loop variable
            reuse = next((b for b in idle if b.shape == shape and b.dtype == dtype), None)
            # Idle buffers are outside the memory budget: keep none beyond the one reused now.
            kept[:] = [b for b in kept if not any(b is i for i in idle) or b is reuse]
            del idle
            if reuse is not None:
                return reuse
            out = np.empty(shape, dtype)
            if len(kept) < self.SIZE:
                kept.append(out)
            return out


def stack(items: Sequence[Any], stage: str, pool: BufferPool | None = None) -> Any:
    """Stack ``items`` (elements of one structure) into one batch element (``pool``: recycled buffers)."""
    first = items[0]
    if not _is_structure(first):
        return _stack_leaf(items, stage, 0, pool)
    columns = _columns(items, stage)
    return pack_as(first, [_stack_leaf(col, stage, k, pool) for k, col in enumerate(columns)])


def _flat_columns(items: Sequence[Any], first: Any) -> list[list[Any]] | None:
    """The columns of a batch of flat elements - plain ``dict`` s with ``first``'s keys, or plain ``tuple`` s of
    ``first``'s length, whose values are all leaves - in ``flatten``'s order (dict keys sorted), gathered in C
    loops (rows of a table, parsed Examples, ``(image, label)``); None for any other batch (the general path
    below, which names a mismatch)."""
    t = type(first)
    if t is dict:
        if set(map(type, items)) != {dict} or set(map(len, items)) != {len(first)}:
            return None
        order = sorted(first)
        try:  # (the same number of keys, and every one of the first's: the same keys)
            if len(order) == 1:
                columns = [[x[order[0]] for x in items]]
            else:
                columns = [list(col) for col in zip(*map(itemgetter(*order), items))]
        except KeyError:
            return None
    elif t is tuple:
        if set(map(type, items)) != {tuple} or set(map(len, items)) != {len(first)}:
            return None
        columns = [list(col) for col in zip(*items)]
    else:
        return None
    for col in columns:
        if any(issubclass(c, _CONTAINERS) for c in set(map(type, col))):
            return None  # a nested element: the general path flattens it (and names a mismatch)
    return columns


def _columns(items: Sequence[Any], stage: str) -> list[list[Any]]:
    first = items[0]
    columns = _flat_columns(items, first)
    if columns is not None:
        return columns
    flat = [flatten(x) for x in items]
    shape = structure_signature(first)
    for i, x in enumerate(items):
        if structure_signature(x) != shape:
            raise ValueError(f"{stage}: element {i} has structure {describe(x)} but element 0 has "
                             f"{describe(first)}; every element of a dataset must have the same structure")
    return [list(col) for col in zip(*flat)]


def _stack_none(col: Sequence[Any], stage: str, k: int) -> np.ndarray | None:
    """A component that is None in every element stacks to None; ``TypeError`` where another element has one."""
    bad = next((i for i, v in enumerate(col) if v is not None), None)
    if bad is not None:
        raise TypeError(f"{stage}: component {k} is None in element 0 but {describe(col[bad])} in element {bad}")
    return None


def _stack_leaf(col: Sequence[Any], stage: str, k: int, pool: BufferPool | None = None) -> np.ndarray | None:
    f = col[0]
    if f is None:
        return _stack_none(col, stage, k)
    if pool is not None and type(f) is np.ndarray:
        out = pool.stack(col, k)
        if out is not None:
            return out
    if type(f) is bytes:
        if set(map(type, col)) != {bytes}:  # (checked and stored in C loops: text lines come 1,024 at a time)
            i = next(i for i, v in enumerate(col) if type(v) is not bytes)
            raise TypeError(f"{stage}: component {k} of element {i} is {describe(col[i])}, element 0 has bytes")
        out = np.empty(len(col), dtype=object)
        out[:] = col
        return out
    try:
        out = np.stack(col) if type(f) is np.ndarray else np.array(col)
    except ValueError as e:
        shapes = [np.shape(v) for v in col]
        bad = next(i for i, s in enumerate(shapes) if s != shapes[0])
        raise ValueError(
            f"{stage}: cannot batch elements with different shapes in component {k}: element 0 has shape "
            f"{shapes[0]} and element {bad} has shape {shapes[bad]}; use padded_batch() or make the "
            "shapes equal (e.g. resize) before batching") from e
    fdt = getattr(f, "dtype", None)
    if fdt is not None and out.dtype != fdt:
        bad = next(i for i, v in enumerate(col) if getattr(v, "dtype", None) != fdt)
        raise TypeError(f"{stage}: component {k} has dtype {fdt} in element 0 but "
                        f"{getattr(col[bad], 'dtype', type(col[bad]).__name__)} in element {bad}; cast the "
                        "elements to one dtype before batching")
    return out


def pad_and_stack(items: Sequence[Any], padded_shapes: Any, padding_values: Any, stage: str) -> Any:
    """Stack ``items`` after padding each component to ``padded_shapes`` (None/-1 dims: batch max)."""
    first = items[0]
    columns = _columns(items, stage) if _is_structure(first) else [list(items)]
    shapes = _per_leaf(padded_shapes, first, len(columns), "padded_shapes", stage, is_shape=True)
    values = _per_leaf(padding_values, first, len(columns), "padding_values", stage, is_shape=False)
    stacked = [_stack_none(col, stage, k) if col[0] is None else _pad_leaf(col, shapes[k], values[k], stage, k)
               for k, col in enumerate(columns)]
    return pack_as(first, stacked) if _is_structure(first) else stacked[0]


def _is_shape_like(x: Any) -> bool:
    return isinstance(x, TensorShape) or (
        isinstance(x, tuple | list) and all(v is None or isinstance(v, int | np.integer) for v in x))


def _as_shape(x: Any) -> tuple[int | None, ...] | None:
    return TensorShape(x).dims


def _per_leaf(spec: Any, first: Any, n: int, what: str, stage: str, *, is_shape: bool) -> list[Any]:
    if spec is None:
        return [None] * n
    if is_shape and isinstance(spec, int | np.integer):
        spec = (int(spec),)
    if is_shape and _is_shape_like(spec) and not _is_structure(first):
        return [_as_shape(spec)]
    if not is_shape and not _is_structure(spec):
        return [spec] * n
    if is_shape:
        leaves = _flatten_shapes(spec)
    else:
        leaves = flatten(spec)
    if len(leaves) != n:
        raise ValueError(f"{stage}: {what} has {len(leaves)} components but the elements have {n} "
                         f"({describe(first)}); give one entry per component")
    return leaves


def _flatten_shapes(spec: Any) -> list[Any]:
    """One shape per component (``None``: the batch's largest sizes; a bare int ``n`` means ``[n]``)."""
    if isinstance(spec, int | np.integer):
        return [(int(spec),)]
    if _is_shape_like(spec):
        return [_as_shape(spec)]
    if isinstance(spec, dict):
        return [s for k in sorted(spec) for s in _flatten_shapes(spec[k])]
    if isinstance(spec, tuple | list):
        return [s for v in spec for s in _flatten_shapes(v)]
    if spec is None:
        return [None]
    raise TypeError(f"padded_shapes: {spec!r} is not a shape; use a tuple/list of ints and None")


def _pad_leaf(col: Sequence[Any], shape: Any, value: Any, stage: str, k: int) -> np.ndarray:
    f = col[0]
    is_bytes = type(f) is bytes or (isinstance(f, np.ndarray) and f.dtype == object)
    arrays = [np.asarray(v, dtype=object) if is_bytes else np.asarray(v) for v in col]
    rank = arrays[0].ndim
    for i, a in enumerate(arrays):
        if a.ndim != rank:
            raise ValueError(f"{stage}: component {k} has rank {rank} in element 0 but {a.ndim} in element {i}")
    max_shape = tuple(max(a.shape[d] for a in arrays) for d in range(rank))
    if shape is None:
        target = max_shape
    else:
        if len(shape) != rank:
            raise ValueError(f"{stage}: padded shape {tuple(shape)} for component {k} has rank {len(shape)} "
                             f"but the elements have rank {rank}")
        target = tuple(m if (s is None or s == -1) else int(s) for s, m in zip(shape, max_shape))
        for d, (t, m) in enumerate(zip(target, max_shape)):
            if m > t:
                raise ValueError(f"{stage}: component {k} has size {m} in dimension {d}, larger than the padded "
                                 f"shape {tuple(shape)}; raise padded_shapes or use None to pad to the batch max")
    dtype = object if is_bytes else arrays[0].dtype
    value = padding_scalar(value, np.dtype(dtype), f"{stage}: padding_values for component {k}")
    out = np.empty((len(arrays), *target), dtype=dtype)
    out[...] = value
    for i, a in enumerate(arrays):
        if not is_bytes and a.dtype != dtype:
            raise TypeError(f"{stage}: component {k} has dtype {dtype} in element 0 but {a.dtype} in element {i}")
        where: tuple[Any, ...] = (i, *[slice(0, s) for s in a.shape])
        out[where] = a
    return out


def padding_scalar(value: Any, dtype: np.dtype, where: str) -> Any:
    """A padding value for a component of ``dtype``: ``None`` gives 0 / ``b""``; a ``str`` becomes ``bytes``.

    As tf.data (which converts the value and requires the component's dtype), a string pads only string
    components, a number only numeric ones, a numpy scalar only its own dtype; Python ``int`` / ``float``
    literals pad any integer / floating component (tf.data gives them the component's width in practice:
    ``tf.constant(-1)`` is int32, headrace's literal is int64). Raises ``TypeError`` / ``ValueError``.
    """
    is_string = dtype.kind == "O"
    if value is None:
        return b"" if is_string else dtype.type(0)
    if isinstance(value, np.ndarray):
        if value.ndim != 0:
            raise ValueError(f"{where}: padding values must be scalars, got an array of shape {value.shape}")
        value = value[()]
    if isinstance(value, str | np.str_):
        value = str(value).encode("utf-8")
    if isinstance(value, bytes | np.bytes_):
        if not is_string:
            raise TypeError(f"{where}: the string {value!r} cannot pad a component of dtype {dtype}")
        return bytes(value)
    if is_string:
        raise TypeError(f"{where}: {value!r} cannot pad a string component; use a str or bytes value")
    if isinstance(value, list | tuple):
        raise ValueError(f"{where}: padding values must be scalars, got {value!r}")
    if isinstance(value, np.generic) and value.dtype != dtype:
        raise TypeError(f"{where}: a padding value of dtype {value.dtype} for a component of dtype {dtype}; "
                        f"use np.{dtype.name}(...) or a Python number")
    if isinstance(value, bool) and dtype != np.bool_:
        raise TypeError(f"{where}: the bool {value!r} cannot pad a component of dtype {dtype}")
    if isinstance(value, float) and dtype.kind in "iub":
        raise TypeError(f"{where}: the float {value!r} cannot pad a component of dtype {dtype}")
    if isinstance(value, int | float | bool | np.generic):
        return dtype.type(value)
    raise TypeError(f"{where}: {value!r} ({type(value).__name__}) is not a padding value; use a number or a string")


def unstack(batch: Any, stage: str) -> tuple[int, list[Any]]:
    """Number of rows of a batch element and its leaves, checking every leaf has that many rows (``None``
    leaves have none and stay ``None`` in every row)."""
    leaves = flatten(batch)
    if not any(leaf is not None for leaf in leaves):
        raise ValueError(f"{stage}: the element has no components to unbatch")
    sizes = []
    for leaf in leaves:
        if leaf is None:
            continue
        if not isinstance(leaf, np.ndarray) or leaf.ndim == 0:
            raise ValueError(f"{stage}: cannot unbatch a scalar component ({describe(leaf)}) in "
                             f"{describe(batch)}; every component needs a leading batch dimension")
        sizes.append(leaf.shape[0])
    if any(s != sizes[0] for s in sizes):
        raise ValueError(f"{stage}: components have different batch sizes {sizes} in {describe(batch)}; "
                         "they must agree in dimension 0")
    return sizes[0], leaves


def row(leaf: np.ndarray | None, i: int) -> Any:
    """Row ``i`` of a batched leaf: a numpy scalar / bytes for 1-D leaves, a copied array otherwise."""
    if leaf is None:
        return None
    return leaf[i] if leaf.ndim == 1 else leaf[i].copy()
