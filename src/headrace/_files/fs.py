"""The one file-system shim of headrace: files and directories by local path or fsspec URL (``s3://``,
``gs://``, ``memory://``, ``file://``).

Local paths use the built-in ``open`` / ``os`` / ``glob`` (fastest); anything with a ``protocol://`` prefix
goes through ``fsspec`` (``pip install 'headrace[s3]'`` for ``s3://``; ``gcsfs`` for ``gs://``). The
readers, ``list_files``, ``headrace convert`` and checkpoints all use it.

Reading: :func:`open_file`, :func:`file_size`, :func:`exists`, :func:`isdir`, :func:`glob`, :func:`find`,
:func:`subdirs`, :func:`listdir`. Writing: :func:`open_file` (``"wb"``), :func:`makedirs`,
:func:`rename` (atomic on local disks), :func:`write_atomic`, :func:`remove`. Paths: :func:`to_str_path`,
:func:`is_remote`, :func:`local_path`, :func:`join`.
"""

from __future__ import annotations

import glob as _glob
import os
import shutil
import uuid
from collections.abc import Callable
from typing import IO, Any

from .._deps import require

_LOCAL_PREFIX = "file://"


def to_str_path(path: str | bytes | os.PathLike[str] | Any) -> str:
    """A path as ``str``.

    >>> hr.io.files.to_str_path(b"data/a.tfrecord")  # 'data/a.tfrecord'

    Args:
        path: ``str``, ``bytes`` (UTF-8; what ``list_files`` yields), ``os.PathLike`` or a numpy bytes scalar.

    Returns:
        str: the path.

    Raises:
        TypeError: any other type.
    """
    if isinstance(path, bytes):
        return path.decode("utf-8")
    if isinstance(path, str):
        return path
    if isinstance(path, os.PathLike):
        return os.fspath(path)
    if hasattr(path, "item"):  # numpy scalar / 0-d array
        return to_str_path(path.item())
    raise TypeError(f"expected a file path (str, bytes or os.PathLike), got {type(path).__name__}: {path!r}")


def is_remote(path: str) -> bool:
    """Whether ``path`` is an fsspec URL other than ``file://`` (so goes through fsspec).

    >>> hr.io.files.is_remote("s3://bucket/a.tfrecord"), hr.io.files.is_remote("file:///tmp/a")  # (True, False)

    Args:
        path: a local path or URL.

    Returns:
        bool: ``True`` for ``protocol://...`` other than ``file://``.
    """
    return "://" in path and not path.startswith(_LOCAL_PREFIX)


def local_path(path: str) -> str:
    """``path`` without a ``file://`` prefix.

    >>> hr.io.files.local_path("file:///tmp/a")  # '/tmp/a'

    Args:
        path: a local path, with or without ``file://``.

    Returns:
        str: the path without the prefix.
    """
    return path[len(_LOCAL_PREFIX):] if path.startswith(_LOCAL_PREFIX) else path


_BACKENDS = {"s3": "s3fs", "s3a": "s3fs"}
"""URL schemes whose fsspec backend is a headrace extra (``pip install 'headrace[s3]'``)."""


def _backend(url: str) -> None:
    """Import the fsspec backend of ``url``'s scheme when it is an extra, so that a missing one raises
    :class:`~headrace.MissingDependencyError` naming the extra (not fsspec's ImportError)."""
    module = _BACKENDS.get(url.partition("://")[0].lower())
    if module is not None:
        require(module, f"reading {url}")


def _url_fs(url: str) -> tuple[Any, str]:
    import fsspec

    _backend(url)
    return fsspec.core.url_to_fs(url)


def join(directory: str, name: str) -> str:
    """``directory/name``: ``/``-joined for URLs, ``os.path.join`` (without ``file://``) for local paths.

    >>> hr.io.files.join("s3://bucket/train", "a.tfrecord")  # 's3://bucket/train/a.tfrecord'

    Args:
        directory: a local directory or URL.
        name: a file name.

    Returns:
        str: the joined path.
    """
    return f"{directory.rstrip('/')}/{name}" if is_remote(directory) else os.path.join(local_path(directory), name)


def open_file(path: str | bytes | os.PathLike[str], mode: str = "rb") -> IO[Any]:
    """Open a local path or fsspec URL.

    >>> with hr.io.files.open_file("s3://bucket/a.tfrecord") as f: head = f.read(12)

    Args:
        path: a local path or fsspec URL (``str``, ``bytes`` or ``os.PathLike``).
        mode: as ``open``'s (``"rb"``, ``"wb"``, ...).

    Returns:
        A file object (binary unless ``mode`` says text).

    Raises:
        FileNotFoundError: the file is missing (naming the path).
        MissingDependencyError: an ``s3://`` URL without its backend (``pip install 'headrace[s3]'``).
    """
    p = to_str_path(path)
    if is_remote(p):
        import fsspec

        _backend(p)
        try:
            return fsspec.open(p, mode).open()
        except FileNotFoundError as e:
            raise FileNotFoundError(f"no such file: {p}") from e
    return open(local_path(p), mode)


def file_size(path: str | bytes | os.PathLike[str]) -> int:
    """The size of a file.

    >>> hr.io.files.file_size("data/a.tfrecord")  # bytes

    Args:
        path: a local path or fsspec URL.

    Returns:
        int: the size in bytes.

    Raises:
        FileNotFoundError: the file is missing.
        MissingDependencyError: an ``s3://`` URL without its backend (``pip install 'headrace[s3]'``).
    """
    p = to_str_path(path)
    if is_remote(p):
        fs, fs_path = _url_fs(p)
        return int(fs.size(fs_path))
    return os.path.getsize(local_path(p))


def _with_protocol(url: str, paths: list[str]) -> list[str]:
    """fsspec returns paths without ``protocol://``; put ``url``'s back, sorted."""
    protocol = url.split("://", 1)[0]
    return sorted(f"{protocol}://{m}" if "://" not in m else m for m in paths)


PUBLISHING_SUFFIX = ".publishing"
"""``<dir>/.<prefix>.publishing``: a journal a ``ShardedWriter`` keeps while it renames a set of shards into
place (``headrace.io.sharded_writer``); while it exists the set under ``<prefix>-*`` may be incomplete."""


def check_complete_sets(paths: list[str]) -> None:
    """Raise ``FileNotFoundError`` if a path belongs to a shard set whose publication was interrupted.

    >>> hr.io.files.check_complete_sets(["out/train-00000-of-00002.tfrecord"])  # None: complete

    A ``ShardedWriter`` killed while renaming its shards into an existing directory leaves its journal
    ``.<prefix>.publishing``; reading a glob of that set would silently give part of the dataset.

    Args:
        paths: local paths (URLs are not checked).

    Raises:
        FileNotFoundError: a path of an incomplete set (naming the set, the journal and the fix).
    """
    journals: dict[str, list[str]] = {}
    for path in paths:
        if is_remote(path):
            continue
        d = os.path.dirname(local_path(path)) or "."
        if d not in journals:
            try:
                journals[d] = [n[1:-len(PUBLISHING_SUFFIX)] for n in os.listdir(d)
                               if n.startswith(".") and n.endswith(PUBLISHING_SUFFIX)]
            except OSError:
                journals[d] = []
        name = os.path.basename(path)
        for prefix in journals[d]:
            if name.startswith(prefix + "-"):
                raise FileNotFoundError(
                    f"{path}: the shard set {os.path.join(d, prefix)}-* is incomplete: a ShardedWriter was "
                    f"interrupted while publishing it (journal {os.path.join(d, '.' + prefix + PUBLISHING_SUFFIX)}"
                    "). Run headrace.io.ShardedWriter.recover(directory) to finish it, or write it again.")


def glob(pattern: str | bytes) -> list[str]:
    """Sorted matches of a glob pattern; remote matches keep their ``protocol://`` prefix.

    >>> hr.io.files.glob("demo_output/data/train/*.tfrecord")

    Args:
        pattern: a glob (``str`` or ``bytes``), local or fsspec URL.

    Returns:
        list[str]: the matches, sorted (``[]`` when nothing matches).

    Raises:
        FileNotFoundError: a match belongs to a shard set still being published (:func:`check_complete_sets`).
        MissingDependencyError: an ``s3://`` URL without its backend (``pip install 'headrace[s3]'``).
    """
    p = to_str_path(pattern)
    if is_remote(p):
        fs, fs_path = _url_fs(p)
        return _with_protocol(p, fs.glob(fs_path))
    found = sorted(_glob.glob(local_path(p)))
    check_complete_sets(found)
    return found


def _remote_dir(url: str) -> tuple[Any, str]:
    fs, fs_path = _url_fs(url)
    if not fs.isdir(fs_path):
        raise FileNotFoundError(f"no such directory: {url}")
    return fs, fs_path


def _local_dir(path: str) -> str:
    local = local_path(path)
    if not os.path.isdir(local):
        raise FileNotFoundError(f"no such directory: {path}")
    return local


def find(root: str | bytes) -> list[str]:
    """Every file under the directory ``root``, recursively, sorted; remote paths keep ``protocol://``.

    >>> hr.io.files.find("photos/")  # ['photos/cat/1.jpg', ...]

    Args:
        root: a local directory or URL.

    Returns:
        list[str]: the file paths.

    Raises:
        FileNotFoundError: ``root`` is not a directory (naming it).
        MissingDependencyError: an ``s3://`` URL without its backend (``pip install 'headrace[s3]'``).
    """
    r = to_str_path(root)
    if is_remote(r):
        fs, fs_path = _remote_dir(r)
        return _with_protocol(r, fs.find(fs_path))
    return sorted(os.path.join(d, n) for d, _, names in os.walk(_local_dir(r)) for n in names)


def subdirs(root: str | bytes) -> list[str]:
    """Names (not paths) of the directories directly inside ``root``, sorted.

    >>> hr.io.files.subdirs("photos/")  # ['cat', 'dog']: the class folders

    Args:
        root: a local directory or URL (``str`` or ``bytes``).

    Returns:
        list[str]: the directory names, without their path.

    Raises:
        FileNotFoundError: as :func:`find`.
        MissingDependencyError: as :func:`find`.
    """
    r = to_str_path(root)
    if is_remote(r):
        fs, fs_path = _remote_dir(r)
        return sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(fs_path, detail=True)
                      if e["type"] == "directory")
    return sorted(e.name for e in os.scandir(_local_dir(r)) if e.is_dir())


def exists(path: str) -> bool:
    """Whether a file or directory is at ``path``.

    >>> hr.io.files.exists("memory://x")  # False

    Args:
        path: a local path or URL.

    Returns:
        bool: whether something is there.
    """
    if is_remote(path):
        fs, p = _url_fs(path)
        return bool(fs.exists(p))
    return os.path.exists(local_path(path))


def isdir(path: str) -> bool:
    """Whether ``path`` is a directory.

    >>> hr.io.files.isdir("photos/")  # True

    Args:
        path: a local path or URL.

    Returns:
        bool: whether it is a directory.
    """
    if is_remote(path):
        fs, p = _url_fs(path)
        return bool(fs.isdir(p))
    return os.path.isdir(local_path(path))


def listdir(path: str) -> list[str]:
    """Names (not paths) in the directory ``path``, sorted.

    >>> hr.io.files.listdir("photos/cat")  # ['1.jpg', '2.jpg']

    Args:
        path: a local directory or URL.

    Returns:
        list[str]: the names; ``[]`` if it does not exist.
    """
    if is_remote(path):
        fs, p = _url_fs(path)
        if not fs.exists(p):
            return []
        return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(p, detail=False))
    try:
        return sorted(os.listdir(local_path(path)))
    except FileNotFoundError:
        return []


def makedirs(path: str) -> None:
    """Create the directory ``path`` and its parents (nothing if it exists).

    >>> hr.io.files.makedirs("out/train")

    Args:
        path: a local directory or URL.
    """
    if is_remote(path):
        fs, p = _url_fs(path)
        fs.makedirs(p, exist_ok=True)
    else:
        os.makedirs(local_path(path), exist_ok=True)


def remove(path: str) -> None:
    """Delete a file or a directory tree; nothing if it is not there.

    >>> hr.io.files.remove("out/tmp")

    Args:
        path: a local path or URL.
    """
    if is_remote(path):
        fs, p = _url_fs(path)
        if fs.exists(p):
            fs.rm(p, recursive=True)
        return
    p = local_path(path)
    if os.path.isdir(p) and not os.path.islink(p):
        shutil.rmtree(p, ignore_errors=True)
    else:
        try:
            os.remove(p)
        except FileNotFoundError:
            pass


def write_atomic(path: str, data: bytes | Callable[[IO[Any]], Any]) -> None:
    """Write a file so that readers, and a crash at any moment (even SIGKILL), see the old file or the whole new one.

    >>> hr.io.files.write_atomic("ckpt/model.pt", lambda f: torch.save(state, f))

    ``data`` goes to a temporary name beside ``path``, flushed to disk (``fsync`` where the file has a descriptor),
    then :func:`rename` moves it to ``path``: never a part.

    Args:
        path: the file to write (local path or URL).
        data: bytes, or a function writing to the open binary file (``torch.save``).
    """
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with open_file(tmp, "wb") as f:
        if callable(data):
            data(f)
        else:
            f.write(data)
        f.flush()
        if hasattr(f, "fileno"):
            try:
                os.fsync(f.fileno())
            except (OSError, ValueError):  # no descriptor (fsspec's remote files)
                pass
    rename(tmp, path)


def rename(src: str, dst: str) -> None:
    """Atomic rename on local disks (``os.replace``); ``fs.mv`` for URLs.

    >>> hr.io.files.rename("out/a.tmp", "out/a")

    Args:
        src: the path to move.
        dst: its new path (replaced if it exists, on local disks).
    """
    if is_remote(src):
        fs, s = _url_fs(src)
        _, d = _url_fs(dst)
        fs.mv(s, d)
        return
    os.replace(local_path(src), local_path(dst))
