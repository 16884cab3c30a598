"""The file-system shim, public here as ``headrace.io.files``: files and directories by local path or fsspec
URL (``s3://``, ``gs://``, ``memory://``, ``file://``).

Its home is ``headrace._files.fs``, below the ``Dataset`` facade (``list_files``, ``save`` and ``load`` use it
without importing ``headrace.io``); this module re-exports it. Reading: :func:`open_file`, :func:`file_size`,
:func:`exists`, :func:`isdir`, :func:`glob`, :func:`find`, :func:`subdirs`, :func:`listdir`. Writing:
:func:`open_file` (``"wb"``), :func:`makedirs`, :func:`rename` (atomic on local disks), :func:`write_atomic`,
:func:`remove`. Paths: :func:`to_str_path`, :func:`is_remote`, :func:`local_path`, :func:`join`.
"""

from __future__ import annotations

from .._files.fs import (
    PUBLISHING_SUFFIX,
    check_complete_sets,
    exists,
    file_size,
    find,
    glob,
    is_remote,
    isdir,
    join,
    listdir,
    local_path,
    makedirs,
    open_file,
    remove,
    rename,
    subdirs,
    to_str_path,
    write_atomic,
)

__all__ = ["PUBLISHING_SUFFIX", "check_complete_sets", "exists", "file_size", "find", "glob", "is_remote", "isdir",
           "join", "listdir", "local_path", "makedirs", "open_file", "remove", "rename", "subdirs", "to_str_path",
           "write_atomic"]
