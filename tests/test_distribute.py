"""headrace.distribute: rank discovery from the torchrun environment and shard assignment."""

from __future__ import annotations

import numpy as np
import pytest

import headrace as hr
from headrace import distribute


@pytest.fixture
def no_torchrun_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_single_process_defaults(no_torchrun_env: pytest.MonkeyPatch) -> None:
    info = distribute.process_info()
    assert (info.rank, info.world_size, info.local_rank) == (0, 1, 0)
    assert not info.is_distributed and info.is_main


def test_reads_torchrun_environment(no_torchrun_env: pytest.MonkeyPatch) -> None:
    no_torchrun_env.setenv("RANK", "3")
    no_torchrun_env.setenv("WORLD_SIZE", "4")
    no_torchrun_env.setenv("LOCAL_RANK", "1")
    no_torchrun_env.setenv("LOCAL_WORLD_SIZE", "2")
    info = distribute.process_info()
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (3, 4, 1, 2)
    assert distribute.rank() == 3 and distribute.world_size() == 4 and distribute.local_rank() == 1
    assert info.is_distributed and not info.is_main


@pytest.mark.parametrize(("rank", "world", "match"), [("x", "2", "RANK='x'"), ("2", "2", "RANK must be in"),
                                                       ("0", "0", "WORLD_SIZE")])
def test_bad_environment_is_named(no_torchrun_env: pytest.MonkeyPatch, rank: str, world: str,
                                  match: str) -> None:
    no_torchrun_env.setenv("RANK", rank)
    no_torchrun_env.setenv("WORLD_SIZE", world)
    with pytest.raises(ValueError, match=match):
        distribute.process_info()


@pytest.mark.parametrize("num_files", [1, 2, 5, 7, 16])
@pytest.mark.parametrize("num_shards", [1, 2, 3, 4])
def test_shard_files_disjoint_and_complete(num_files: int, num_shards: int) -> None:
    files = [f"/data/train-{i:05d}.tfrecord" for i in reversed(range(num_files))]
    shares = [distribute.shard_files(files, num_shards, r) for r in range(num_shards)]
    flat = [f for s in shares for f in s]
    assert sorted(flat) == sorted(files) and len(flat) == len(set(flat))
    assert shares[0][0] == "/data/train-00000.tfrecord"  # sorted first: every rank agrees on the order


def test_resolve_policy() -> None:
    assert distribute.resolve_policy("auto", 8, 4) == "file"
    assert distribute.resolve_policy("auto", 3, 4) == "data"
    assert distribute.resolve_policy("data", 8, 4) == "data"
    assert distribute.resolve_policy("file", 8, 1) == "off"
    with pytest.raises(ValueError, match="at least one file per rank: 2 file"):
        distribute.resolve_policy("file", 2, 4)
    with pytest.raises(ValueError, match="'bogus' is not one of"):
        distribute.resolve_policy("bogus", 2, 4)  # type: ignore[arg-type]


@pytest.mark.parametrize(("num_files", "policy", "expect_files_per_rank"),
                         [(6, "auto", True), (2, "auto", False), (6, "data", False)])
def test_auto_shard_gives_disjoint_complete_datasets(num_files: int, policy: str,
                                                      expect_files_per_rank: bool) -> None:
    contents = {f"f{i}": np.arange(10 * i, 10 * i + 10) for i in range(num_files)}
    opened: list[list[str]] = []

    def make(fs: list[str]) -> hr.Dataset:
        opened.append(fs)
        return hr.Dataset.from_tensor_slices(np.concatenate([contents[f] for f in fs]))

    world = 3
    seen = []
    for r in range(world):
        ds = distribute.auto_shard(sorted(contents), make, policy=policy, num_shards=world,  # type: ignore[arg-type]
                                   index=r)
        seen.append([int(x) for x in ds])
    flat = [x for s in seen for x in s]
    assert sorted(flat) == list(range(10 * num_files))
    assert len(flat) == len(set(flat))
    assert all(len(fs) < num_files for fs in opened) == expect_files_per_rank


def test_auto_shard_errors() -> None:
    with pytest.raises(ValueError, match="file list is empty"):
        distribute.auto_shard([], lambda fs: hr.Dataset.range(1))
    with pytest.raises(ValueError, match=r"index=5 must be an int in \[0, 2\)"):
        distribute.auto_shard(["a"], lambda fs: hr.Dataset.range(1), num_shards=2, index=5)
