"""Element specs: the static description of a dataset's elements (tf.data's ``element_spec``).

A spec is a nested structure (``dict`` / ``tuple`` / namedtuple, as the elements) whose leaves are

==========================  ===================================================================
leaf spec                   describes
==========================  ===================================================================
``TensorSpec(shape, dtype)``  a numpy array or scalar (``shape=()``), or ``bytes`` / an object
                            array of ``bytes`` (``dtype`` ``string``); ``None`` in ``shape`` is a
                            dimension of unknown size, ``shape=None`` an unknown rank
``NoneTensorSpec()``        a ``None`` component
``RaggedTensorSpec``        a ragged batch (``ragged_batch``): nested object arrays of rows
``DatasetSpec(spec)``       a Dataset as a component (the windows of ``window``)
==========================  ===================================================================

dtypes are numpy dtypes; ``string`` is ``np.dtype(object)`` holding ``bytes`` (tf.string as
``as_numpy_iterator`` returns it). Specs print like TensorFlow's (``TensorSpec(shape=(None, 3),
dtype=float32, name=None)``) and round-trip through JSON (:func:`to_json` / :func:`from_json`, used by
``Dataset.save``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ._args import as_int
from ._errors import HeadraceError
from ._structure import flatten, is_namedtuple, pack_as, structure_signature

STRING = np.dtype(object)
_DTYPE_NAMES = {"string": STRING, "str": STRING, "bytes": STRING}


def as_dtype(dtype: Any) -> np.dtype:
    """``np.dtype`` from a numpy dtype, a Python type or a tf-style name (``"int64"``, ``"string"``).

    ``bytes`` / ``str`` / ``"string"`` give ``np.dtype(object)`` (strings are ``bytes``). Objects with a
    ``name`` (TensorFlow's ``tf.int64``) are read by name. Raises ``TypeError`` for anything else.
    """
    if isinstance(dtype, np.dtype):
        return dtype
    if dtype is bytes or dtype is str or (isinstance(dtype, str) and dtype in _DTYPE_NAMES):
        return STRING
    name = getattr(dtype, "name", None)  # tf.DType-like objects
    if isinstance(name, str) and not isinstance(dtype, type):
        return as_dtype(name)
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"unknown dtype {dtype!r}; use a numpy dtype or a name like 'int64', 'float32', "
                        "'uint8', 'bool' or 'string'") from e
    if dt.kind in "US":
        return STRING
    return dt


def dtype_name(dt: np.dtype) -> str:
    """``"string"`` for object (bytes) dtypes, else numpy's name (``"int64"``)."""
    return "string" if dt == STRING else dt.name


class TensorShape:
    """A shape whose dimensions may be unknown (``None``), or whose rank is unknown (``TensorShape(None)``).

    Compares equal to tuples and lists of the same dimensions; ``rank`` is ``None`` for an unknown rank.
    """

    __slots__ = ("dims",)

    def __init__(self, dims: Any) -> None:
        if isinstance(dims, TensorShape):
            self.dims: tuple[int | None, ...] | None = dims.dims
        elif dims is None:
            self.dims = None
        else:
            if isinstance(dims, int | np.integer) and not isinstance(dims, bool):
                dims = (dims,)
            out: list[int | None] = []
            for d in dims:
                if d is None:
                    out.append(None)
                    continue
                n = as_int(d, "shape dimension")
                if n < -1:
                    raise ValueError(f"shape {list(dims)}: dimension {n} must be >= 0 (or None / -1 for unknown)")
                out.append(None if n == -1 else n)
            self.dims = tuple(out)

    @property
    def rank(self) -> int | None:
        return None if self.dims is None else len(self.dims)

    ndims = rank

    def as_list(self) -> list[int | None]:
        if self.dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape")
        return list(self.dims)

    def is_fully_defined(self) -> bool:
        return self.dims is not None and all(d is not None for d in self.dims)

    def is_compatible_with(self, other: Any) -> bool:
        o = other if isinstance(other, TensorShape) else TensorShape(other)
        if self.dims is None or o.dims is None:
            return True
        return len(self.dims) == len(o.dims) and all(
            a is None or b is None or a == b for a, b in zip(self.dims, o.dims))

    def most_specific_compatible_shape(self, other: TensorShape) -> TensorShape:
        """The most specific shape both are compatible with (unknown where they differ)."""
        if self.dims is None or other.dims is None or len(self.dims) != len(other.dims):
            return TensorShape(None)
        return TensorShape([a if a == b else None for a, b in zip(self.dims, other.dims)])

    def __len__(self) -> int:
        if self.dims is None:
            raise ValueError("Cannot take the length of a shape with unknown rank")
        return len(self.dims)

    def __iter__(self) -> Any:
        if self.dims is None:
            raise ValueError("Cannot iterate over a shape with unknown rank")
        return iter(self.dims)

    def __getitem__(self, i: Any) -> Any:
        if self.dims is None:
            return None if not isinstance(i, slice) else TensorShape(None)
        got = self.dims[i]
        return TensorShape(got) if isinstance(i, slice) else got

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TensorShape):
            return self.dims == other.dims
        if isinstance(other, tuple | list):
            return self.dims is not None and self.dims == tuple(other)
        if other is None:
            return self.dims is None
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.dims)

    def __str__(self) -> str:
        if self.dims is None:
            return "<unknown>"
        return str(self.dims)

    def __repr__(self) -> str:
        return "TensorShape(None)" if self.dims is None else f"TensorShape({list(self.dims)})"


class TensorSpec:
    """Shape and dtype of one component (``tf.TensorSpec``); ``None`` in ``shape`` matches any size.

    Args:
        shape: a tuple / list of ints and ``None`` (unknown sizes), or ``None`` for an unknown rank.
        dtype: a numpy dtype or a name (``"int64"``, ``"float32"``, ``"string"`` = ``bytes``); default
            float32, as ``tf.TensorSpec``.
        name: optional, kept for tf.data compatibility.
    """

    __slots__ = ("dtype", "name", "shape")

    def __init__(self, shape: Any = (), dtype: Any = np.float32, name: str | None = None) -> None:
        self.shape = TensorShape(shape)
        self.dtype = as_dtype(dtype)
        self.name = name

    @classmethod
    def from_value(cls, value: Any) -> TensorSpec:
        s = spec_of(value)
        if not isinstance(s, TensorSpec):
            raise TypeError(f"TensorSpec.from_value: {type(value).__name__} is not one component")
        return s

    def is_compatible_with(self, other: Any) -> bool:
        """Whether a spec or a value fits this spec (same dtype, compatible shape)."""
        if not isinstance(other, TensorSpec):
            try:
                other = spec_of(other)
            except TypeError:
                return False
            if not isinstance(other, TensorSpec):
                return False
        return self.dtype == other.dtype and self.shape.is_compatible_with(other.shape)

    def convert(self, value: Any, where: str) -> Any:
        """``value`` converted to this spec's dtype (str -> bytes), checked against its shape.

        Raises ``TypeError`` when it cannot be converted and ``ValueError`` for a shape that does not match.
        """
        dt = self.dtype
        if dt == STRING:
            arr: Any = to_bytes_value(value, where)
        else:
            try:
                arr = np.asarray(value, dtype=dt)
            except (TypeError, ValueError) as e:
                raise TypeError(f"{where}: {value!r} cannot be converted to {dt}: {e}") from e
            if arr.ndim == 0:
                arr = arr[()]
        shape = () if isinstance(arr, bytes) else np.shape(arr)
        if not self.shape.is_compatible_with(shape):
            raise ValueError(f"{where}: a value of shape {tuple(shape)} does not match the declared shape "
                             f"{self.shape}; fix the generator or the output_signature")
        return arr

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TensorSpec) and type(other) is type(self) and self.shape == other.shape
                and self.dtype == other.dtype and self.name == other.name)

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, self.name))

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype={dtype_name(self.dtype)}, name={self.name!r})"


class NoneTensorSpec:
    """The spec of a ``None`` component (``map(lambda x: (x, None))``); batching keeps it ``None``."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NoneTensorSpec)

    def __hash__(self) -> int:
        return hash("NoneTensorSpec")

    def __repr__(self) -> str:
        return "NoneTensorSpec()"


class RaggedTensorSpec:
    """A ragged batch (``ragged_batch``): ``shape`` with ``None`` for ragged dimensions, the values' dtype,
    ``ragged_rank`` (how many dimensions after the first are ragged). Values are nested object arrays of
    rows (a regular array where every row has the same length), as ``tf.RaggedTensor.numpy()``."""

    __slots__ = ("dtype", "ragged_rank", "row_splits_dtype", "shape")

    def __init__(self, shape: Any = None, dtype: Any = np.float32, ragged_rank: int | None = None,
                 row_splits_dtype: Any = np.int64) -> None:
        self.shape = TensorShape(shape)
        self.dtype = as_dtype(dtype)
        if ragged_rank is None:
            ragged_rank = (self.shape.rank or 1) - 1
        self.ragged_rank = int(ragged_rank)
        self.row_splits_dtype = as_dtype(row_splits_dtype)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, RaggedTensorSpec) and self.shape == other.shape and self.dtype == other.dtype
                and self.ragged_rank == other.ragged_rank and self.row_splits_dtype == other.row_splits_dtype)

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, self.ragged_rank))

    def __repr__(self) -> str:
        return (f"RaggedTensorSpec(shape={self.shape}, dtype={dtype_name(self.dtype)}, "
                f"ragged_rank={self.ragged_rank}, row_splits_dtype={dtype_name(self.row_splits_dtype)})")


class DatasetSpec:
    """A Dataset as a component (the windows ``window`` yields): its elements' spec."""

    __slots__ = ("element_spec",)

    def __init__(self, element_spec: Any) -> None:
        self.element_spec = element_spec

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DatasetSpec) and self.element_spec == other.element_spec

    def __hash__(self) -> int:
        return hash(("DatasetSpec", repr(self.element_spec)))

    def __repr__(self) -> str:
        return f"DatasetSpec({self.element_spec!r})"


LEAF_SPECS = (TensorSpec, NoneTensorSpec, RaggedTensorSpec, DatasetSpec)


def to_bytes_value(value: Any, where: str) -> Any:
    """A string component as headrace holds it: ``bytes``, or an object array of ``bytes``."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str | np.str_):
        return str(value).encode("utf-8")
    if isinstance(value, np.bytes_):
        return bytes(value)
    arr = np.asarray(value, dtype=object)
    flat = arr.reshape(-1)
    for i, v in enumerate(flat.tolist()):
        if isinstance(v, str):
            flat[i] = v.encode("utf-8")
        elif isinstance(v, bytes | np.bytes_):
            flat[i] = bytes(v)
        else:
            raise TypeError(f"{where}: {v!r} ({type(v).__name__}) is not a string; a string component holds "
                            "str or bytes")
    if arr.ndim == 0:
        return arr[()]
    return arr


# ---- specs of values ----------------------------------------------------------------------------------
def _is_dataset(x: Any) -> bool:
    return hasattr(x, "element_spec") and hasattr(x, "_node")


def _leaf_spec(x: Any) -> Any:
    if x is None:
        return NoneTensorSpec()
    if isinstance(x, bytes):
        return TensorSpec((), STRING)
    if isinstance(x, np.ndarray):
        if x.dtype == STRING:
            rows = x.reshape(-1)
            if x.ndim == 1 and len(rows) and all(isinstance(r, np.ndarray) for r in rows):
                return _ragged_spec_of(x)
            return TensorSpec(x.shape, STRING)
        return TensorSpec(x.shape, x.dtype)
    if isinstance(x, np.generic):
        return TensorSpec((), STRING if isinstance(x, np.bytes_ | np.str_) else x.dtype)
    if _is_dataset(x):
        return DatasetSpec(x.element_spec)
    raise TypeError(f"{type(x).__name__} is not a dataset element component (numpy value, bytes or None)")


def _ragged_spec_of(x: np.ndarray) -> RaggedTensorSpec:
    """The spec of a ragged batch held as an object array of rows (``ragged_batch``)."""
    first = x[0]
    inner = _leaf_spec(first)
    inner_shape = inner.shape.dims if inner.shape.dims is not None else ()
    rank = inner.ragged_rank if isinstance(inner, RaggedTensorSpec) else 0
    return RaggedTensorSpec((len(x), None, *inner_shape[1:]), inner.dtype, ragged_rank=rank + 1)


def spec_of(x: Any) -> Any:
    """The spec of an element (a normalized value): structure kept, each leaf described exactly."""
    if isinstance(x, dict | tuple | list):
        return pack_as(x, [_leaf_spec(v) for v in flatten(x)])
    return _leaf_spec(x)


def leaves(spec: Any) -> list[Any]:
    return flatten(spec)


def same_structure(a: Any, b: Any) -> bool:
    return structure_signature(a) == structure_signature(b)


def describe(spec: Any) -> str:
    return repr(spec)


# ---- combining specs ----------------------------------------------------------------------------------
def _merge_leaf(a: Any, b: Any) -> Any | None:
    """The most specific leaf spec both fit, or None when they are of different types or dtypes."""
    if isinstance(a, NoneTensorSpec) and isinstance(b, NoneTensorSpec):
        return a
    if type(a) is not type(b):
        return None
    if isinstance(a, TensorSpec):
        if a.dtype != b.dtype:
            return None
        return TensorSpec(a.shape.most_specific_compatible_shape(b.shape), a.dtype)
    if isinstance(a, RaggedTensorSpec):
        if a.dtype != b.dtype or a.ragged_rank != b.ragged_rank:
            return None
        return RaggedTensorSpec(a.shape.most_specific_compatible_shape(b.shape), a.dtype, a.ragged_rank,
                                a.row_splits_dtype)
    if isinstance(a, DatasetSpec):
        inner = most_specific_compatible(a.element_spec, b.element_spec)
        return None if inner is None else DatasetSpec(inner)
    return None


def most_specific_compatible(a: Any, b: Any) -> Any | None:
    """The most specific spec both ``a`` and ``b`` are compatible with (unknown dimensions where their shapes
    differ), or ``None`` when their structures or dtypes differ."""
    if not same_structure(a, b):
        return None
    merged = []
    for x, y in zip(flatten(a), flatten(b)):
        m = _merge_leaf(x, y)
        if m is None:
            return None
        merged.append(m)
    return pack_as(a, merged)


def require_compatible(specs: Iterable[Any], what: str, fix: str) -> Any:
    """The most specific spec compatible with every spec in ``specs``; ``TypeError`` naming the first two
    that differ in structure or dtype (the error tf.data raises when the pipeline is built)."""
    specs = list(specs)
    out = specs[0]
    for i, s in enumerate(specs[1:], start=1):
        merged = most_specific_compatible(out, s)
        if merged is None:
            raise TypeError(f"{what}: incompatible element specs: {specs[0]!r} vs {s!r} (dataset {i}); {fix}")
        out = merged
    return out


def conformance(spec: Any) -> Callable[[Any], bool]:
    """A fast test that a normalized value has ``spec``'s structure, dtypes and ranks (sizes are not
    compared: a traced size may depend on values, and nothing at run time relies on it)."""
    if isinstance(spec, TensorSpec) and spec.dtype != STRING and spec.shape.dims is not None:
        dt, rank = spec.dtype, len(spec.shape.dims)
        scalar_type = dt.type

        def fits(x: Any) -> bool:
            if rank == 0 and type(x) is scalar_type:
                return True
            return type(x) is np.ndarray and x.dtype == dt and x.ndim == rank

        return fits
    return lambda x: _has_ranks_of(spec, x)


def _has_ranks_of(spec: Any, value: Any) -> bool:
    """:func:`conformance`'s general case: structure, dtypes and ranks of a normalized value."""
    try:
        vspec = spec_of(value)
    except TypeError:
        return False
    if not same_structure(spec, vspec):
        return False
    for s, v in zip(flatten(spec), flatten(vspec)):
        if isinstance(s, TensorSpec):
            if not (isinstance(v, TensorSpec) and s.dtype == v.dtype
                    and (s.shape.rank is None or s.shape.rank == v.shape.rank)):
                return False
        elif isinstance(s, RaggedTensorSpec):
            if not (isinstance(v, RaggedTensorSpec | TensorSpec) and s.dtype == v.dtype):
                return False
        elif type(s) is not type(v):
            return False
    return True


def relax(a: Any, b: Any) -> Any | None:
    """Specs of two traces combined: dimensions that differ become unknown; None if structure or dtypes
    differ (the function's output type depends on more than its input's shapes)."""
    return most_specific_compatible(a, b)


def batch_spec(spec: Any, batch_dim: int | None, where: str) -> Any:
    """Every component with a leading batch dimension of ``batch_dim`` (``None``: unknown)."""

    def one(s: Any) -> Any:
        if isinstance(s, NoneTensorSpec):
            return s
        if isinstance(s, TensorSpec):
            return TensorSpec(None if s.shape.dims is None else (batch_dim, *s.shape.dims), s.dtype)
        if isinstance(s, RaggedTensorSpec):
            dims = None if s.shape.dims is None else (batch_dim, *s.shape.dims)
            return RaggedTensorSpec(dims, s.dtype, s.ragged_rank + 1, s.row_splits_dtype)
        raise TypeError(f"{where}: cannot batch a component of {s!r}")

    return pack_as(spec, [one(s) for s in flatten(spec)]) if _is_structure(spec) else one(spec)


def unbatch_spec(spec: Any, where: str) -> Any:
    """Every component without its leading dimension; ``ValueError`` for a scalar component."""

    def one(s: Any) -> Any:
        if isinstance(s, NoneTensorSpec):
            return s
        if isinstance(s, TensorSpec | RaggedTensorSpec):
            if s.shape.dims is None:
                return TensorSpec(None, s.dtype) if isinstance(s, TensorSpec) else s
            if len(s.shape.dims) == 0:
                raise ValueError(f"{where}: cannot unbatch an input with scalar components ({spec!r}); every "
                                 "component needs a leading batch dimension")
            if isinstance(s, RaggedTensorSpec) and s.ragged_rank > 1:
                return RaggedTensorSpec(s.shape.dims[1:], s.dtype, s.ragged_rank - 1, s.row_splits_dtype)
            return TensorSpec(s.shape.dims[1:], s.dtype)
        raise TypeError(f"{where}: cannot unbatch a component of {s!r}")

    return pack_as(spec, [one(s) for s in flatten(spec)]) if _is_structure(spec) else one(spec)


def _is_structure(x: Any) -> bool:
    return isinstance(x, dict | tuple | list)


# ---- tracing --------------------------------------------------------------------------------------------
class NotTraceable(HeadraceError):
    """A spec that cannot be turned into an example (unknown rank, ragged, dataset components); internal:
    tracing catches it and falls back to reading the first element."""


STRING_EXAMPLE_BYTES = 17
"""Bytes per unit of ``fill`` in a string example: two traces (fill 1 and 2) see 17 and 34 bytes, so a function that
cuts a header of up to 16 bytes off a record still sees two lengths (with 1 and 2 bytes, ``np.frombuffer(b[8:])`` was
empty in both, traced as a fully known shape ``(0,)``, and ``ragged_batch`` refused the real records)."""


def example(spec: Any, unknown_size: int, fill: int = 0, dataset: Callable[[Any], Any] | None = None) -> Any:
    """A spec-shaped value filled with ``fill`` (numbers; ``bool(fill)``; ``STRING_EXAMPLE_BYTES * fill`` bytes
    ``b"a"`` for strings), unknown dimensions of size ``unknown_size``; ``dataset(spec)`` makes the example of a
    ``DatasetSpec``."""

    def one(s: Any) -> Any:
        if isinstance(s, NoneTensorSpec):
            return None
        if isinstance(s, DatasetSpec) and dataset is not None:
            return dataset(s.element_spec)
        if not isinstance(s, TensorSpec) or s.shape.dims is None:
            raise NotTraceable(repr(s))
        shape = tuple(unknown_size if d is None else d for d in s.shape.dims)
        if s.dtype == STRING:
            text = b"a" * (STRING_EXAMPLE_BYTES * fill)
            if not shape:
                return text
            out = np.empty(shape, dtype=object)
            out[...] = text
            return out
        arr = np.full(shape, fill, dtype=s.dtype)
        return arr[()] if arr.ndim == 0 else arr

    if _is_structure(spec):
        return pack_as(spec, [one(s) for s in flatten(spec)])
    return one(spec)


# ---- JSON ------------------------------------------------------------------------------------------------
def to_json(spec: Any) -> Any:
    """A JSON-serializable description of ``spec`` (namedtuples are saved as plain tuples)."""
    if isinstance(spec, dict):
        return {"dict": [[k, to_json(v)] for k, v in spec.items()]}
    if isinstance(spec, tuple | list):
        return {"tuple" if isinstance(spec, tuple) else "list": [to_json(v) for v in spec]}
    if isinstance(spec, NoneTensorSpec):
        return {"none": True}
    if isinstance(spec, TensorSpec):
        return {"tensor": {"shape": spec.shape.dims if spec.shape.dims is None else list(spec.shape.dims),
                           "dtype": dtype_name(spec.dtype)}}
    if isinstance(spec, RaggedTensorSpec):
        return {"ragged": {"shape": None if spec.shape.dims is None else list(spec.shape.dims),
                           "dtype": dtype_name(spec.dtype), "ragged_rank": spec.ragged_rank}}
    raise TypeError(f"{spec!r} cannot be saved (datasets as components cannot be written)")


def from_json(j: Any) -> Any:
    """Inverse of :func:`to_json`; ``ValueError`` for anything it did not write."""
    if not isinstance(j, dict) or len(j) != 1:
        raise ValueError(f"not an element spec: {j!r}")
    (kind, v), = j.items()
    if kind == "dict":
        return {k: from_json(x) for k, x in v}
    if kind == "tuple":
        return tuple(from_json(x) for x in v)
    if kind == "list":
        return [from_json(x) for x in v]
    if kind == "none":
        return NoneTensorSpec()
    if kind == "tensor":
        return TensorSpec(v["shape"], v["dtype"])
    if kind == "ragged":
        return RaggedTensorSpec(v["shape"], v["dtype"], v["ragged_rank"])
    raise ValueError(f"not an element spec: {j!r}")


def from_user(signature: Any, what: str) -> Any:
    """A user's ``output_signature`` checked: a structure (dict / tuple / namedtuple) of spec leaves."""
    if isinstance(signature, list):
        raise TypeError(f"{what}: a list is not a structure in tf.data (it is one tensor); use a tuple of "
                        f"TensorSpec, got {signature!r}")
    if isinstance(signature, dict) or (isinstance(signature, tuple) and not is_namedtuple(signature)):
        items = signature.values() if isinstance(signature, dict) else signature
        for v in items:
            from_user(v, what)
        return signature
    if is_namedtuple(signature):
        for v in signature:
            from_user(v, what)
        return signature
    if not isinstance(signature, LEAF_SPECS):
        raise TypeError(f"{what}: {signature!r} is not a spec; use headrace.TensorSpec(shape, dtype) (or a "
                        "dict / tuple of them)")
    return signature
