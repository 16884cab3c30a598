"""What every source shares: rejected rows, listing the files of a source, work units."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from ...io import files
from ...io.files import join
from ..schema import Row


class Rejected(NamedTuple):
    """A source row that could not be converted: ``id`` (the source ID it would have had), ``location``
    (file and line / row / byte offset) and ``reason`` (the error, with its fix)."""

    id: str
    location: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "location": self.location, "reason": self.reason}


Item = Row | Rejected


class Source:
    """A dataset to convert, split into work units that Beam workers read in parallel.

    ``units()`` is a deterministic list of small picklable work items; ``read(unit)`` yields the rows of
    one unit (``(source_id, features)``, see :mod:`headrace.convert.schema`) and :class:`Rejected` items;
    together the units yield every record of the source exactly once, with unique source IDs.
    ``describe()`` is the manifest's ``source`` entry; ``estimate_bytes()`` about the size of the records
    it makes (from file sizes: it sets the shard count for ``shard_size``); ``label_features`` names the
    features whose values get a histogram.
    """

    kind = "source"
    label_features: tuple[str, ...] = ("label",)

    def __init__(self, path: str) -> None:
        self.path = path

    def units(self) -> list[Any]:
        raise NotImplementedError

    def read(self, unit: Any) -> Iterator[Item]:
        raise NotImplementedError

    def estimate_bytes(self) -> int:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path}


def total_size(root: str, names: Sequence[str]) -> int:
    """Bytes of the files ``names`` under ``root``."""
    return sum(files.file_size(join(root, n)) for n in names)


def list_files(path: str, extensions: Sequence[str], what: str) -> tuple[str, list[str]]:
    """``(root, relative names)`` of the source files at ``path``: a file, a directory (searched
    recursively for ``extensions``, hidden files skipped; only the shards of a directory holding a
    conversion's ``dataset.json``) or a glob pattern. Names are relative to
    ``root`` (the directory, or the deepest directory holding every match), ``/``-separated, sorted.

    Raises ``FileNotFoundError`` naming ``path`` when nothing matches.
    """
    if any(c in path for c in "*?["):
        found = files.glob(path)
    elif files.isdir(path):
        root = path.rstrip("/") or "/"
        converted = _converted_shards(root)
        found = converted if converted is not None else files.find(path)
        found = [f for f in found if f.lower().endswith(tuple(extensions))]
        found = [f for f in found if not any(p.startswith(".") for p in relative(f, root).split("/"))]
        if not found:
            raise FileNotFoundError(f"{what}: no {'/'.join(extensions)} files in the directory {path}")
        return root, sorted(relative(f, root) for f in found)
    else:
        found = [path] if files.exists(path) else []
    found = [f for f in found if f.lower().endswith(tuple(extensions))]
    if not found:
        raise FileNotFoundError(f"{what}: {path} matches no {'/'.join(extensions)} file")
    root = _common_dir(found)
    return root, sorted(relative(f, root) for f in found)


def _converted_shards(root: str) -> list[str] | None:
    """The shards of a directory that holds a finished conversion (its ``dataset.json``), else ``None``."""
    from ..manifest import MANIFEST, ManifestError, load_manifest, shard_paths

    if not files.exists(join(root, MANIFEST)):
        return None
    try:
        return shard_paths(root, load_manifest(root))
    except ManifestError:
        return None  # a JSON file of the user's that happens to be called dataset.json


def relative(path: str, root: str) -> str:
    if files.is_remote(root):
        return path[len(root.rstrip("/")):].lstrip("/")
    return os.path.relpath(path, root).replace(os.sep, "/")


def _common_dir(paths: list[str]) -> str:
    if files.is_remote(paths[0]):
        parts = [p.rsplit("/", 1)[0] for p in paths]
        common = parts[0]
        while any(not (p == common or p.startswith(common + "/")) for p in parts):
            common = common.rsplit("/", 1)[0]
        return common
    return os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in paths])
