"""Images in headrace, from one place: decoding, resizing and augmentation on numpy arrays (this module),
and where the rest of the image code lives.

============================================  ============================================================
``headrace.image`` (this module)              ``decode``, ``resize``, ``decode_and_resize``, ``normalize``,
                                              crops and flips: numpy ``H x W x C`` ``uint8``, GIL-releasing,
                                              TensorFlow-compatible (below)
``headrace.image.formats``                    ``IMAGE_EXTENSIONS``, ``image_format(bytes)``: the formats
                                              headrace reads, told apart by magic number
``headrace.io.image_folder``                  a directory of class folders as a ``Dataset`` (Keras'
                                              ``image_dataset_from_directory``; ``io/_image_folder.py``)
``headrace.convert.sources.images``           an image folder as ``tf.train.Example`` rows for
                                              ``headrace convert`` (``image/encoded``, ``image/class/label``...)
``headrace.train.data``                       TFRecord image Examples -> ``(uint8 image, label)`` for training
``headrace.image.photos``                     ``make_photo_jpegs`` / ``iter_photo_jpegs``: real-photo JPEGs
                                              for the demo, tests and benchmarks (from scikit-image's wheel)
============================================  ============================================================

Image decoding, resizing and augmentation on numpy arrays: fast, GIL-releasing, TensorFlow-compatible.

Every function takes and returns numpy arrays laid out ``H x W x C`` (height, width, channels; RGB
order), so they run inside ``Dataset.map(..., num_parallel_calls=AUTOTUNE)`` on the thread pool: the
heavy parts (libjpeg-turbo through ``simplejpeg``, OpenCV's decoders and ``cv2.resize``) release the GIL,
so two threads decode about twice as fast as one.

Decoding
--------
- JPEG (bytes starting ``FF D8 FF``): ``simplejpeg`` (libjpeg-turbo) with the same settings as
  ``tf.io.decode_jpeg``'s defaults (``dct_method=""`` = INTEGER_FAST, fancy upsampling). The result is
  byte-identical to TensorFlow's (checked in ``tests/image/test_image.py`` against pixels TensorFlow decoded).
  CMYK / YCCK JPEGs go through OpenCV.
- PNG, BMP, GIF (first frame), WebP, TIFF...: OpenCV, falling back to Pillow. 16-bit images become
  uint8 by dropping the low byte (``tf.image.convert_image_dtype``'s rule).
- Corrupt, truncated or unknown bytes raise :class:`~headrace.ImageDecodeError` naming the file or record
  (``name=``) and the first bytes seen; in a pipeline, ``.ignore_errors()`` skips such elements.

Resizing
--------
``resize`` is ``tf.image.resize(images, size, method, antialias=False)``: half-pixel centers
(``in = (out + 0.5) * in_size / out_size - 0.5``, clamped at the borders), computed by ``cv2.resize``.

Documented tolerance against TensorFlow's formula (verified in ``tests/image/test_image.py`` against a reference
implementation of it):

- ``bilinear`` / ``area`` on float32 images: absolute difference <= 1e-3 for values in 0..255.
- ``bilinear`` on uint8 images: TensorFlow returns float32; headrace returns uint8 (4x less memory, the
  fast path), equal to TensorFlow's value rounded, within **1** intensity level (OpenCV's fixed-point
  weights), mean absolute difference < 0.3.
- ``nearest``: identical (TensorFlow's half-pixel rule in its float32 arithmetic, by numpy indexing).
- ``area``: a box filter (OpenCV's ``INTER_AREA``); equal to TensorFlow's ``area`` for downscaling.

``decode_and_resize`` adds DCT-domain downscaling: when a JPEG is about twice the target size or more
(``ceil(side / r) >= target`` in both dimensions for r = 8, 4 or 2, the largest such r), libjpeg-turbo
decodes it directly at 1/r scale (exactly ``tf.io.decode_jpeg(..., ratio=r)``), then ``resize`` finishes
the job. That is several times faster and
behaves like an anti-aliasing filter; pass ``dct_scaling=False`` to get exactly ``decode`` + ``resize``.

Random augmentations take ``seed``: an ``int`` or a sequence of ints gives a fixed, reproducible draw
(like ``tf.image.stateless_random_*``; use ``seed=(base_seed, element_index)`` inside a parallel map to
stay deterministic), a ``numpy.random.Generator`` is drawn from (stateful), ``None`` uses fresh entropy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._deps import require
from .._errors import ImageDecodeError
from .formats import IMAGE_EXTENSIONS, JPEG_MAGIC, image_format

__all__ = [
    "IMAGE_EXTENSIONS",
    "center_crop",
    "decode",
    "decode_and_resize",
    "image_format",
    "normalize",
    "random_crop",
    "random_flip_left_right",
    "resize",
]


_CHANNELS = (0, 1, 3, 4)
_SJ_COLORSPACE = {1: "GRAY", 3: "RGB", 4: "RGBA"}
_DCT_FACTORS = (8, 4, 2)
_METHODS = ("bilinear", "nearest", "area")

Seed = int | Sequence[int] | np.random.Generator | None


# ---- decoding -------------------------------------------------------------------------------------------
def _as_buffer(data: Any, name: str | None) -> bytes | bytearray | memoryview:
    if isinstance(data, bytes | bytearray | memoryview):
        return data
    if isinstance(data, np.bytes_):
        return bytes(data)
    if isinstance(data, np.ndarray):
        if data.dtype == np.uint8 and data.ndim == 1:
            return memoryview(np.ascontiguousarray(data))  # type: ignore[arg-type]  # (an ndarray is a buffer)
        if data.ndim == 0 and data.dtype == object and isinstance(data.item(), bytes):
            return data.item()
    raise TypeError(f"decode{_where(name)}: expected the encoded image as bytes (or a 1-D uint8 array), "
                    f"got {type(data).__name__}; pass the raw file contents")


def _where(name: str | None) -> str:
    return f" of {name}" if name else ""


def _decode_error(data: bytes | bytearray | memoryview, name: str | None, reason: str) -> ImageDecodeError:
    head = bytes(data[:8]).hex(" ")
    return ImageDecodeError(
        f"cannot decode the image{_where(name) or ' record'} ({len(data)} bytes, starting "
        f"{head or '<empty>'}): "
        f"{reason}; the file is corrupt, truncated or not an image (JPEG, PNG, BMP, GIF, WebP, TIFF). "
        "Fix or remove it, or skip such elements with Dataset.ignore_errors()")


def _check_channels(channels: int) -> None:
    if channels not in _CHANNELS:
        raise ValueError(f"channels={channels!r}: must be 0 (as stored), 1 (grey), 3 (RGB) or 4 (RGBA)")


_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_COMPONENTS = {1: "Gray", 3: "YCbCr", 4: "CMYK"}


def _sof(buf: bytes | bytearray | memoryview) -> tuple[int, int, str] | None:
    """(height, width, colorspace) from the JPEG's start-of-frame segment, walking the marker segments in
    Python: a few microseconds holding the GIL, cheaper in a busy thread pool than a C call that releases
    and re-acquires it. ``None`` if the walk fails (then libjpeg-turbo reads the header and reports)."""
    n, i = len(buf), 2
    while i + 9 < n:
        if buf[i] != 0xFF:
            return None
        marker = buf[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _SOF_MARKERS:
            space = _COMPONENTS.get(buf[i + 9])
            return None if space is None else ((buf[i + 5] << 8) | buf[i + 6], (buf[i + 7] << 8) | buf[i + 8],
                                               space)
        i += 2 + ((buf[i + 2] << 8) | buf[i + 3])
    return None


def _jpeg_header(buf: bytes | bytearray | memoryview, name: str | None) -> tuple[int, int, str]:
    simplejpeg = require("simplejpeg", "headrace.image")

    found = _sof(buf)
    if found is not None and found[0] > 0 and found[1] > 0:
        return found
    try:
        h, w, colorspace, _ = simplejpeg.decode_jpeg_header(buf)
    except ValueError as e:
        raise _decode_error(buf, name, f"bad JPEG header ({e})") from None
    return h, w, colorspace


def _decode_jpeg(buf: bytes | bytearray | memoryview, channels: int, name: str | None, colorspace: str,
                 min_size: tuple[int, int] = (0, 0), factor: int = 1) -> np.ndarray:
    simplejpeg = require("simplejpeg", "headrace.image")

    if colorspace in ("CMYK", "YCCK"):
        return _decode_other(buf, channels, name, jpeg=True)
    if channels == 0:
        channels = 1 if colorspace == "Gray" else 3
    try:
        img = simplejpeg.decode_jpeg(buf, colorspace=_SJ_COLORSPACE[channels], fastdct=True,
                                     fastupsample=False, min_height=min_size[0], min_width=min_size[1],
                                     min_factor=float(factor), strict=True)
    except ValueError as e:
        raise _decode_error(buf, name, f"JPEG error: {e}") from None
    return img


def _cv2_to_rgb(img: np.ndarray, channels: int) -> np.ndarray:
    """Convert what ``cv2.imdecode(IMREAD_UNCHANGED)`` returns (grey / BGR / BGRA) to ``channels``."""
    cv2 = require("cv2", "headrace.image")

    if img.dtype == np.uint16:
        img = (img >> 8).astype(np.uint8)
    elif img.dtype != np.uint8:
        raise ValueError(f"unsupported sample type {img.dtype} (8- and 16-bit images are supported)")
    have = 1 if img.ndim == 2 else img.shape[2]
    if channels == 0:
        channels = have if have != 2 else 1
    if have == 1:
        img = img.reshape(img.shape[0], img.shape[1])
        codes = {1: None, 3: cv2.COLOR_GRAY2RGB, 4: cv2.COLOR_GRAY2RGBA}
    elif have == 3:
        codes = {1: cv2.COLOR_BGR2GRAY, 3: cv2.COLOR_BGR2RGB, 4: cv2.COLOR_BGR2RGBA}
    else:
        codes = {1: cv2.COLOR_BGRA2GRAY, 3: cv2.COLOR_BGRA2RGB, 4: cv2.COLOR_BGRA2RGBA}
    code = codes[channels]
    out = img if code is None else cv2.cvtColor(img, code)
    return out.reshape(out.shape[0], out.shape[1], channels)


def _decode_pillow(buf: bytes | bytearray | memoryview, channels: int) -> np.ndarray:
    import io

    Image = require("PIL.Image", "headrace.image")

    with Image.open(io.BytesIO(bytes(buf))) as im:
        im.seek(0)
        if channels == 0:
            channels = 4 if "A" in im.getbands() or "transparency" in im.info else (
                1 if im.mode in ("L", "1", "I;16", "I") else 3)
        mode = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
        arr = np.asarray(im.convert(mode))
    return arr.reshape(arr.shape[0], arr.shape[1], channels)


def _decode_other(buf: bytes | bytearray | memoryview, channels: int, name: str | None, *,
                  jpeg: bool = False) -> np.ndarray:
    cv2 = require("cv2", "headrace.image")

    flags = (cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION) if jpeg else cv2.IMREAD_UNCHANGED
    img = cv2.imdecode(np.frombuffer(buf, np.uint8), flags)
    try:
        if img is not None:
            return _cv2_to_rgb(img, channels)
        return _decode_pillow(buf, channels)
    except Exception as e:  # Pillow raises many types (UnidentifiedImageError, OSError, SyntaxError...)
        raise _decode_error(buf, name, f"{type(e).__name__}: {e}") from None


def decode(data: bytes | bytearray | memoryview | np.ndarray, channels: int = 3, *,
           name: str | None = None) -> np.ndarray:
    """Decode an encoded image (``tf.io.decode_image`` with ``expand_animations=False``).

    >>> img = hr.image.decode(jpeg_bytes, name="cat.jpg")  # (H, W, 3) uint8, RGB

    Args:
        data: the file contents (``bytes``, as TFRecord features and ``image_folder`` yield them).
        channels: 3 (RGB, default), 1 (grey), 4 (RGBA; alpha 255 where the file has none) or 0 (as stored:
            1, 3 or 4).
        name: the file or record, for error messages.

    Returns:
        uint8 array ``(height, width, channels)``. JPEGs are byte-identical to ``tf.io.decode_jpeg``.

    Raises:
        ImageDecodeError: corrupt, truncated or unrecognised bytes (names ``name``).
        ValueError: ``channels`` not in 0, 1, 3, 4. TypeError: ``data`` is not bytes-like.
    """
    _check_channels(channels)
    buf = _as_buffer(data, name)
    if len(buf) == 0:
        raise _decode_error(buf, name, "the data is empty")
    if bytes(buf[:3]) == JPEG_MAGIC:
        _, _, colorspace = _jpeg_header(buf, name)
        return _decode_jpeg(buf, channels, name, colorspace)
    return _decode_other(buf, channels, name)


def _dct_factor(src_hw: tuple[int, int], dst_hw: tuple[int, int]) -> int:
    """The largest r in 8, 4, 2 with ceil(src / r) >= dst in both dimensions (1 if none)."""
    for r in _DCT_FACTORS:
        if -(-src_hw[0] // r) >= dst_hw[0] and -(-src_hw[1] // r) >= dst_hw[1]:
            return r
    return 1


def decode_and_resize(data: bytes | bytearray | memoryview | np.ndarray, size: Sequence[int],
                      channels: int = 3, method: str = "bilinear", *, dct_scaling: bool = True,
                      name: str | None = None) -> np.ndarray:
    """``resize(decode(data, channels), size, method)``, fast: the hot path of image pipelines.

    >>> hr.image.decode_and_resize(jpeg_bytes, (224, 224)).shape  # (224, 224, 3)

    Args:
        data: encoded image bytes (see :func:`decode`).
        size: ``(height, width)`` of the output in pixels.
        channels: see :func:`decode`.
        method: see :func:`resize`.
        dct_scaling: for JPEGs about 2x the target or more in both dimensions, decode at 1/2, 1/4 or 1/8
            scale in the DCT domain first (``tf.io.decode_jpeg(ratio=r)``); several times faster, slightly
            smoother than decoding at full size. ``False``: exactly ``decode`` then ``resize``.
        name: the file or record, for error messages.

    Returns:
        uint8 array ``(height, width, channels)``.

    Raises:
        ImageDecodeError, ValueError, TypeError: as :func:`decode` and :func:`resize`.
    """
    hw = _check_size(size, "decode_and_resize")
    _check_method(method)
    _check_channels(channels)
    buf = _as_buffer(data, name)
    if len(buf) >= 3 and bytes(buf[:3]) == JPEG_MAGIC:
        h, w, colorspace = _jpeg_header(buf, name)
        factor = _dct_factor((h, w), hw) if dct_scaling else 1
        min_size = (-(-h // factor), -(-w // factor)) if factor > 1 else (0, 0)
        img = _decode_jpeg(buf, channels, name, colorspace, min_size, factor)
    else:
        img = decode(buf, channels, name=name)
    return resize(img, hw, method)


# ---- resizing ---------------------------------------------------------------------------------------------
def _check_size(size: Sequence[int], what: str) -> tuple[int, int]:
    if type(size) is tuple and len(size) == 2 and type(size[0]) is int and type(size[1]) is int and min(size) >= 1:
        return size  # (the common case, per image in a map: no generator, whose every step holds the GIL)
    try:
        h, w = (int(v) for v in size)
        ok = all(int(v) == v and v >= 1 for v in size)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{what}: size={size!r} must be (height, width), two ints >= 1")
    return h, w


def _check_method(method: str) -> None:
    if method not in _METHODS:
        raise ValueError(f"resize: method={method!r} is not supported; use one of {', '.join(_METHODS)}")


def _cv2_interp(method: str) -> int:
    cv2 = require("cv2", "headrace.image")

    return {"bilinear": cv2.INTER_LINEAR, "area": cv2.INTER_AREA}[method]


def _nearest_index(out_size: int, in_size: int) -> np.ndarray:
    """TensorFlow's half-pixel nearest rule in float32: ``min(floor((o + .5) * scale), in - 1)``."""
    scale = np.float32(in_size) / np.float32(out_size)
    pos = (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * scale
    return np.minimum(np.floor(pos).astype(np.intp), in_size - 1)


def resize(image: np.ndarray, size: Sequence[int], method: str = "bilinear",
           antialias: bool = False) -> np.ndarray:
    """``tf.image.resize(image, size, method, antialias=False)`` (half-pixel centers).

    >>> small = hr.image.resize(img, (128, 128), method="area")  # (128, 128, C)

    Args:
        image: ``(H, W)``, ``(H, W, C)`` or a batch ``(N, H, W, C)``; C <= 512.
        size: ``(height, width)`` of the output in pixels.
        method: ``"bilinear"`` (default), ``"nearest"`` or ``"area"``.
        antialias: only ``False`` (TensorFlow's default) is supported.

    Returns:
        The resized array, same rank. dtype: uint8, uint16, int16, float32 and float64 are kept (integer
        results rounded; TensorFlow would return float32, see the module docstring for the tolerance);
        any other dtype is computed and returned as float32.

    Raises:
        ValueError: bad ``size``, ``method``, rank, or ``antialias=True``.
    """
    cv2 = require("cv2", "headrace.image")

    h, w = _check_size(size, "resize")
    _check_method(method)
    if antialias:
        raise ValueError("resize(antialias=True) is not supported; downscale with method='area' (a box "
                         "filter) or decode_and_resize(..., dct_scaling=True) instead")
    img = np.asarray(image)
    if img.ndim == 4:
        return np.stack([resize(x, (h, w), method) for x in img]) if len(img) else (
            np.empty((0, h, w, img.shape[3]), img.dtype))
    if img.ndim not in (2, 3) or (img.ndim == 3 and not 1 <= img.shape[2] <= 512):
        raise ValueError(f"resize: image of shape {img.shape} must be (H, W), (H, W, C) with C <= 512, "
                         "or (N, H, W, C)")
    if img.shape[0] == 0 or img.shape[1] == 0:
        raise ValueError(f"resize: cannot resize an empty image of shape {img.shape}")
    if img.dtype not in (np.uint8, np.uint16, np.int16, np.float32, np.float64):
        img = img.astype(np.float32)
    if img.shape[:2] == (h, w):
        return img
    if method == "nearest":
        rows = np.take(img, _nearest_index(h, img.shape[0]), axis=0)
        return np.take(rows, _nearest_index(w, img.shape[1]), axis=1)
    out = cv2.resize(img, (w, h), interpolation=_cv2_interp(method))
    if img.ndim == 3 and out.ndim == 2:
        out = out[:, :, None]
    return out


# ---- normalization and crops ---------------------------------------------------------------------------
def normalize(image: np.ndarray, mean: float | Sequence[float] = 0.0, std: float | Sequence[float] = 1.0,
              max_value: float = 255.0, dtype: Any = np.float32) -> np.ndarray:
    """``(image / max_value - mean) / std`` in ``dtype`` (float32 by default).

    >>> x = hr.image.normalize(img, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))  # ImageNet's

    With the defaults this is exactly ``tf.cast(image, tf.float32) / 255.0``.

    Args:
        image: any shape, usually ``(H, W, C)`` uint8 (values 0..``max_value``).
        mean: a scalar or per-channel sequence (applied on the last axis), in units of ``image / max_value``.
        std: a scalar or per-channel sequence, every value non-zero.
        max_value: the value that maps to 1.0 (> 0; 255 for uint8 images).
        dtype: the result's float dtype.

    Returns:
        numpy.ndarray: a new array of ``image``'s shape in ``dtype``.

    Raises:
        ValueError: ``max_value <= 0`` or a ``std`` containing 0.
    """
    if not max_value > 0:
        raise ValueError(f"normalize: max_value={max_value!r} must be > 0 (255 for uint8 images)")
    plain_mean = isinstance(mean, int | float) and mean == 0
    plain_std = isinstance(std, int | float) and std == 1
    std_arr = None if plain_std else np.asarray(std, dtype=dtype)
    if std_arr is not None and np.any(std_arr == 0):
        raise ValueError(f"normalize: std={std!r} contains 0; every std must be non-zero")
    out = np.asarray(image).astype(dtype)  # a SIMD cast, then in-place arithmetic: one fresh array
    out /= np.asarray(max_value, dtype=dtype)
    if not plain_mean:
        out -= np.asarray(mean, dtype=dtype)
    if std_arr is not None:
        out /= std_arr
    return out


def center_crop(image: np.ndarray, size: Sequence[int]) -> np.ndarray:
    """The central ``(height, width)`` window of ``image`` (``tf.image.resize_with_crop_or_pad`` when cropping).

    >>> hr.image.center_crop(np.zeros((256, 320, 3), np.uint8), (224, 224)).shape  # (224, 224, 3)

    Offsets are ``(H - height) // 2`` and ``(W - width) // 2``.

    Args:
        image: ``(H, W)`` or ``(H, W, C)``, any dtype.
        size: ``(height, width)`` in pixels, two ints >= 1, at most the image's.

    Returns:
        numpy.ndarray: a new contiguous array of shape ``(height, width[, C])``, ``image``'s dtype.

    Raises:
        ValueError: ``size`` is not two ints >= 1, the image is not 2-D / 3-D, or it is smaller than ``size``.
    """
    h, w = _check_size(size, "center_crop")
    img = _check_crop(image, h, w, "center_crop")
    top, left = (img.shape[0] - h) // 2, (img.shape[1] - w) // 2
    return np.ascontiguousarray(img[top:top + h, left:left + w])


def _check_crop(image: np.ndarray, h: int, w: int, what: str) -> np.ndarray:
    img = np.asarray(image)
    if img.ndim not in (2, 3):
        raise ValueError(f"{what}: image of shape {img.shape} must be (H, W) or (H, W, C)")
    if img.shape[0] < h or img.shape[1] < w:
        raise ValueError(f"{what}: the image is {img.shape[0]}x{img.shape[1]} (HxW), smaller than the "
                         f"crop {h}x{w}; resize it first or crop less")
    return img


def _rng(seed: Seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def random_crop(image: np.ndarray, size: Sequence[int], seed: Seed = None) -> np.ndarray:
    """A uniformly placed ``(height, width)`` window of ``image`` (``tf.image.random_crop`` on H and W).

    >>> hr.image.random_crop(img, (224, 224), seed=(7, index)).shape  # (224, 224, 3) for an RGB img

    Args:
        image: ``(H, W)`` or ``(H, W, C)``, any dtype.
        size: ``(height, width)`` in pixels, two ints >= 1, at most the image's.
        seed: an ``int`` or sequence of ints (a fixed, reproducible draw), a ``numpy.random.Generator`` (drawn
            from) or ``None`` (fresh entropy); see the module docstring.

    Returns:
        numpy.ndarray: a new contiguous array of shape ``(height, width[, C])``, ``image``'s dtype.

    Raises:
        ValueError: ``size`` is not two ints >= 1, the image is not 2-D / 3-D, or it is smaller than ``size``.
    """
    h, w = _check_size(size, "random_crop")
    img = _check_crop(image, h, w, "random_crop")
    rng = _rng(seed)
    top = int(rng.integers(0, img.shape[0] - h + 1))
    left = int(rng.integers(0, img.shape[1] - w + 1))
    return np.ascontiguousarray(img[top:top + h, left:left + w])


def random_flip_left_right(image: np.ndarray, seed: Seed = None) -> np.ndarray:
    """``image`` mirrored along its width with probability 1/2 (``tf.image.random_flip_left_right``).

    >>> out = hr.image.random_flip_left_right(batch, seed=3)  # batch: (N, H, W, C), one draw per image

    Args:
        image: ``(H, W)``, ``(H, W, C)`` or a batch ``(N, H, W, C)`` (one draw per image), any dtype.
        seed: as :func:`random_crop`'s (see the module docstring).

    Returns:
        numpy.ndarray: a new array (never a view) of ``image``'s shape and dtype.

    Raises:
        ValueError: ``image`` is not 2-D, 3-D or 4-D.
    """
    img = np.asarray(image)
    if img.ndim not in (2, 3, 4):
        raise ValueError(f"random_flip_left_right: image of shape {img.shape} must be (H, W), (H, W, C) "
                         "or (N, H, W, C)")
    rng = _rng(seed)
    if img.ndim == 4:
        flips = rng.random(len(img)) < 0.5
        out = img.copy()
        out[flips] = img[flips, :, ::-1]
        return out
    return np.ascontiguousarray(img[:, ::-1]) if rng.random() < 0.5 else img.copy()
