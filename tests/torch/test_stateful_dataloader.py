"""to_torch under torchdata's StatefulDataLoader (issue 25): the state after k batches, loaded into a new loader,
gives exactly the rest of an uninterrupted run (shuffled, across an epoch boundary, with 0 and 2 workers, fork
and spawn), and a restore of a restore does too. Ids are the elements (0 .. N-1 reshuffled per epoch).

The "uninterrupted run" is a loader of the same kind iterated for EPOCHS epochs; that its epochs are
reshuffled and complete is checked too, so a restore that restarted or repeated an epoch could not pass."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("torchdata")

import resume_cases as rc
from torch.utils.data import DataLoader

import headrace as hr
from headrace import StateError
from headrace.torch import to_torch

EPOCHS = 3
LOADERS = [(0, None), (2, "fork")]
LOADER_IDS = ["main", "2-fork"]
PER_EPOCH = {0: 6, 2: 6}  # batches per epoch (24 ids in 4s; 2 workers: 12 each, 3 batches each)


def take(loader: Any, k: int, epochs: int = EPOCHS) -> tuple[list[list[int]], bool]:
    """Up to ``k`` batches (as id lists) from ``loader``, going on over epochs; and whether it stopped because
    ``k`` were taken (``False``: ``epochs`` epochs ran out first)."""
    out: list[list[int]] = []
    for _ in range(epochs):
        for batch in loader:
            out.append([int(v) for v in batch])
            if len(out) == k:
                return out, True
    return out, False


def rest(loader: Any, epochs: int) -> list[list[int]]:
    """Every batch of the next ``epochs`` iterations of ``loader`` (the first may be the rest of a restored
    epoch, possibly empty)."""
    return [[int(v) for v in batch] for _ in range(epochs) for batch in loader]


@pytest.fixture(scope="module")
def uninterrupted() -> dict[tuple[int, str | None], list[list[int]]]:
    runs = {}
    for workers, context in LOADERS:
        batches = rest(rc.stateful_loader(workers, context), EPOCHS)
        ids = [i for b in batches for i in b]
        epochs = [sorted(ids[e * rc.N:(e + 1) * rc.N]) for e in range(EPOCHS)]
        assert epochs == [list(range(rc.N))] * EPOCHS, f"an epoch lost or repeated ids: {batches}"
        assert len({tuple(ids[e * rc.N:(e + 1) * rc.N]) for e in range(EPOCHS)}) == EPOCHS, "epochs not reshuffled"
        runs[workers, context] = batches
    return runs


@pytest.mark.parametrize(("workers", "context"), LOADERS, ids=LOADER_IDS)
@pytest.mark.parametrize("k", [4, 6, 9], ids=["mid-epoch0", "end-of-epoch0", "mid-epoch1"])
def test_the_restored_loader_gives_exactly_the_rest(workers: int, context: str | None, k: int,
                                                    uninterrupted: dict) -> None:
    expected = uninterrupted[workers, context]
    first = rc.stateful_loader(workers, context)
    head, full = take(first, k)
    assert full and head == expected[:k]
    state = json.loads(json.dumps(first.state_dict()))  # the state is JSON: what a checkpoint holds
    second = rc.stateful_loader(workers, context)
    second.load_state_dict(state)
    epoch_of_k = (k - 1) // PER_EPOCH[workers]  # the epoch the k-th batch is in: its rest, then the others
    got = rest(second, EPOCHS - epoch_of_k)
    assert head + got == expected, f"state after {k} batches: the rest {got}, expected {expected[k:]}"


def test_spawned_workers_restore_across_an_epoch_boundary(uninterrupted: dict) -> None:
    """Spawned workers (persistent: spawning is slow) restore a state taken in epoch 1: it reaches them by pickle,
    with the dataset. Every start method gives the same orders and shards (test_torch_epochs), so the state is
    taken with forked workers (half the spawning) and fork's run is the reference."""
    expected = uninterrupted[2, "fork"]
    first = rc.stateful_loader(2, "fork")
    head, _ = take(first, 8)
    state = json.loads(json.dumps(first.state_dict()))
    del first  # (its workers stop)
    second = rc.stateful_loader(2, "spawn", persistent_workers=True)
    second.load_state_dict(state)
    assert head + rest(second, EPOCHS - 1) == expected


@pytest.mark.parametrize(("workers", "context"), LOADERS, ids=LOADER_IDS)
def test_a_restore_of_a_restore(workers: int, context: str | None, uninterrupted: dict) -> None:
    expected = uninterrupted[workers, context]
    first = rc.stateful_loader(workers, context)
    head, _ = take(first, 2)
    second = rc.stateful_loader(workers, context)
    second.load_state_dict(first.state_dict())
    middle, _ = take(second, 6)  # the rest of epoch 0 and two batches of epoch 1
    third = rc.stateful_loader(workers, context)
    third.load_state_dict(second.state_dict())
    got = rest(third, EPOCHS - 1)
    assert head + middle + got == expected


def test_persistent_workers_restore_and_go_on_to_the_next_epochs(uninterrupted: dict) -> None:
    expected = uninterrupted[2, "fork"]
    first = rc.stateful_loader(2, "fork", persistent_workers=True)
    head, _ = take(first, 4)
    second = rc.stateful_loader(2, "fork", persistent_workers=True)
    second.load_state_dict(first.state_dict())
    assert head + rest(second, EPOCHS) == expected


def test_the_state_holds_headraces_own_iterator_state() -> None:
    """Without workers the loader's state carries the dataset iterator's state_dict: the epoch, the worker
    share and headrace's ``Iterator.get_state()`` (not a count of batches to replay)."""
    loader = rc.stateful_loader()
    take(loader, 2)
    state = loader.state_dict()["fetcher_state"]["dataset_iter_state"]
    assert state["format"] == "headrace.torch.position" and state["epoch"] == 0 and state["worker"] == [0, 1]
    assert state["position"]["format"] == "headrace.iterator"
    assert not state["done"]


def test_a_plain_dataloader_over_a_restored_dataset_continues() -> None:
    """The dataset-level protocol (what Lightning calls on to_torch(ds) given directly, and ExactlyOnce on a
    plain DataLoader's dataset): state_dict() is this process's position, load_state_dict() applies to the
    next iter(), the epochs after it go on."""
    ds = to_torch(rc.pipeline())
    loader = DataLoader(ds, batch_size=None)
    expected = rest(DataLoader(to_torch(rc.pipeline()), batch_size=None), 2)
    it = iter(loader)
    head = [[int(v) for v in next(it)] for _ in range(3)]
    state = ds.state_dict()
    again = to_torch(rc.pipeline())
    assert again.state_dict()["epoch"] == 0 and again.state_dict()["position"] is None  # before any iter()
    again.load_state_dict(state)
    assert head + rest(DataLoader(again, batch_size=None), 2) == expected


def test_states_from_elsewhere_are_refused() -> None:
    ds = to_torch(rc.pipeline())
    with pytest.raises(StateError, match="not a headrace to_torch state"):
        ds.load_state_dict({"format": "something else"})
    with pytest.raises(StateError, match="epoch is -1"):
        ds.load_state_dict({**ds.state_dict(), "epoch": -1})
    it = iter(ds)
    worker_state = {**it.state_dict(), "worker": [1, 2]}
    with pytest.raises(StateError, match=r"worker \[1, 2\].*same num_workers"):
        it.load_state_dict(worker_state)
    ds.load_state_dict(worker_state)
    with pytest.raises(StateError, match=r"worker \[1, 2\]"):
        iter(ds)
    other = to_torch(hr.Dataset.range(99).batch(3))
    other.load_state_dict(next_state(rc.pipeline()))
    with pytest.raises(StateError):
        next(iter(other))  # another pipeline: headrace's set_state refuses it


def next_state(dataset: hr.Dataset) -> dict[str, Any]:
    """The state of ``to_torch(dataset)`` after one element."""
    it = iter(to_torch(dataset))
    next(it)
    return it.state_dict()
