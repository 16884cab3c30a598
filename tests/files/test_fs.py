"""headrace._files.fs (public as headrace.io.files), the one file-system shim: the same answers for a local
directory and an fsspec URL."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from headrace._files import fs as files
from headrace.io import files as public_files


@pytest.fixture(params=["local", "file", "memory"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return f"memory://hr-files-{uuid.uuid4().hex}"
    return str(tmp_path) if request.param == "local" else f"file://{tmp_path}"


def test_directories_and_atomic_writes(root: str) -> None:
    d = files.join(root, "a")
    assert not files.exists(d) and files.listdir(d) == []
    files.makedirs(files.join(d, "sub"))
    assert files.isdir(d) and files.isdir(files.join(d, "sub")) and files.listdir(d) == ["sub"]
    target = files.join(d, "x.json")
    files.write_atomic(target, b"one")
    files.write_atomic(target, b"two")  # replaced whole; no temporary file left beside it
    assert files.listdir(d) == ["sub", "x.json"] and not files.isdir(target)
    with files.open_file(target) as f:
        assert f.read() == b"two"
    files.write_atomic(target, lambda f: f.write(b"six"))  # a writer (torch.save: train/checkpoint.py)
    with files.open_file(target) as f:
        assert f.read() == b"six"
    assert files.listdir(d) == ["sub", "x.json"]
    assert files.file_size(target) == 3 and files.exists(target)
    files.remove(target)
    files.remove(target)  # nothing there: no error
    files.remove(d)  # a tree
    assert not files.exists(d) and not files.exists(files.join(d, "sub"))


def test_join_and_local_paths(tmp_path: Path) -> None:
    assert files.join("s3://b/dir/", "x") == "s3://b/dir/x"
    assert files.join(f"file://{tmp_path}", "x") == str(tmp_path / "x") == files.join(str(tmp_path), "x")
    assert files.local_path(f"file://{tmp_path}") == str(tmp_path)
    assert files.is_remote("memory://x") and not files.is_remote(f"file://{tmp_path}")


def test_headrace_io_files_is_the_same_shim():
    assert public_files.__all__ and all(getattr(public_files, n) is getattr(files, n) for n in public_files.__all__)
    public = {n for n in vars(files) if not n.startswith("_") and callable(getattr(files, n))
              and getattr(getattr(files, n), "__module__", "") == files.__name__}
    assert public <= set(public_files.__all__), f"headrace.io.files misses {sorted(public - set(public_files.__all__))}"
