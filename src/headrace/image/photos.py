"""ImageNet-sized JPEGs made from the real photographs that ship inside scikit-image's wheel.

For demos, tests and benchmarks: no download ever happens. The twelve source photographs are the files in
``skimage/data/`` (read directly from the installed package, never through ``skimage.data``'s fetcher);
each output image is a random crop (60-100% of the shorter side, aspect ratio of the output), an optional
horizontal flip and a small brightness change of one photograph, resized to ``size`` and JPEG-encoded
(4:2:0 chroma subsampling, like most camera and ImageNet JPEGs). The class of an image is *which*
photograph it came from (``PHOTO_CLASSES[label]``), so a classifier can actually learn the task.

``regions=r`` (2, 4, 6 or 9) makes a harder task with ``12 * r`` classes (:func:`photo_classes`): each
photograph is cut into ``r`` regions (:data:`REGION_GRIDS`: 2 = left and right halves, 4 = quadrants, ...)
and the class is *which region of which photograph*. A crop is 40-65% of the photograph's shorter side,
centred anywhere in its region (so crops of neighbouring regions overlap and some are genuinely ambiguous),
never flipped (a flip would swap left and right), with the same brightness change. Classifiers stay well
below 100% on it, so what compression costs shows.

Needs ``scikit-image`` (only for its data files; ``pip install 'headrace[cli]'``), ``opencv-python`` and
``simplejpeg`` (``pip install 'headrace[image]'``).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .._deps import install_hint, require
from .._errors import MissingDependencyError

PHOTO_CLASSES: tuple[str, ...] = (
    "astronaut", "camera", "chelsea", "coffee", "coins", "grass", "hubble_deep_field", "ihc", "moon",
    "motorcycle_left", "retina", "rocket",
)
"""Class names in label order (sorted, as folder readers sort them): the photographs' file names."""

_FILES = {
    "astronaut": "astronaut.png", "camera": "camera.png", "chelsea": "chelsea.png",
    "coffee": "coffee.png", "coins": "coins.png", "hubble_deep_field": "hubble_deep_field.jpg",
    "ihc": "ihc.png", "moon": "moon.png", "motorcycle_left": "motorcycle_left.png",
    "retina": "retina.jpg", "rocket": "rocket.jpg", "grass": "grass.png",
}


REGION_CROP = (0.4, 0.65)
"""Crop height as a fraction of the photograph's shorter side, for ``regions > 1``."""


REGION_GRIDS: dict[int, tuple[int, int]] = {1: (1, 1), 2: (1, 2), 4: (2, 2), 6: (2, 3), 9: (3, 3)}
"""Regions per photograph -> (rows, columns) of the grid that cuts it."""


def photo_classes(regions: int = 1) -> tuple[str, ...]:
    """Class names in label order for ``regions`` per photograph (sorted, as folder readers sort them).

    ``regions=1``: :data:`PHOTO_CLASSES`; else ``"<photo>-r<row>c<column>"`` for every photograph and every
    cell of its grid (``12 * regions`` names). Raises ``ValueError`` for a ``regions`` not in
    :data:`REGION_GRIDS`.
    """
    rows, cols = _grid(regions)
    if regions == 1:
        return PHOTO_CLASSES
    return tuple(f"{name}-r{r}c{c}" for name in PHOTO_CLASSES for r in range(rows) for c in range(cols))


def _grid(regions: int) -> tuple[int, int]:
    if isinstance(regions, bool) or regions not in REGION_GRIDS:
        raise ValueError(f"regions={regions!r}: the regions per photograph must be one of "
                         f"{', '.join(map(str, REGION_GRIDS))} (1: the class is the photograph, 12 classes; "
                         "2: its left or right half, 24 classes; 4: its quadrant, 48)")
    return REGION_GRIDS[regions]


def skimage_data_dir() -> Path:
    """The ``data`` folder inside the installed scikit-image package (raises ``ImportError`` if absent)."""
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        err = MissingDependencyError("the photo generator reads the photographs bundled with scikit-image, "
                                     f"which is not installed; install it with: {install_hint('skimage')}",
                                     name="skimage")
        err.extra = "cli"
        raise err
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def load_photos() -> list[np.ndarray]:
    """The twelve photographs as uint8 RGB arrays (H x W x 3), in ``PHOTO_CLASSES`` order."""
    cv2 = require("cv2", "the photo generator")

    base = skimage_data_dir()
    photos = []
    for name in PHOTO_CLASSES:
        path = base / _FILES[name]
        img = cv2.imread(str(path), cv2.IMREAD_COLOR)  # BGR, grey photographs expanded to 3 channels
        if img is None:
            raise FileNotFoundError(f"scikit-image's photograph {path} is missing or unreadable; "
                                    "reinstall scikit-image (pip install --force-reinstall scikit-image)")
        photos.append(np.ascontiguousarray(img[:, :, ::-1]))
    return photos


def _check_args(n: int, size: tuple[int, int], quality: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n={n!r}: the number of images must be an int >= 0")
    if len(size) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v < 8 for v in size):
        raise ValueError(f"size={size!r}: expected (width, height) in pixels, each an int >= 8")
    if not 1 <= quality <= 100:
        raise ValueError(f"quality={quality!r}: JPEG quality must be in 1..100 (90 is typical)")


def _augment(photo: np.ndarray, size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    cv2 = require("cv2", "the photo generator")

    out_w, out_h = size
    h, w = photo.shape[:2]
    aspect = out_w / out_h
    # largest crop of the output's aspect ratio that fits, then 60-100% of it
    crop_h = min(h, int(w / aspect))
    scale = rng.uniform(0.6, 1.0)
    ch = max(8, int(crop_h * scale))
    cw = max(8, min(w, int(ch * aspect)))
    y = int(rng.integers(0, h - ch + 1))
    x = int(rng.integers(0, w - cw + 1))
    crop = photo[y:y + ch, x:x + cw]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    interp = cv2.INTER_AREA if cw >= out_w else cv2.INTER_LINEAR
    img = cv2.resize(np.ascontiguousarray(crop), (out_w, out_h), interpolation=interp)
    gain = rng.uniform(0.85, 1.15)
    return np.clip(img.astype(np.float32) * gain, 0, 255).astype(np.uint8)


def _region_crop(photo: np.ndarray, size: tuple[int, int], cell: tuple[int, int], grid: tuple[int, int],
                 rng: np.random.Generator) -> np.ndarray:
    """A crop (``REGION_CROP`` of the shorter side) centred at a random point of region ``cell``."""
    cv2 = require("cv2", "the photo generator")

    out_w, out_h = size
    h, w = photo.shape[:2]
    aspect = out_w / out_h
    ch = max(8, int(min(h, w / aspect) * rng.uniform(*REGION_CROP)))
    cw = max(8, min(w, int(ch * aspect)))
    row, col = cell
    cy = (row + rng.random()) * h / grid[0]
    cx = (col + rng.random()) * w / grid[1]
    y = int(np.clip(cy - ch / 2, 0, h - ch))
    x = int(np.clip(cx - cw / 2, 0, w - cw))
    crop = np.ascontiguousarray(photo[y:y + ch, x:x + cw])
    interp = cv2.INTER_AREA if cw >= out_w else cv2.INTER_LINEAR
    img = cv2.resize(crop, (out_w, out_h), interpolation=interp)
    gain = rng.uniform(0.85, 1.15)
    return np.clip(img.astype(np.float32) * gain, 0, 255).astype(np.uint8)


def iter_photo_jpegs(n: int, size: tuple[int, int] = (500, 375), quality: int = 90,
                     seed: int = 0, regions: int = 1) -> Iterator[tuple[bytes, int]]:
    """Yield ``n`` pairs ``(jpeg_bytes, class_index)``; class ``i % len(photo_classes(regions))`` for the
    ``i``-th image.

    Args:
        n: how many images.
        size: ``(width, height)`` of every image in pixels (500 x 375 is ImageNet's most common size).
        quality: JPEG quality 1..100.
        seed: the same seed gives byte-identical images.
        regions: 1 (the class is the photograph, 12 classes) or 2, 4, 6, 9 (photograph x region,
            ``12 * regions`` classes; module docstring).

    Raises:
        ValueError: bad ``n`` / ``size`` / ``quality`` / ``regions``. ImportError: scikit-image is not installed.
    """
    simplejpeg = require("simplejpeg", "the photo generator")

    _check_args(n, size, quality)
    grid = _grid(regions)
    photos = load_photos()
    rng = np.random.default_rng(seed)
    for i in range(n):
        label = i % (len(PHOTO_CLASSES) * regions)
        photo, cell = divmod(label, regions)
        if regions == 1:
            img = _augment(photos[label], size, rng)
        else:
            img = _region_crop(photos[photo], size, divmod(cell, grid[1]), grid, rng)
        yield simplejpeg.encode_jpeg(img, quality=quality, colorspace="RGB", colorsubsampling="420"), label


def make_photo_jpegs(out_dir: str | os.PathLike[str], n: int, size: tuple[int, int] = (500, 375),
                     quality: int = 90, seed: int = 0, regions: int = 1) -> list[tuple[str, int]]:
    """Write ``n`` JPEGs as ``out_dir/<class name>/<index:06d>.jpg`` and return ``[(path, class_index)]``.

    The layout is what :func:`headrace.io.image_folder` reads (sorted class folders give the labels,
    which equal ``photo_classes(regions)`` indices only when every class is present, i.e. ``n >= 12 * regions``).
    See :func:`iter_photo_jpegs` for the arguments and errors.
    """
    out = Path(out_dir)
    names = photo_classes(regions)
    written: list[tuple[str, int]] = []
    for i, (data, label) in enumerate(iter_photo_jpegs(n, size, quality, seed, regions)):
        folder = out / names[label]
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{i:06d}.jpg"
        path.write_bytes(data)
        written.append((str(path), label))
    return written
