"""``ConvertConfig``: every setting of one conversion, validated once, small and picklable (it travels to
the Beam workers)."""

from __future__ import annotations

import dataclasses
import math
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

from .._memory import parse_bytes

COMPRESSIONS: dict[str, tuple[str, ...]] = {
    "tfrecord": ("GZIP", "ZLIB"), "parquet": ("SNAPPY", "GZIP", "ZSTD", "NONE"), "text": ("GZIP", "ZLIB")}
"""The output formats (``to``) and the compressions each accepts (``None`` too: uncompressed; Parquet: SNAPPY)."""
FORMATS = tuple(COMPRESSIONS)
DEFAULT_SHARD_BYTES = 256 * 2**20


@dataclass(frozen=True)
class ConvertConfig:
    """Settings of a conversion (see :func:`headrace.convert.build_pipeline` for their meaning).

    ``shard_size`` accepts bytes or a size string (``"256MiB"``); ``image_size`` is ``(width, height)`` or
    ``"WxH"``; ``run_id`` names this run's staging folder (a fresh one by default).
    Raises ``ValueError`` naming the setting, its allowed values and the fix.
    """

    src: str
    dst: str
    to: str = "tfrecord"
    num_shards: int | None = None
    shard_size: int | str | None = None
    source_format: str | None = None
    image_size: tuple[int, int] | str | None = None
    quality: int = 95
    max_rejected: int = 0
    overwrite: bool = False
    compression: str | None = None
    prefix: str = "data"
    seed: int = 0
    label: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for name in ("src", "dst"):
            v = getattr(self, name)
            if isinstance(v, os.PathLike):
                set_(self, name, os.fspath(v))
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"convert: {name}={v!r} must be a path or URL")
        if os.path.abspath(self.src.rstrip("/")) == os.path.abspath(self.dst.rstrip("/")):
            raise ValueError(f"convert: the destination {self.dst} is the source; write to another directory")
        if self.to not in FORMATS:
            raise ValueError(f"convert: to={self.to!r} must be one of {', '.join(FORMATS)}")
        if self.num_shards is not None and self.shard_size is not None:
            raise ValueError("convert: pass num_shards (a fixed count) or shard_size (about that many bytes per "
                             "shard), not both")
        if self.num_shards is not None and (isinstance(self.num_shards, bool) or not isinstance(self.num_shards, int)
                                            or not 1 <= self.num_shards <= 99_999):
            raise ValueError(f"convert: num_shards={self.num_shards!r} must be an int in 1..99999")
        if self.shard_size is not None:
            set_(self, "shard_size", parse_bytes(self.shard_size, "shard_size"))
        if isinstance(self.image_size, str):
            set_(self, "image_size", parse_image_size(self.image_size))
        elif self.image_size is not None:
            set_(self, "image_size", tuple(self.image_size))
        if isinstance(self.max_rejected, bool) or not isinstance(self.max_rejected, int) or self.max_rejected < 0:
            raise ValueError(f"convert: max_rejected={self.max_rejected!r} must be an int >= 0")
        if self.compression is not None:
            c = str(self.compression).upper()
            allowed = COMPRESSIONS[self.to]
            if c not in allowed:
                raise ValueError(f"convert: compression={self.compression!r} for {self.to} must be one of "
                                 f"{', '.join(allowed)} (or None)")
            set_(self, "compression", c)
        if not self.prefix or "/" in self.prefix or self.prefix.startswith("."):
            raise ValueError(f"convert: prefix={self.prefix!r} must be a file name prefix (no '/', not hidden)")

    def shard_count(self, est_bytes: int) -> int:
        """``num_shards``, or the number of shards of about ``shard_size`` (default 256 MiB) for about
        ``est_bytes`` of records."""
        if self.num_shards is not None:
            return self.num_shards
        size = self.shard_size if self.shard_size is not None else DEFAULT_SHARD_BYTES
        return min(99_999, max(1, math.ceil(est_bytes / int(size))))

    def with_shards(self, est_bytes: int) -> ConvertConfig:
        """This config with ``num_shards`` fixed (from ``shard_size`` and ``est_bytes`` when not given):
        the form the pipeline runs with, so every worker names the shards alike."""
        return dataclasses.replace(self, num_shards=self.shard_count(est_bytes), shard_size=None)

    @property
    def shards(self) -> int:
        if self.num_shards is None:
            raise ValueError("convert: the shard count is not fixed yet; use ConvertConfig.with_shards(est_bytes)")
        return self.num_shards

    def source_options(self) -> dict[str, Any]:
        return {"image_size": self.image_size, "quality": self.quality if self.image_size else None}


def parse_image_size(text: str) -> tuple[int, int]:
    """``"224x160"`` -> ``(224, 160)`` (width, height); ``ValueError`` naming the text otherwise."""
    parts = text.lower().split("x")
    try:
        w, h = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"image_size={text!r}: expected WIDTHxHEIGHT in pixels, e.g. 224x224") from None
    if w < 1 or h < 1:
        raise ValueError(f"image_size={text!r}: width and height must be >= 1")
    return w, h
