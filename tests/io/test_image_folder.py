"""image_folder on directories of images written by OpenCV and Pillow."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from io_reader_checks import assert_disjoint_complete, assert_state_roundtrip
from PIL import Image

import headrace as hr
from headrace import ImageDecodeError
from headrace import image as himg
from headrace.io import image_folder


def _img(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return cv2.resize(rng.integers(0, 256, (4, 5, 3), dtype=np.uint8), (40, 30), interpolation=cv2.INTER_LINEAR)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """root/cat/*.jpg (OpenCV), root/dog/*.png + dog/puppies/*.PNG (Pillow), empty root/emu, noise files."""
    root = tmp_path_factory.mktemp("images")
    expected: dict[str, int] = {}
    for i in range(5):
        p = root / "cat" / f"c{i}.jpg"
        p.parent.mkdir(exist_ok=True)
        cv2.imwrite(str(p), _img(i))
        expected[str(p)] = 0
    for i in range(4):
        p = root / "dog" / (f"d{i}.png" if i < 2 else f"puppies/p{i}.PNG")
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(_img(10 + i)).save(p)
        expected[str(p)] = 1
    (root / "emu").mkdir()
    (root / "cat" / "notes.txt").write_text("not an image")
    Image.fromarray(_img(99)).save(root / "stray.png")  # directly in root: no class
    expected["root"] = str(root)  # type: ignore[assignment]
    return expected


def _root(folder: dict) -> str:
    return folder["root"]


def _by_path(ds: hr.Dataset) -> dict[bytes, int]:
    """Map file bytes -> label (bytes are unique per file here)."""
    return {data: int(label) for data, label in ds}


def test_inferred_labels_and_bytes(folder: dict) -> None:
    ds = image_folder(_root(folder), seed=0)
    assert ds.class_names == ["cat", "dog", "emu"]
    assert len(ds) == 9 and len(ds.file_paths) == 9
    got = _by_path(ds)
    want = {Path(p).read_bytes(): label for p, label in folder.items() if p != "root"}
    assert got == want
    data, label = next(iter(ds))
    assert isinstance(data, bytes) and label.dtype == np.int64


def test_order_shuffled_reproducibly_and_file_paths(folder: dict) -> None:
    a = image_folder(_root(folder), seed=5)
    b = image_folder(_root(folder), seed=5)
    order = [Path(p).read_bytes() for p in a.file_paths]
    assert [d for d, _ in a] == order == [d for d, _ in b]
    plain = image_folder(_root(folder), shuffle=False)
    names = [Path(p).relative_to(_root(folder)).as_posix() for p in plain.file_paths]
    assert names == ["cat/c0.jpg", "cat/c1.jpg", "cat/c2.jpg", "cat/c3.jpg", "cat/c4.jpg", "dog/d0.png",
                     "dog/d1.png", "dog/puppies/p2.PNG", "dog/puppies/p3.PNG"]
    assert order != [Path(p).read_bytes() for p in plain.file_paths]


def test_image_size_decodes(folder: dict) -> None:
    ds = image_folder(_root(folder), shuffle=False, image_size=(16, 20))
    images = list(ds)
    assert len(images) == 9
    for (img, label), path in zip(images, ds.file_paths):
        assert img.shape == (16, 20, 3) and img.dtype == np.uint8
        np.testing.assert_array_equal(img, himg.decode_and_resize(Path(path).read_bytes(), (16, 20)))
        assert label == (0 if "/cat/" in path else 1)
    grey = next(iter(image_folder(_root(folder), image_size=(8, 8), channels=1)))[0]
    assert grey.shape == (8, 8, 1)


def test_class_names_order_and_labels_none_or_list(folder: dict) -> None:
    ds = image_folder(_root(folder), class_names=["emu", "dog", "cat"], shuffle=False)
    assert {int(lbl) for _, lbl in ds} == {1, 2}
    plain = list(image_folder(_root(folder), labels=None, shuffle=False))
    assert len(plain) == 10 and all(isinstance(x, bytes) for x in plain)  # includes root/stray.png
    listed = image_folder(_root(folder), labels=list(range(10, 20)), shuffle=False)
    assert [int(lbl) for _, lbl in listed] == list(range(10, 20))


def test_validation_split_disjoint_complete(folder: dict) -> None:
    train = image_folder(_root(folder), validation_split=0.34, subset="training", seed=3)
    val = image_folder(_root(folder), validation_split=0.34, subset="validation", seed=3)
    assert len(val) == 3 and len(train) == 6
    assert_disjoint_complete([train.file_paths, val.file_paths], [p for p in folder if p != "root"])


def test_shards_disjoint_complete(folder: dict) -> None:
    shards = [image_folder(_root(folder), num_shards=2, index=i, seed=i).file_paths for i in range(2)]
    assert_disjoint_complete(shards, [p for p in folder if p != "root"])
    got = [Path(p).read_bytes() for p in shards[1]]
    assert [d for d, _ in image_folder(_root(folder), num_shards=2, index=1, seed=1)] == got


def test_state_roundtrip(folder: dict) -> None:
    assert assert_state_roundtrip(image_folder(_root(folder), image_size=(8, 8), num_parallel_calls=2)) == 9


def test_fsspec_memory_url(folder: dict) -> None:
    import fsspec

    mem = fsspec.filesystem("memory")
    for p in folder:
        if p != "root":
            mem.pipe(f"/hr-if/{Path(p).relative_to(_root(folder)).as_posix()}", Path(p).read_bytes())
    try:
        ds = image_folder("memory://hr-if", seed=0)
        assert ds.class_names == ["cat", "dog"]  # emu is empty: no directory in an object store
        assert _by_path(ds) == {Path(p).read_bytes(): lbl for p, lbl in folder.items() if p != "root"}
    finally:
        mem.rm("/hr-if", recursive=True)


# ---- bad input ----------------------------------------------------------------------------------------------
def test_corrupt_image_named_or_skipped(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / "a").mkdir(exist_ok=True)
        cv2.imwrite(str(tmp_path / "a" / f"{i}.jpg"), _img(i))
    (tmp_path / "a" / "1.jpg").write_bytes(b"\xff\xd8\xff\xe0 broken")
    ds = image_folder(str(tmp_path), shuffle=False, image_size=(8, 8))
    with pytest.raises(ImageDecodeError, match=r"a/1\.jpg"):
        list(ds)
    survivors = list(ds.ignore_errors())
    assert len(survivors) == 2
    np.testing.assert_array_equal(survivors[1][0], himg.decode_and_resize((tmp_path / "a" / "2.jpg").read_bytes(),
                                                                          (8, 8)))


def test_missing_and_empty_root(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such directory"):
        image_folder(str(tmp_path / "nope"))
    (tmp_path / "cls").mkdir()
    (tmp_path / "cls" / "readme.txt").write_text("x")
    with pytest.raises(ValueError, match=r"no images found in .* \(extensions"):
        image_folder(str(tmp_path))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"labels": [1, 2]}, "labels has 2 entries but"),
    ({"labels": "folders"}, "labels='folders'"),
    ({"class_names": ["cat", "dog"]}, "must be exactly the subdirectories"),
    ({"labels": None, "class_names": ["cat"]}, "only valid with labels='inferred'"),
    ({"validation_split": 0.2, "subset": "test", "seed": 1}, "subset='test'"),
    ({"validation_split": 0.2, "subset": "training"}, "needs a seed"),
    ({"image_size": (8, 8), "channels": 2}, "channels=2"),
    ({"num_shards": 2, "index": 2}, "index=2"),
])
def test_bad_arguments(folder: dict, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        image_folder(_root(folder), **kwargs)
