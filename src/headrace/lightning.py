"""Lightning: :class:`ExactlyOnce`, a callback that makes a mid-epoch checkpoint resume at the next batch exactly.

Why it is needed. Lightning saves the ``state_dict()`` of every train dataloader that has one (since its PR
#19361) and loads it into the dataloader before the resumed run iterates it. But when the dataloader has no
``len()`` (an ``IterableDataset`` of unknown length, a ``StatefulDataLoader`` over one), Lightning's
``_PrefetchDataFetcher`` fetches one batch ahead of the step it runs, to know which batch is the last: a
checkpoint taken after step ``k`` saves the dataloader's position after batch ``k + 1``, and the resumed run
starts at batch ``k + 2``; batch ``k + 1`` is never trained on. A plain ``torch.utils.data.DataLoader`` has no
``state_dict()`` at all, so Lightning saves no position and the resumed run starts the epoch over.

What it does. After each batch the dataloaders hand to Lightning's fetcher, :class:`ExactlyOnce` notes their
positions; when a checkpoint is saved it replaces the positions Lightning wrote with the ones noted when the
fetcher had taken exactly as many batches as the loop has run (``fetched - ready`` batches back). It supports,
as train dataloaders:

- ``torchdata.stateful_dataloader.StatefulDataLoader`` (any ``num_workers``, fork or spawn), over
  ``headrace.torch.to_torch(ds)`` or any dataset it can restore;
- ``to_torch(ds)`` itself, and any iterable with ``state_dict()`` / ``load_state_dict()``;
- a plain ``torch.utils.data.DataLoader(to_torch(ds), num_workers=0)``: the callback saves the position of
  the ``to_torch`` dataset in the checkpoint itself, and restores it at ``on_train_start`` (the fetcher then
  starts the epoch's iterator again, from that position). With workers a plain ``DataLoader`` keeps the
  position in its worker processes, out of reach: use ``StatefulDataLoader`` (the same arguments).

Cost: one ``state_dict()`` per train dataloader per batch (a ``StatefulDataLoader`` with workers answers
from its snapshot; ``to_torch`` in the main process asks headrace's iterator, ``Iterator.get_state()``).

Requires Lightning (``pip install 'headrace[lightning]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._deps import require

if TYPE_CHECKING:  # Lightning's real types for mypy; at run time it comes through require() (a clear error)
    from lightning.pytorch import Callback
else:
    Callback = require("lightning.pytorch", "headrace.lightning").Callback

CHECKPOINT_KEY = "headrace.ExactlyOnce"
"""Where :class:`ExactlyOnce` keeps, in a Lightning checkpoint, the positions Lightning does not save itself."""

_KEEP = 8  # positions noted, per dataloader: the fetcher is at most prefetch_batches (1 by default) ahead


def _is_stateful(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def _position_holder(index: int, loader: Any) -> tuple[str, Any]:
    """``("loader", loader)``: Lightning saves and restores it; ``("dataset", ds)``: a plain ``DataLoader`` over
    ``to_torch`` without workers, whose dataset this callback saves and restores.

    Raises:
        ValueError: a train dataloader whose position cannot be saved (names it and the fix).
    """
    if _is_stateful(loader):
        return "loader", loader
    from .torch import TorchIterableDataset

    dataset = getattr(loader, "dataset", None)
    if isinstance(dataset, TorchIterableDataset):
        workers = getattr(loader, "num_workers", 0)
        if workers == 0:
            return "dataset", dataset
        raise ValueError(f"ExactlyOnce: train dataloader {index} is a {type(loader).__name__} with num_workers="
                         f"{workers}; its position lives in the worker processes, which it cannot save: use "
                         "torchdata.stateful_dataloader.StatefulDataLoader (the same arguments), or num_workers=0")
    raise ValueError(f"ExactlyOnce: train dataloader {index} ({type(loader).__name__}) has no state_dict() / "
                     "load_state_dict(), so no checkpoint can hold its position: use "
                     "StatefulDataLoader(headrace.torch.to_torch(ds), batch_size=None)")


class _Recorder:
    """The fetcher's iterator over the combined loader: notes the positions after each batch it yields."""

    def __init__(self, iterator: Any, callback: ExactlyOnce) -> None:
        self._iterator, self._callback = iterator, callback

    def __iter__(self) -> _Recorder:
        return self

    def __next__(self) -> Any:
        batch = next(self._iterator)
        self._callback._note()
        return batch

    def __getattr__(self, name: str) -> Any:  # (only names the recorder lacks: the combined loader's)
        if name == "_iterator":
            raise AttributeError(name)
        return getattr(self._iterator, name)


def _iterator_get(fetcher: Any) -> Any:
    return fetcher.__dict__.get("_headrace_iterator")


def _iterator_set(fetcher: Any, iterator: Any) -> None:
    callback = fetcher.__dict__["_headrace_callback"]
    callback._reset_notes()
    fetcher.__dict__["_headrace_iterator"] = None if iterator is None else _Recorder(iterator, callback)


_RECORDING: dict[type, type] = {}


def _recording_class(cls: type) -> type:
    """``cls`` (a Lightning data fetcher class) whose ``iterator``, set by every ``iter(fetcher)``, notes
    positions (one subclass per fetcher class)."""
    if cls not in _RECORDING:
        _RECORDING[cls] = type(f"Recording{cls.__name__}", (cls,),
                               {"iterator": property(_iterator_get, _iterator_set), "__module__": __name__})
    return _RECORDING[cls]


class ExactlyOnce(Callback):
    """A Lightning callback: a checkpoint taken after step ``k`` of an epoch resumes at batch ``k + 1`` exactly,
    so across the interrupted and the resumed run every element is trained on once.

    >>> trainer = Trainer(callbacks=[ExactlyOnce(), ModelCheckpoint(every_n_train_steps=100)])
    >>> trainer.fit(model, StatefulDataLoader(hr.torch.to_torch(ds.batch(32)), batch_size=None), ckpt_path=ckpt)

    Usage: ``Trainer(callbacks=[ExactlyOnce(), ModelCheckpoint(...)])`` in the run that saves and in the run
    that resumes (``trainer.fit(model, ckpt_path=...)``), with train dataloaders as the module docstring lists
    (``StatefulDataLoader(to_torch(ds))``, ``to_torch(ds)``, or ``DataLoader(to_torch(ds), num_workers=0)``).
    Give the resumed run the same dataloaders (same pipeline, seed, ``batch_size``, ``num_workers``).

    Raises:
        ValueError: at ``on_train_start``, a train dataloader whose position cannot be saved (a plain
            ``DataLoader`` with workers, an iterable without ``state_dict()``); the message names the fix. Also
            there, a checkpoint holding positions of another number of train dataloaders than this run has.
        RuntimeError: at a checkpoint, the fetcher is more than 8 batches ahead of the loop (a
            ``prefetch_batches`` over 8).
    """

    def __init__(self) -> None:
        super().__init__()
        self._fetcher: Any = None
        self._holders: list[tuple[str, Any]] = []
        self._count = 0  # batches the fetcher's current iterator has yielded
        self._notes: dict[int, list[Any]] = {}  # count -> the positions after that many batches
        self._to_restore: list[Any] | None = None  # the positions a checkpoint gave (on_load_checkpoint)

    def _positions(self) -> list[Any]:
        return [holder.state_dict() for _, holder in self._holders]

    def _reset_notes(self) -> None:
        self._count, self._notes = 0, {}

    def _note(self) -> None:
        self._count += 1
        self._notes[self._count] = self._positions()
        self._notes.pop(self._count - _KEEP, None)

    def _install(self, loop: Any) -> bool:
        """Give ``loop``'s data fetcher the recording iterator; ``False``: no training data to follow."""
        combined, fetcher = loop._combined_loader, loop._data_fetcher
        if combined is None or fetcher is None:
            return False  # no training batches (limit_train_batches=0): nothing to resume
        self._holders = [_position_holder(i, dl) for i, dl in enumerate(combined.flattened)]
        if type(fetcher) in _RECORDING.values():  # (a second fit with this fetcher)
            recorder = fetcher.__dict__.get("_headrace_iterator")
            iterator = None if recorder is None else recorder._iterator
        else:
            iterator = fetcher.__dict__.pop("iterator", None)
            fetcher.__class__ = _recording_class(type(fetcher))
        fetcher.__dict__["_headrace_callback"] = self
        self._fetcher = fetcher
        fetcher.iterator = iterator  # (the recording property: resets the notes)
        self._count = fetcher.fetched  # batches fetched before this callback saw the fetcher
        self._notes = {self._count: self._positions()}
        return True

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        loop = trainer.fit_loop
        restore, self._to_restore = self._to_restore, None
        if not self._install(loop):
            return
        if restore is not None and any(kind == "dataset" for kind, _ in self._holders):
            # Lightning restored none of these: load them all (the "loader" ones again: the iterator made before
            # on_train_start consumed Lightning's load), then start the epoch's iterators again from there.
            if len(restore) != len(self._holders):
                raise ValueError(f"ExactlyOnce: the checkpoint holds positions of {len(restore)} train "
                                 f"dataloaders and this run has {len(self._holders)}; resume with the same "
                                 "dataloaders")
            for (_, holder), position in zip(self._holders, restore, strict=True):
                holder.load_state_dict(position)
            iter(loop._data_fetcher)  # (the recording property: notes from the restored positions on)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        # reload_dataloaders_every_n_epochs: a new fetcher (and dataloaders) for this epoch, already iterated
        if self._fetcher is not None and trainer.fit_loop._data_fetcher is not self._fetcher:
            self._install(trainer.fit_loop)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        loop = trainer.fit_loop
        if self._fetcher is None or loop._data_fetcher is not self._fetcher:
            return  # not training (yet), or another fit: Lightning's positions stand
        ahead = self._fetcher.fetched - loop.epoch_loop.batch_progress.current.ready
        positions = self._notes.get(self._count - ahead) if ahead > 0 else self._positions()
        if positions is None:
            raise RuntimeError(f"ExactlyOnce: the data fetcher is {ahead} batches ahead of the training loop and "
                               f"the positions kept cover {_KEEP}; keep Lightning's prefetch_batches below {_KEEP}")
        kinds = [kind for kind, _ in self._holders]
        loaders = [p for kind, p in zip(kinds, positions, strict=True) if kind == "loader"]
        lightning_state = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict")
        if loaders and lightning_state is not None:
            lightning_state["combined_loader"] = loaders
        checkpoint[CHECKPOINT_KEY] = {"version": 1, "positions": positions}

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get(CHECKPOINT_KEY)
        self._to_restore = None if saved is None else list(saved["positions"])


__all__ = ["CHECKPOINT_KEY", "ExactlyOnce"]
