"""``Dataset.list_files``: file names matching glob patterns, as ``bytes`` (tf.data's ``tf.string``).

The patterns are matched when the dataset is built (as tf.data does), local paths with ``glob`` and
URLs (``s3://``, ``gs://``, ``memory://``) through fsspec. Names are sorted, de-duplicated, and then
shuffled unless ``shuffle=False`` (tf.data's default ``shuffle=None`` means shuffle), reshuffled every
iteration; ``seed`` makes the order reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._engine.recipe import DatasetNode, node_of
from .._files import fs
from .in_memory import TensorSlicesNode
from .shuffle import ShuffleNode


def list_files(file_pattern: str | bytes | Sequence[str | bytes], *, shuffle: bool | None,
               seed: int | None) -> DatasetNode:
    """The node of ``Dataset.list_files``, matching the patterns through the file-system shim
    (``headrace._files.fs``, public as ``headrace.io.files``)."""
    if node_of(file_pattern) is not None:
        raise TypeError("list_files(file_pattern=Dataset): pass the pattern(s) as str or a list of str")
    patterns = [file_pattern] if isinstance(file_pattern, str | bytes) else list(file_pattern)
    if not patterns:
        raise ValueError("list_files: no pattern given; pass a glob such as 'data/train-*.tfrecord'")
    names: set[str] = set()
    for p in patterns:
        names.update(fs.glob(fs.to_str_path(p)))
    if not names:
        shown = [fs.to_str_path(p) for p in patterns]
        raise FileNotFoundError(f"list_files: no files matched pattern {shown[0] if len(shown) == 1 else shown}; "
                                "check the path and the wildcard (e.g. 'dir/*.tfrecord')")
    files = np.empty(len(names), dtype=object)
    files[:] = [n.encode("utf-8") for n in sorted(names)]
    node: DatasetNode = TensorSlicesNode(files)
    if shuffle is None or shuffle:
        node = ShuffleNode(node, len(files), seed, True)
    return node
