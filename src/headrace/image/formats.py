"""The image formats headrace reads, and telling them apart.

``IMAGE_EXTENSIONS`` are the file name endings image folders are listed by (:func:`headrace.io.image_folder`,
``headrace convert``, ``headrace inspect``); :func:`image_format` names the format of encoded bytes from
their magic number, the way decoders tell them apart. No dependencies: safe to import anywhere.
"""

from __future__ import annotations

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
"""File name endings of images (lower case; compare with ``name.lower().endswith(IMAGE_EXTENSIONS)``)."""

JPEG_MAGIC = b"\xff\xd8\xff"
_MAGIC = ((JPEG_MAGIC, "jpeg"), (b"\x89PNG", "png"), (b"GIF8", "gif"), (b"BM", "bmp"),
          (b"II*\x00", "tiff"), (b"MM\x00*", "tiff"))


def image_format(data: bytes, name: str = "") -> str:
    """The format of encoded image bytes, from their magic number.

    >>> hr.image.image_format(open("cat.png", "rb").read(16))  # 'png'

    Args:
        data: the encoded image (at least the first 12 bytes).
        name: a file name, used when the magic number is unknown.

    Returns:
        str: ``jpeg``, ``png``, ``gif``, ``bmp``, ``webp`` or ``tiff``; otherwise the extension of ``name`` (lower
        case, without the dot).
    """
    for magic, fmt in _MAGIC:
        if data.startswith(magic):
            return fmt
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return name.rsplit(".", 1)[-1].lower()


__all__ = ["IMAGE_EXTENSIONS", "JPEG_MAGIC", "image_format"]
