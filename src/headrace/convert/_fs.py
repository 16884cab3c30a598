"""The few file-system operations the converter needs beyond :mod:`headrace.io.files`, for local paths and
fsspec URLs: list a directory, make one, remove files and trees, write a small file atomically."""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Any

from ..io import files


def _fs(path: str) -> tuple[Any, str]:
    import fsspec

    return fsspec.core.url_to_fs(path)


def local(path: str) -> str:
    return path.removeprefix("file://")


def join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}" if files.is_remote(directory) else os.path.join(local(directory), name)


def exists(path: str) -> bool:
    if files.is_remote(path):
        fs, p = _fs(path)
        return bool(fs.exists(p))
    return os.path.exists(local(path))


def listdir(path: str) -> list[str]:
    """Names (not paths) in the directory ``path``, sorted; ``[]`` if it does not exist."""
    if files.is_remote(path):
        fs, p = _fs(path)
        if not fs.exists(p):
            return []
        return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(p, detail=False))
    try:
        return sorted(os.listdir(local(path)))
    except FileNotFoundError:
        return []


def makedirs(path: str) -> None:
    if files.is_remote(path):
        fs, p = _fs(path)
        fs.makedirs(p, exist_ok=True)
    else:
        os.makedirs(local(path), exist_ok=True)


def remove(path: str) -> None:
    """Delete a file or a directory tree; nothing if it is not there."""
    if files.is_remote(path):
        fs, p = _fs(path)
        if fs.exists(p):
            fs.rm(p, recursive=True)
        return
    p = local(path)
    if os.path.isdir(p) and not os.path.islink(p):
        shutil.rmtree(p, ignore_errors=True)
    else:
        try:
            os.remove(p)
        except FileNotFoundError:
            pass


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to a temporary name beside ``path``, then rename it to ``path``."""
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with files.open_file(tmp, "wb") as f:
        f.write(data)
    files.rename(tmp, path)
