"""Who am I in a distributed job, and which part of the data is mine.

Rank discovery
--------------
:func:`process_info` reads, in this order: an initialized ``torch.distributed`` process group, then the
environment ``torchrun`` sets (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``), then
falls back to a single process (rank 0 of 1). It never imports torch unless torch is already imported.

Shard assignment (tf.data's ``AutoShardPolicy``)
------------------------------------------------
- ``"file"``: rank ``r`` of ``n`` reads files ``r, r + n, r + 2n, ...`` of the sorted file list. Cheapest
  (each rank opens only its own files) but needs at least ``n`` files; ranks may get unequal element
  counts when files differ in size.
- ``"data"``: every rank reads every file and keeps elements ``r, r + n, ...`` (``Dataset.shard``).
  Works for any file count; each rank reads all bytes.
- ``"auto"`` (default): ``"file"`` when there are at least ``world_size`` files, else ``"data"``.
- ``"off"``: no sharding (every rank sees everything).

Every policy gives disjoint shares that together are the whole dataset (``"off"`` excepted). A share's
position is per rank, so a checkpoint of it resumes mid-epoch only with the same world size; for a global
order that resumes with any world size see :class:`headrace.train.ElasticDataset`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

if TYPE_CHECKING:
    from ._dataset import Dataset

ShardPolicy = Literal["auto", "file", "data", "off"]
_POLICIES = ("auto", "file", "data", "off")
T = TypeVar("T")


@dataclass(frozen=True)
class ProcessInfo:
    """This process's place in the job: ``rank`` in ``[0, world_size)``, ``local_rank`` on its host."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """True on rank 0, the process that writes checkpoints and prints."""
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer; torchrun sets it to a "
                         "non-negative integer, unset it to run as a single process") from None


def process_info() -> ProcessInfo:
    """The rank, world size and local rank of this process (see the module docstring for the order).

    Raises:
        ValueError: an environment variable is not an integer, or ``RANK`` is not in
            ``[0, WORLD_SIZE)``.
    """
    torch = sys.modules.get("torch")
    if torch is not None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            rank, world = dist.get_rank(), dist.get_world_size()
            return ProcessInfo(rank=rank, world_size=world, local_rank=_env_int("LOCAL_RANK", rank),
                               local_world_size=_env_int("LOCAL_WORLD_SIZE", world))
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"RANK={rank} WORLD_SIZE={world}: RANK must be in [0, WORLD_SIZE) and WORLD_SIZE "
                         ">= 1; launch with torchrun or unset both")
    return ProcessInfo(rank=rank, world_size=world, local_rank=_env_int("LOCAL_RANK", rank),
                       local_world_size=_env_int("LOCAL_WORLD_SIZE", world))


def rank() -> int:
    """This process's global rank (0 when not distributed)."""
    return process_info().rank


def world_size() -> int:
    """The number of processes in the job (1 when not distributed)."""
    return process_info().world_size


def local_rank() -> int:
    """This process's rank on its host (selects the GPU: ``cuda:{local_rank}``)."""
    return process_info().local_rank


def _check_rank(num_shards: int, index: int) -> None:
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
        raise ValueError(f"num_shards={num_shards!r} must be an int >= 1")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < num_shards:
        raise ValueError(f"index={index!r} must be an int in [0, {num_shards})")


def resolve_policy(policy: ShardPolicy, num_files: int, num_shards: int) -> Literal["file", "data", "off"]:
    """The concrete policy ``"auto"`` stands for: ``"file"`` if ``num_files >= num_shards`` else ``"data"``.

    Raises:
        ValueError: an unknown policy, or ``"file"`` with fewer files than shards (some ranks would get
            no data; use ``"data"`` or write more shards).
    """
    if policy not in _POLICIES:
        raise ValueError(f"shard policy {policy!r} is not one of {_POLICIES}")
    if num_shards == 1 or policy == "off":
        return "off"
    if policy == "auto":
        return "file" if num_files >= num_shards else "data"
    if policy == "file" and num_files < num_shards:
        raise ValueError(f"shard policy 'file' needs at least one file per rank: {num_files} "
                         f"file(s) for {num_shards} ranks; use policy='data' or write the dataset in "
                         f">= {num_shards} shards")
    return policy


def shard_files(files: Sequence[T], num_shards: int, index: int) -> list[T]:
    """Files ``index, index + num_shards, ...`` of ``files`` (sorted first when they are strings/bytes).

    The shares of ``index = 0 .. num_shards - 1`` are disjoint and together hold every file.
    """
    _check_rank(num_shards, index)
    items = list(files)
    if all(isinstance(f, str | bytes | os.PathLike) for f in items):
        items = sorted(items, key=lambda f: os.fsdecode(cast(Any, f)) if not isinstance(f, str) else f)
    return items[index::num_shards]


def auto_shard(files: Sequence[Any], make_dataset: Callable[[list[Any]], Dataset], *,
               policy: ShardPolicy = "auto", num_shards: int | None = None,
               index: int | None = None) -> Dataset:
    """This rank's share of the dataset ``make_dataset(files)``.

    Args:
        files: every file of the dataset (all ranks must pass the same list).
        make_dataset: builds the pipeline from a list of files, e.g.
            ``lambda fs: hr.io.TFRecordDataset(fs).map(parse)``.
        policy: ``"auto"``, ``"file"``, ``"data"`` or ``"off"`` (module docstring).
        num_shards, index: default to :func:`world_size` and :func:`rank`.

    Returns:
        ``make_dataset(shard_files(files, n, r))`` under ``"file"``; ``make_dataset(files).shard(n, r)``
        under ``"data"``; ``make_dataset(files)`` under ``"off"``.

    Raises:
        ValueError: an empty file list, bad ``num_shards``/``index``, or see :func:`resolve_policy`.
    """
    files = list(files)
    if not files:
        raise ValueError("auto_shard: the file list is empty; check the glob pattern or directory")
    info = process_info()
    n = info.world_size if num_shards is None else num_shards
    r = info.rank if index is None else index
    _check_rank(n, r)
    concrete = resolve_policy(policy, len(files), n)
    if concrete == "file":
        return make_dataset(shard_files(files, n, r))
    if concrete == "data":
        return make_dataset(shard_files(files, 1, 0)).shard(n, r)
    return make_dataset(files)


__all__ = ["ProcessInfo", "ShardPolicy", "auto_shard", "local_rank", "process_info", "rank",
           "resolve_policy", "shard_files", "world_size"]
