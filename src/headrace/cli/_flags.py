"""Flag values every ``headrace`` command parses the same way (typer ``parser=`` functions).

A value a parser refuses raises ``typer.BadParameter``: click prints it as a usage error naming the flag
(``Invalid value for '--memory-budget': ...``), exit status 2, before any work starts (and before
torch is imported).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal, get_args

import typer

from .._memory import format_bytes, parse_bytes

_IMAGE_SIZE_RE = re.compile(r"^\s*(\d+)\s*(?:[xX×]\s*(\d+))?\s*$")

IMAGE_SIZE_HELP = "N (N x N pixels) or WxH (width x height)"
Model = Literal["resnet18", "small-cnn"]
"""--model's choices: headrace.train.models.MODEL_NAMES, here so that checking them needs no torch (a test
keeps them equal)."""
MODEL_NAMES = get_args(Model)


def byte_size(text: str) -> int:
    """``"256MiB"`` -> bytes (:func:`headrace.parse_bytes`: B, KB..TB, KiB..TiB); at least 1 byte."""
    try:
        return parse_bytes(text, "size")
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r} is not a size: use a number with a unit (B, KB, MB, GB, KiB, MiB, "
                                 "GiB), e.g. 256MiB") from exc


def memory_size(text: str) -> str:
    """A memory budget, checked as :func:`byte_size` and at most this machine's physical memory, returned as
    the user wrote it (``"384MiB"``): the library parses it, and its warnings name it as given."""
    import psutil

    n = byte_size(text)
    total = psutil.virtual_memory().total
    if n > total:
        raise typer.BadParameter(f"{text} is more than this machine's memory ({format_bytes(total)})")
    return text.strip()


def check_batch_budget(budget: int | None, share: float, batch: int, image_size: tuple[int, int],
                       share_text: str) -> None:
    """Refuse a ``--memory-budget`` whose pipeline ``share`` cannot hold two batches of ``batch`` decoded
    RGB images of ``image_size`` ``(height, width)`` (the batch being filled and the one handed on), naming
    the smallest budget that can, before anything runs. ``share_text`` names the share (e.g. "the data
    pipeline's quarter of it")."""
    if budget is None:
        return
    h, w = image_size
    two = 2 * batch * (h * w * 3 + 8)
    need = int(two / share)
    if budget < need:
        raise ValueError(f"--memory-budget {format_bytes(budget)} is too small: {share_text} must hold "
                         f"2 batches of {batch} images of {w}x{h} ({format_bytes(two)}); use "
                         f"--memory-budget {-(-need // 2**20)}MiB or more, or a smaller batch or --image-size")


def image_size(text: str) -> tuple[int, int]:
    """``"96"`` -> ``(96, 96)``; ``"128x96"`` -> ``(128, 96)`` (width x height); sides >= 1."""
    m = _IMAGE_SIZE_RE.match(text)
    if not m or int(m.group(1)) < 1 or (m.group(2) is not None and int(m.group(2)) < 1):
        raise typer.BadParameter(f"{text!r}: use {IMAGE_SIZE_HELP} with whole pixels >= 1, e.g. 96 or 128x96")
    w = int(m.group(1))
    return w, int(m.group(2)) if m.group(2) is not None else w


def training_image_size(text: str, minimum: int = 8) -> tuple[int, int]:
    """:func:`image_size` for the commands that decode and resize images (train, bench, demo, compress):
    ``"96"`` -> ``(96, 96)``, ``"128x96"`` (width x height) -> ``(96, 128)``, i.e. ``(height, width)`` as
    :func:`headrace.train.data.image_classification_dataset` takes it; at least ``minimum`` pixels a side
    (refused as the user wrote it, WxH, not as the ``(height, width)`` it becomes)."""
    w, h = image_size(text)
    if min(w, h) < minimum:
        raise typer.BadParameter(f"{text!r}: at least {minimum} pixels a side; use {IMAGE_SIZE_HELP}, e.g. 96 or "
                                 "128x96")
    return h, w


def size_text(hw: tuple[int, int]) -> int | str:
    """How the commands report an image size ``(height, width)``: ``96`` for a square, else ``"128x96"``."""
    h, w = hw
    return h if h == w else f"{w}x{h}"


def choice(names: Sequence[str]) -> Callable[[str], str]:
    """A parser accepting one of ``names`` (case-insensitive)."""

    def parse(text: str) -> str:
        for name in names:
            if text.lower() == name.lower():
                return name
        raise typer.BadParameter(f"{text!r} is not one of {', '.join(names)}")

    return parse


def micro_batch(text: str) -> int | str:
    """``"auto"`` or a whole number >= 1."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise typer.BadParameter(f"{text!r}: use auto or a whole number >= 1")
    return n


def fraction(text: str) -> float:
    """A fraction in ``[0, 1)``: 0 (none) or a number strictly between 0 and 1."""
    try:
        x = float(text)
    except ValueError:
        x = float("nan")
    if not 0.0 <= x < 1.0:
        raise typer.BadParameter(f"{text!r}: use a fraction in (0, 1), e.g. 0.5, or 0 for none")
    return x


def positive(text: str) -> float:
    """A number > 0."""
    try:
        x = float(text)
    except ValueError:
        x = float("nan")
    if not x > 0:
        raise typer.BadParameter(f"{text!r}: use a number > 0")
    return x
