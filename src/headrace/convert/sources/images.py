"""An image folder (class subfolders give the labels) as rows of encoded images.

The layout is :func:`headrace.io.image_folder`'s (sorted subfolder names are the classes; labels 0, 1, ...).
Each image becomes a row with the feature names of TensorFlow's image-classification TFRecords:

======================  =========  ============================================================
feature                 kind       value
======================  =========  ============================================================
``image/encoded``       string     the file's bytes, or the resized image re-encoded as JPEG
``image/format``        string     ``jpeg``, ``png``, ``gif``, ``bmp``, ``webp`` or ``tiff``
``image/class/label``   int64      the class index
``image/class/text``    string     the class (subfolder) name
``image/filename``      string     the path relative to the folder (also the source ID)
``image/height``        int64      pixels (of the stored image)
``image/width``         int64      pixels
``image/channels``      int64      1, 3 or 4 as stored (3 after resizing)
======================  =========  ============================================================

Every image is decoded once (:func:`headrace.image.decode`; JPEGs at 1/8 scale in the DCT domain, which
still reads every byte) so that a broken file is caught here - it becomes a rejected row naming the file
and the decoder's error - rather than in the training job.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..._deps import require
from ...image.formats import image_format
from ...io import files
from ...io.files import join
from ..schema import INT64, STRING
from .base import Item, Rejected, Source, relative, total_size

UNIT_FILES = 16
"""Images per work unit."""



class ImageFolderSource(Source):
    """Images under ``root/<class>/...`` (any depth below the class folder).

    Args:
        root: a local directory or fsspec URL.
        image_size: ``(width, height)``: resize every image to exactly this size and re-encode it as JPEG
            (``quality``); ``None`` keeps the file's bytes.
        quality: JPEG quality 1..100 for re-encoding.

    Raises ``FileNotFoundError`` / ``ValueError`` as :func:`headrace.io.image_folder` (no images, not a
    directory).
    """

    kind = "image_folder"
    label_features = ("image/class/label",)

    def __init__(self, root: str, image_size: tuple[int, int] | None = None, quality: int = 95) -> None:
        from ...io import image_folder

        super().__init__(root)
        if image_size is not None and (len(image_size) != 2 or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in image_size)):
            raise ValueError(f"image_size={image_size!r}: expected (width, height), two ints >= 1")
        if not 1 <= quality <= 100:
            raise ValueError(f"quality={quality!r}: JPEG quality must be in 1..100")
        self.root = root.rstrip("/") or "/"
        self.image_size = image_size
        self.quality = quality
        ds = image_folder(self.root, shuffle=False)
        self.class_names: list[str] = list(ds.class_names)
        self._files = [relative(p, self.root) for p in ds.file_paths]
        self.num_files = len(self._files)

    def units(self) -> list[list[tuple[str, int]]]:
        index = {name: i for i, name in enumerate(self.class_names)}
        pairs = [(rel, index[rel.split("/", 1)[0]]) for rel in self._files]
        return [pairs[i:i + UNIT_FILES] for i in range(0, len(pairs), UNIT_FILES)]

    def estimate_bytes(self) -> int:
        """The files' sizes, or with ``image_size`` about 0.4 bytes per pixel and channel (JPEG at q95)."""
        if self.image_size is not None:
            w, h = self.image_size
            return self.num_files * (int(w * h * 3 * 0.4) + 200)
        return total_size(self.root, self._files)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "files": self.num_files, "class_names": self.class_names,
                "image_size": list(self.image_size) if self.image_size else None}

    def __getstate__(self) -> dict[str, Any]:
        """The file list stays on the machine that builds the pipeline (the work units carry the files);
        workers get only the settings."""
        state = self.__dict__.copy()
        state["_files"] = None
        return state

    def read(self, unit: list[tuple[str, int]]) -> Iterator[Item]:
        for rel, label in unit:
            path = join(self.root, rel)
            try:
                yield rel, self._row(path, rel, label)
            except Exception as e:  # unreadable file or undecodable image: report it, never drop it silently
                yield Rejected(rel, path, f"{type(e).__name__}: {e}")

    def _row(self, path: str, rel: str, label: int) -> dict[str, Any]:
        from ... import image

        with files.open_file(path, "rb") as f:
            data = f.read()
        if self.image_size is not None:
            simplejpeg = require("simplejpeg", "headrace.convert (image folders)")

            w, h = self.image_size
            img = image.decode_and_resize(data, (h, w), channels=3, name=path)
            data = simplejpeg.encode_jpeg(img, quality=self.quality, colorspace="RGB")
            fmt, shape = "jpeg", img.shape
        else:
            fmt = image_format(data, rel)
            shape = _checked_shape(data, fmt, path)
        return {"image/encoded": (STRING, [data]), "image/format": (STRING, [fmt.encode()]),
                "image/class/label": (INT64, [label]),
                "image/class/text": (STRING, [self.class_names[label].encode("utf-8")]),
                "image/filename": (STRING, [rel.encode("utf-8")]), "image/height": (INT64, [shape[0]]),
                "image/width": (INT64, [shape[1]]), "image/channels": (INT64, [shape[2]])}



_JPEG_CHANNELS = {"Gray": 1, "CMYK": 4}


def _checked_shape(data: bytes, fmt: str, path: str) -> tuple[int, int, int]:
    """``(height, width, channels)`` of an encoded image, decoding it to prove it is not broken.

    A JPEG is decoded at 1/8 scale in the DCT domain: every entropy-coded byte is still read (a truncated
    or corrupt file fails as in a full decode) at a fraction of the cost. Raises
    :class:`~headrace.ImageDecodeError` naming ``path``.
    """
    from ... import image

    if fmt == "jpeg":
        simplejpeg = require("simplejpeg", "headrace.convert (image folders)")

        try:
            h, w, colorspace, _ = simplejpeg.decode_jpeg_header(data)
        except ValueError:
            image.decode(data, channels=0, name=path)  # raises the decoder's error, naming the file
            raise
        image.decode_and_resize(data, (max(1, -(-h // 8)), max(1, -(-w // 8))), channels=0, name=path)
        return h, w, _JPEG_CHANNELS.get(colorspace, 3)
    return image.decode(data, channels=0, name=path).shape
