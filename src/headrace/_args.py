"""Integer arguments as tf.data takes them: Python ints, numpy integer scalars and 0-d integer arrays.

tf.data converts every count, size, index and seed argument to an ``int64`` tensor, so values that come out
of a pipeline (``np.int64`` elements inside ``flat_map`` / ``interleave`` functions, a 0-d array from
``np.sum``) are as good as Python ints: ``Dataset.from_tensors(x).repeat(x)``. headrace accepts the same,
and rejects ``bool`` and floating-point values with a ``TypeError`` naming the argument (tf.data turns
``True`` into 1; a flag passed where a count belongs is almost always a mistake).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ._options import AUTOTUNE


def as_int(value: Any, what: str, *, minimum: int | None = None, fix: str = "") -> int:
    """``value`` as a Python ``int``: an ``int``, a numpy integer or a 0-d integer array (anything with
    ``__index__`` but ``bool``).

    Raises ``TypeError`` naming ``what`` for ``bool``, floats, arrays with dimensions and other types, and
    ``ValueError`` for a value below ``minimum`` (the message ends with ``fix`` when given).
    """
    if isinstance(value, bool | np.bool_) or (isinstance(value, np.ndarray) and value.dtype == np.bool_):
        raise TypeError(f"{what}={value!r}: expected an integer, got a bool; pass the number itself")
    if isinstance(value, np.ndarray) and value.ndim != 0:
        raise TypeError(f"{what}: expected an integer scalar, got an array of shape {value.shape}; pass one "
                        "number (e.g. int(x[0]))")
    try:
        n = operator.index(value)
    except TypeError:
        kind = "a float" if isinstance(value, float | np.floating) else type(value).__name__
        raise TypeError(f"{what}={value!r}: expected an integer (int, numpy integer or 0-d integer array), got "
                        f"{kind}" + ("; convert it with int(...) if it is a whole number"
                                     if isinstance(value, float | np.floating) else "")) from None
    if minimum is not None and n < minimum:
        raise ValueError(f"{what}={n} must be >= {minimum}" + (f"; {fix}" if fix else ""))
    return int(n)


def as_optional_int(value: Any, what: str, **kwargs: Any) -> int | None:
    """``None`` stays ``None``; anything else goes through :func:`as_int`."""
    return None if value is None else as_int(value, what, **kwargs)


def as_seed(value: Any, what: str) -> int | None:
    """A seed argument: ``None`` or an integer (any of :func:`as_int`'s forms)."""
    return as_optional_int(value, what)




def count_arg(value: Any, what: str, *, minimum: int, allow_autotune: bool = False, fix: str = "") -> int:
    """A count / size argument: an integer >= ``minimum`` (or ``AUTOTUNE`` when allowed), as ``int``."""
    n = as_int(value, what)
    if allow_autotune and n == AUTOTUNE:
        return n
    if n < minimum:
        raise ValueError(f"{what}={n} must be >= {minimum}" + (f"; {fix}" if fix else ""))
    return n


def parallel_calls_arg(value: Any, what: str) -> int | None:
    """``num_parallel_calls``: ``None`` (sequential), ``AUTOTUNE`` or an integer >= 1."""
    if value is None:
        return None
    n = as_int(value, f"{what}(num_parallel_calls)")
    if n != AUTOTUNE and n < 1:
        raise ValueError(f"{what}(num_parallel_calls={n}) must be >= 1, None (sequential) or headrace.AUTOTUNE (-1)")
    return n


def image_hw(image_size: Any, minimum: int = 8) -> tuple[int, int]:
    """``(height, width)`` in pixels of ``image_size``: an int ``S`` (``S x S``) or ``(height, width)``.

    Raises:
        ValueError: not an int or a pair of ints, or a side below ``minimum`` (naming the value).
    """
    whole = (int, np.integer)
    if isinstance(image_size, whole) and not isinstance(image_size, bool):
        pair: tuple[Any, ...] = (image_size, image_size)
    else:
        pair = tuple(image_size) if isinstance(image_size, (tuple, list)) else ()
    if len(pair) != 2 or any(isinstance(v, bool) or not isinstance(v, whole) or v < minimum for v in pair):
        raise ValueError(f"image_size={image_size!r} must be an int or (height, width), each >= {minimum} "
                         "(pixels)")
    return int(pair[0]), int(pair[1])
