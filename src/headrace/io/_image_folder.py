"""``image_folder``: a directory of images as a dataset, like Keras' ``image_dataset_from_directory``.

Layout (local path or fsspec URL)::

    root/
      cat/  0001.jpg  0002.png  more/0003.jpg
      dog/  0004.jpg ...

With ``labels="inferred"`` the sorted subdirectory names of ``root`` are the classes (``class_names``);
a file's label is the index of the subdirectory it is under (at any depth below it). Files directly in
``root`` are ignored. Files are listed once, when the dataset is created.

Elements are ``(image, label)`` (``label`` an ``np.int64``) or the image alone with ``labels=None``.
``image`` is the file's bytes, or with ``image_size`` the decoded ``uint8`` array
``(height, width, channels)`` (:func:`headrace.image.decode_and_resize`). Files are read (and decoded) in
a parallel ``map``; a file that cannot be decoded raises :class:`~headrace.ImageDecodeError` naming it,
which ``.ignore_errors()`` turns into a skip.

Differences from Keras: elements are not batched (add ``.batch(n)``), ``image_size`` defaults to ``None``
(encoded bytes: decode inside your own ``map``), and the file order is shuffled once per dataset, not
again every epoch (add ``.shuffle(n)`` for that).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._dataset import Dataset
from .._engine.context import IteratorContext
from .._engine.recipe import DatasetNode
from .._engine.stage import Stage
from .._engine.stage_support import check_state
from .._options import AUTOTUNE
from ..image.formats import IMAGE_EXTENSIONS
from . import files
from ._blocks import adopt_seed, check_shard, strided

_WHAT = "image_folder"


def _relative(path: str, root: str) -> str:
    if files.is_remote(root):
        p, r = path.split("://", 1)[-1].lstrip("/"), root.split("://", 1)[-1].strip("/")
        return p[len(r):].lstrip("/")
    return os.path.relpath(path, root.removeprefix("file://")).replace(os.sep, "/")


def _order(n: int, shuffle: bool, seed: int, num_shards: int, index: int) -> list[int]:
    """File indices this shard reads: every ``num_shards``-th of the sorted list, then shuffled."""
    mine = strided(range(n), num_shards, index)
    if shuffle:
        perm = np.random.default_rng(seed).permutation(len(mine))
        mine = [mine[i] for i in perm]
    return mine


class ImageFilesNode(DatasetNode):
    """The listing behind :func:`image_folder`: yields ``(path, label)`` (``bytes``, ``np.int64``) or
    ``path`` alone. Its state is the position in the (seeded) file order."""

    label = "image_folder"

    def __init__(self, paths: list[str], labels: list[int] | None, shuffle: bool, seed: int | None,
                 num_shards: int, index: int) -> None:
        super().__init__()
        self.paths = paths
        self.labels = labels
        self.shuffle = shuffle
        self.seed_given = seed is not None
        self.seed = int(np.random.default_rng().integers(2**62)) if seed is None else int(seed)
        self.num_shards, self.index = num_shards, index
        self._len = len(strided(range(len(paths)), num_shards, index))

    def cardinality(self) -> int:
        return self._len

    def make_iterator(self, ctx: IteratorContext) -> Stage:
        return _ImageFilesIterator(ctx, self)


class _ImageFilesIterator(Stage):
    kind = "image_folder"

    def __init__(self, ctx: IteratorContext, ds: ImageFilesNode) -> None:
        super().__init__(ctx)
        self._ds = ds
        self._seed = ds.seed
        self._order = _order(len(ds.paths), ds.shuffle, ds.seed, ds.num_shards, ds.index)
        self._pos = 0

    def __next__(self) -> Any:
        if self._pos >= len(self._order):
            raise StopIteration
        i = self._order[self._pos]
        self._pos += 1
        path = self._ds.paths[i].encode("utf-8")
        return path if self._ds.labels is None else (path, np.int64(self._ds.labels[i]))

    def _settings(self) -> dict[str, Any]:
        ds = self._ds
        return {"files": len(ds.paths), "shuffle": ds.shuffle, "num_shards": ds.num_shards, "index": ds.index}

    def get_state(self) -> dict[str, Any]:
        return {"kind": self.kind, **self._settings(), "seed": self._seed, "position": self._pos}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self.kind, **self._settings())
        self._seed = adopt_seed(state, self._ds.seed, self._ds.seed_given, self.kind)
        ds = self._ds
        self._order = _order(len(ds.paths), ds.shuffle, self._seed, ds.num_shards, ds.index)
        self._pos = int(state["position"])


class _Load:
    """The map function of :func:`image_folder`: read a file (and decode it)."""

    def __init__(self, image_size: tuple[int, int] | None, channels: int, labeled: bool) -> None:
        self.__name__ = "load_image" if image_size else "read_file"
        self.image_size = image_size
        self.channels = channels
        self.labeled = labeled

    def __call__(self, path: bytes, label: Any = None) -> Any:
        name = path.decode("utf-8")
        with files.open_file(name) as f:
            data: Any = f.read()
        if self.image_size is not None:
            from ..image import decode_and_resize

            data = decode_and_resize(data, self.image_size, self.channels, name=name)
        return (data, label) if self.labeled else data


def _list(root: str, labels: Any, class_names: Sequence[str] | None,
          extensions: tuple[str, ...]) -> tuple[list[str], list[int] | None, list[str]]:
    exts = tuple(e.lower() if e.startswith(".") else f".{e.lower()}" for e in extensions)
    all_files = [p for p in files.find(root) if p.lower().endswith(exts)]
    if labels != "inferred":
        return all_files, None if labels is None else [int(v) for v in labels], []
    found = files.subdirs(root)
    if class_names is not None:
        if sorted(class_names) != found or len(set(class_names)) != len(class_names):
            raise ValueError(f"{_WHAT}: class_names={list(class_names)} must be exactly the subdirectories of "
                             f"{root} ({found}) in the order you want as labels 0, 1, ...")
        found = list(class_names)
    by_class: dict[str, list[str]] = {name: [] for name in found}
    for p in all_files:
        rel = _relative(p, root).split("/")
        if len(rel) > 1 and rel[0] in by_class:
            by_class[rel[0]].append(p)
    paths, out_labels = [], []
    for label, name in enumerate(found):  # class by class, each sorted (Keras' order before shuffling)
        paths.extend(by_class[name])
        out_labels.extend([label] * len(by_class[name]))
    return paths, out_labels, found


def image_folder(root: str | os.PathLike[str], labels: str | Sequence[int] | None = "inferred",
                 class_names: Sequence[str] | None = None, shuffle: bool = True, seed: int | None = None,
                 extensions: Sequence[str] = IMAGE_EXTENSIONS, image_size: Sequence[int] | None = None,
                 channels: int = 3, validation_split: float | None = None, subset: str | None = None,
                 num_shards: int = 1, index: int = 0, num_parallel_calls: int | None = AUTOTUNE) -> Dataset:
    """A dataset of the images under ``root`` (see the module docstring for the layout and elements).

    >>> ds = hr.io.image_folder("photos/", image_size=(224, 224), validation_split=0.2, subset="training", seed=1)

    Args:
        root: a local directory or an fsspec URL (``s3://bucket/train``).
        labels: ``"inferred"`` (from subdirectories), ``None`` (images only, every image under ``root``), or
            a list of ints, one per image file under ``root`` in sorted path order.
        class_names: with ``"inferred"``: the subdirectory names in the order that gives labels 0, 1, ...
            (must be all of them). Default: sorted. The result's ``class_names`` attribute lists them.
        shuffle, seed: shuffle the file order (once, reproducibly with ``seed``; ``None``: a random seed
            drawn now and saved in the iterator state). ``shuffle=False``: class by class, sorted paths.
        extensions: file name endings to include (case-insensitive).
        image_size: ``(height, width)``: decode and resize each image (``uint8``, ``channels`` channels);
            ``None``: yield the encoded bytes.
        channels: 1, 3 or 4 (with ``image_size``).
        validation_split, subset: as Keras: a fraction in (0, 1) of the (shuffled) files, the last ones,
            forms ``subset="validation"``; the rest is ``subset="training"``. Use the same ``seed`` for both.
        num_shards, index: read only every ``num_shards``-th file starting at ``index`` (of the sorted
            list, before shuffling): disjoint and together complete, whatever the seeds.
        num_parallel_calls: threads that read (and decode) files; ``AUTOTUNE`` by default.

    Returns:
        A ``Dataset`` with attributes ``class_names`` (list of str) and ``file_paths`` (in file order).

    Raises:
        FileNotFoundError: ``root`` is not a directory.
        ValueError: no images found (naming ``root`` and the extensions), a ``labels`` list of the wrong
            length, bad ``class_names`` / ``subset`` / ``validation_split`` / shard arguments.
    """
    root_s = files.to_str_path(root)
    check_shard(num_shards, index, _WHAT)
    if not (labels in ("inferred", None) or (isinstance(labels, Sequence) and not isinstance(labels, str))):
        raise ValueError(f"{_WHAT}: labels={labels!r} must be 'inferred', None or a list of int labels")
    if class_names is not None and labels != "inferred":
        raise ValueError(f"{_WHAT}: class_names is only valid with labels='inferred'")
    paths, label_list, names = _list(root_s, labels, class_names, tuple(extensions))
    if not paths:
        raise ValueError(f"{_WHAT}: no images found in {root_s} (extensions {tuple(extensions)}"
                         f"{', in class subdirectories' if labels == 'inferred' else ''})")
    if label_list is not None and len(label_list) != len(paths):
        raise ValueError(f"{_WHAT}: labels has {len(label_list)} entries but {root_s} has {len(paths)} image "
                         "files; pass one label per file, in sorted path order")
    paths, label_list = _split(paths, label_list, validation_split, subset, shuffle, seed)
    source = ImageFilesNode(paths, label_list, shuffle, seed, num_shards, index)
    size = None if image_size is None else tuple(int(v) for v in image_size)
    if size is not None and channels not in (1, 3, 4):
        raise ValueError(f"{_WHAT}: channels={channels!r} must be 1, 3 or 4")
    ds = Dataset(source).map(_Load(size, channels, label_list is not None),  # type: ignore[arg-type]
                             num_parallel_calls=num_parallel_calls)
    ds.class_names = names  # type: ignore[attr-defined]
    ds.file_paths = [paths[i] for i in _order(len(paths), shuffle, source.seed, num_shards, index)]  # type: ignore[attr-defined]
    return ds


def _split(paths: list[str], labels: list[int] | None, validation_split: float | None, subset: str | None,
           shuffle: bool, seed: int | None) -> tuple[list[str], list[int] | None]:
    if validation_split is None and subset is None:
        return paths, labels
    if validation_split is None or not 0 < validation_split < 1 or subset not in ("training", "validation"):
        raise ValueError(f"{_WHAT}: validation_split={validation_split!r}, subset={subset!r}: use a fraction "
                         "in (0, 1) together with subset='training' or 'validation'")
    order = list(range(len(paths)))
    if shuffle:
        if seed is None:
            raise ValueError(f"{_WHAT}: validation_split with shuffle=True needs a seed, so that the training and "
                             "validation subsets do not overlap; pass seed=<int> to both calls")
        order = np.random.default_rng([seed, 1]).permutation(len(paths)).tolist()
    n_val = int(validation_split * len(paths))
    chosen = sorted(order[len(paths) - n_val:] if subset == "validation" else order[:len(paths) - n_val])
    return [paths[i] for i in chosen], None if labels is None else [labels[i] for i in chosen]

