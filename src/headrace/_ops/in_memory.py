"""In-memory sources: ``range``, ``from_tensors``, ``from_tensor_slices``, ``from_generator``; ``TensorSpec``.

Data passed to ``from_tensors`` / ``from_tensor_slices`` is the caller's memory, not a pipeline buffer,
so it is not charged to the memory budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._args import as_int
from .._engine.calls import guarded_apply
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode, SpecOf
from .._engine.stacking import row
from .._engine.stage import Stage
from .._engine.stage_support import check_state, fn_name
from .._options import UNKNOWN_CARDINALITY
from .._spec import NoneTensorSpec, TensorSpec, as_dtype, from_user, spec_of, unbatch_spec
from .._structure import describe, flatten, is_namedtuple, normalize_tensors, pack_as

__all__ = ["GeneratorNode", "RangeNode", "TensorSlicesNode", "TensorSpec", "TensorsNode", "as_dtype"]

# ---- range -------------------------------------------------------------------------------------------
class RangeNode(DatasetNode):
    label = "range"

    def __init__(self, *args: int, dtype: Any = None) -> None:
        super().__init__()
        if not 1 <= len(args) <= 3:
            raise TypeError(f"range() takes 1 to 3 integer arguments (stop | start, stop[, step]), got {len(args)}")
        vals = [as_int(a, f"range({', '.join(map(repr, args))}): argument {i}") for i, a in enumerate(args)]
        start, stop, step = (0, vals[0], 1) if len(vals) == 1 else (vals[0], vals[1], vals[2] if len(vals) == 3 else 1)
        if step == 0:
            raise ValueError("range(): step must not be 0; use a positive step to count up, negative to count down")
        self.start, self.stop, self.step = start, stop, step
        self.dtype = np.dtype(np.int64) if dtype is None else as_dtype(dtype)

    def cardinality(self) -> int:
        return len(range(self.start, self.stop, self.step))

    def compute_spec(self, spec_of: SpecOf) -> Any:
        return TensorSpec((), self.dtype)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _RangeIterator(ctx, self)


class _RangeIterator(Stage):
    """``range``'s values, made in chunks of ``CHUNK`` by ``np.arange`` and handed out by a C iterator (a
    tenth of ``np.int64(v)``'s cost per element: ``bench/overhead.py``); the position is the chunk's first
    value plus the iterator's index. Dtypes other than int64, and ranges past int64, make one value at a time."""

    kind = "range"
    CHUNK = 4096
    _I64 = np.iinfo(np.int64)

    def __init__(self, ctx: IteratorContext, ds: RangeNode) -> None:
        super().__init__(ctx)
        self._ds = ds
        self._make = ds.dtype.type
        self._next = ds.start   # the value after the last chunk made (or the next value, one at a time)
        self._stop = ds.stop
        self._step = ds.step
        self._flat: Any = None  # the current chunk's ``flatiter``
        self._base = 0          # the current chunk's first value
        self._chunked = ds.dtype == np.int64 and all(
            self._I64.min <= v <= self._I64.max for v in (ds.start, ds.stop, ds.start + ds.step))

    def __next__(self) -> Any:
        flat = self._flat
        if flat is not None:
            try:
                return next(flat)
            except StopIteration:
                self._flat = None
        v = self._next
        step = self._step
        if (v >= self._stop) if step > 0 else (v <= self._stop):
            raise StopIteration
        if not self._chunked:
            self._next = v + step
            return self._make(v)
        end = v + step * self.CHUNK
        end = min(end, self._stop) if step > 0 else max(end, self._stop)
        self._base, self._next = v, v + step * len(range(v, end, step))
        self._flat = np.arange(v, end, step, dtype=np.int64).flat
        return next(self._flat)

    def elements_ready(self) -> Any:
        """``runs.ReadyElements``: the rest of the chunk in hand."""
        return self._flat  # (a flatiter: its index is the position, see get_state)

    def get_state(self) -> dict[str, Any]:
        flat = self._flat
        position = self._next if flat is None else self._base + flat.index * self._step
        return {"kind": "range", "start": self._ds.start, "step": self._step, "next": position}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, start=self._ds.start, step=self._step)
        self._flat = None
        self._next = int(state["next"])


# ---- from_tensors / from_tensor_slices ---------------------------------------------------------------
class TensorsNode(DatasetNode):
    label = "from_tensors"

    def __init__(self, tensors: Any) -> None:
        super().__init__()
        self.element = normalize_tensors(tensors, "from_tensors")

    def cardinality(self) -> int:
        return 1

    def compute_spec(self, spec_of_input: SpecOf) -> Any:
        return spec_of(self.element)

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _SliceIterator(ctx, "from_tensors", lambda i: self.element, 1)


class TensorSlicesNode(DatasetNode):
    label = "from_tensor_slices"

    def __init__(self, tensors: Any) -> None:
        super().__init__()
        element = normalize_tensors(tensors, "from_tensor_slices")
        leaves = flatten(element)
        tensors_only = [leaf for leaf in leaves if leaf is not None]  # None components stay None per element
        if not tensors_only:
            raise ValueError("from_tensor_slices: the structure has no tensors to slice")
        for leaf in tensors_only:
            if not isinstance(leaf, np.ndarray) or leaf.ndim == 0:
                raise ValueError(f"from_tensor_slices: every component needs at least one dimension to slice "
                                 f"along, got a scalar ({describe(leaf)}) in {describe(element)}; use "
                                 "from_tensors for a single element")
        n = len(tensors_only[0])
        for leaf in tensors_only[1:]:
            if len(leaf) != n:
                raise ValueError(f"from_tensor_slices: all components must have the same size in dimension 0, "
                                 f"got {[len(v) for v in tensors_only]} in {describe(element)}")
        self.structure = element
        self.leaves = leaves
        self.length = n
        single = len(leaves) == 1 and not isinstance(element, dict | tuple | list)
        if single:
            leaf = leaves[0]
            self.slice: Callable[[int], Any] = (lambda i: leaf[i]) if leaf.ndim == 1 else (lambda i: leaf[i].copy())
        else:
            self.slice = lambda i: pack_as(element, [None if v is None else row(v, i) for v in leaves])

    def cardinality(self) -> int:
        return self.length

    def compute_spec(self, spec_of_input: SpecOf) -> Any:
        return unbatch_spec(spec_of(self.structure), "from_tensor_slices")

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _SliceIterator(ctx, "from_tensor_slices", self.slice, self.length)


class _SliceIterator(Stage):
    def __init__(self, ctx: IteratorContext, kind: str, get: Callable[[int], Any], length: int) -> None:
        super().__init__(ctx)
        self.kind = kind
        self._get = get
        self._length = length
        self._i = 0

    def __next__(self) -> Any:
        i = self._i
        if i >= self._length:
            raise StopIteration
        self._i = i + 1
        return self._get(i)

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "length": self._length, "next": self._i}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, length=self._length)
        self._i = int(state["next"])


# ---- from_generator ----------------------------------------------------------------------------------
def _signature_from_legacy(output_types: Any, output_shapes: Any) -> Any:
    """``output_types`` / ``output_shapes`` as one signature. As in tf.data a list is not a structure (it
    would be one tensor), so ``output_types=[...]`` raises ``TypeError``; shapes are lists or tuples."""
    if isinstance(output_types, list):
        raise TypeError(f"from_generator(output_types={output_types!r}): a list is not a structure in tf.data; "
                        "give several components as a tuple (output_types=(np.int64, np.int64)) or use "
                        "output_signature")
    if isinstance(output_types, dict):
        if output_shapes is not None and (not isinstance(output_shapes, dict)
                                          or set(output_shapes) != set(output_types)):
            raise ValueError(f"from_generator: output_shapes {output_shapes!r} does not have the keys of "
                             f"output_types {output_types!r}")
        return {k: _signature_from_legacy(t, None if output_shapes is None else output_shapes[k])
                for k, t in output_types.items()}
    if isinstance(output_types, tuple):
        if output_shapes is not None and (not isinstance(output_shapes, tuple | list)
                                          or len(output_shapes) != len(output_types)):
            raise ValueError(f"from_generator: output_shapes {output_shapes!r} does not have the structure of "
                             f"output_types {output_types!r}")
        parts = [_signature_from_legacy(t, None if output_shapes is None else output_shapes[i])
                 for i, t in enumerate(output_types)]
        return type(output_types)(*parts) if is_namedtuple(output_types) else tuple(parts)
    return TensorSpec(None if output_shapes is None else output_shapes, output_types)


class GeneratorNode(DatasetNode):
    """Elements from a Python generator; each iteration calls ``generator(*args)`` afresh.

    State is the count of elements produced: restoring calls the generator again and skips that many
    (tf.data cannot checkpoint generators at all). Give ``output_signature`` (a structure of
    :class:`TensorSpec`) to convert and check every element; without it, elements are normalized as
    ``from_tensors`` arguments are (a list is a tensor) and the element spec is read from the first one.
    ``args`` are converted as tf.data converts them (to numpy: ``str`` becomes ``bytes``).
    """

    label = "from_generator"

    def __init__(self, generator: Callable[..., Any], *, output_types: Any, output_shapes: Any,
                 args: Sequence[Any] | None, output_signature: Any) -> None:
        super().__init__()
        if not callable(generator):
            raise TypeError(f"from_generator: `generator` must be a callable returning an iterable (e.g. the "
                            f"generator function itself, not its result), got {type(generator).__name__}")
        if output_signature is not None and (output_types is not None or output_shapes is not None):
            raise TypeError("from_generator: pass output_signature, or output_types/output_shapes, not both")
        if output_types is None and output_shapes is not None:
            raise TypeError("from_generator: output_shapes needs output_types (or use output_signature)")
        self.generator = generator
        self.args = tuple(normalize_tensors(a, "from_generator(args)") for a in args) if args is not None else ()
        if output_signature is None and output_types is not None:
            output_signature = _signature_from_legacy(output_types, output_shapes)
        elif output_signature is not None:
            output_signature = from_user(output_signature, "from_generator(output_signature)")
        self.signature = output_signature

    def cardinality(self) -> int:
        return UNKNOWN_CARDINALITY

    def compute_spec(self, spec_of_input: SpecOf) -> Any:
        return self.signature

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _GeneratorIterator(ctx, self)


class _GeneratorIterator(Stage):
    kind = "from_generator"

    def __init__(self, ctx: IteratorContext, ds: GeneratorNode) -> None:
        super().__init__(ctx)
        self._ds = ds
        self._it: Any = None
        self._produced = 0
        self._done = False

    def _convert(self, x: Any) -> Any:
        sig = self._ds.signature
        where = f"from_generator({getattr(self._ds.generator, '__name__', 'generator')}) element {self._produced}"
        if sig is None:
            return normalize_tensors(x, where)
        return convert_to_spec(sig, x, where)

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        if self._it is None:
            self._it = iter(guarded_apply(self._ds.generator, f"from_generator({fn_name(self._ds.generator)})",
                                                *self._ds.args))
        try:
            x = next(self._it)
        except StopIteration:
            self._done = True
            raise
        out = self._convert(x)
        self._produced += 1
        return out

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "produced": self._produced, "done": self._done}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind)
        self._close_self()
        self._it, self._produced, self._done = None, 0, False
        target = int(state["produced"])
        while self._produced < target:
            next(self)
        self._done = bool(state["done"])

    def _close_self(self) -> None:
        it, self._it = self._it, None
        close = getattr(it, "close", None)
        if close is None:
            return
        try:
            close()
        except ValueError:
            # "generator already executing": a thread is still inside it (a generator that blocks). That
            # thread is reported by Iterator.close; the generator is left to finish on its own.
            pass


def convert_to_spec(spec: Any, x: Any, where: str) -> Any:
    """``x`` converted to ``spec`` (a structure of ``TensorSpec`` / ``NoneTensorSpec``): each component to its
    dtype (str -> bytes), checked against its shape. Raises ``TypeError`` / ``ValueError`` naming ``where``."""
    if isinstance(spec, TensorSpec):
        return spec.convert(x, where)
    if isinstance(spec, NoneTensorSpec):
        if x is not None:
            raise TypeError(f"{where}: expected None for a NoneTensorSpec component, got {describe(x)}")
        return None
    if isinstance(spec, dict):
        if not isinstance(x, dict) or set(x) != set(spec):
            raise ValueError(f"{where}: expected a dict with keys {sorted(spec)}, got {describe(x)}")
        return {k: convert_to_spec(spec[k], x[k], where) for k in spec}
    if isinstance(spec, tuple | list):
        if not isinstance(x, tuple | list) or len(x) != len(spec):
            raise ValueError(f"{where}: expected a structure of {len(spec)} components, got {describe(x)}")
        vals = [convert_to_spec(s, v, where) for s, v in zip(spec, x)]
        return type(spec)(*vals) if is_namedtuple(spec) else type(spec)(vals)
    raise TypeError(f"{where}: output_signature leaves must be TensorSpec, got {spec!r}")
