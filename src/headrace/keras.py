"""Keras 3 adapter: a headrace ``Dataset`` for ``keras.Model.fit`` / ``evaluate`` / ``predict``, and a
``BackupAndRestore`` that also backs up the data position, so a resumed ``fit`` continues exactly-once.

``adapt(ds)`` returns a :class:`KerasDataset`, a Keras ``DataAdapter`` (the class Keras's own adapters for
arrays, tf.data, ``PyDataset``, torch ``DataLoader`` and Grain derive from; ``get_data_adapter`` hands an
instance through unchanged), so one object serves every backend: numpy batches for jax (what Keras's JAX
trainer prefers), a torch ``DataLoader`` for torch, a ``tf.data.Dataset`` for tensorflow. Elements are what
tf.data hands Keras: ``(x, y)``, ``(x, y, sample_weight)``, ``(x,)`` or ``x`` (arrays or dicts of arrays),
already batched in headrace (``ds.batch(n)``).

Epochs: with a known cardinality ``N`` (batches) a Keras epoch is one iteration of ``ds`` (``N`` steps,
``fit`` needs no ``steps_per_epoch``); iteration ``e`` draws its own shuffle order (tf.data's
``reshuffle_each_iteration``), the same in every run. ``adapt(ds, steps_per_epoch=S)`` (needed for an
infinite or unknown cardinality) makes the data one stream, the dataset's iterations one after another (each
reshuffled, as ``ds.repeat()``), of which each Keras epoch takes ``S`` batches. A Keras epoch that does not
finish (the one batch Keras reads to build an unbuilt model, a ``stop_training``) is not counted: the next
one starts where it started.

Exactly-once resume: :class:`BackupAndRestore` (a ``keras.callbacks.BackupAndRestore``) writes the data
position (``KerasDataset.get_state()``: small JSON, the headrace ``Iterator.get_state()`` of the batch the
model last trained on) into the backup's ``training_metadata.json`` at the same points as the weights
(``save_freq="epoch"`` or every ``save_freq`` batches), and restores it in ``on_train_begin``: a ``fit``
killed mid-epoch and run again resumes at the next batch of the interrupted epoch (Keras alone restarts the
epoch's data). Batches Keras reads ahead of the step it runs (the JAX trainer on an accelerator reads one)
are not counted as trained: their positions are kept (:data:`READ_AHEAD_LIMIT` at most) until a step uses
them.

Requires keras >= 3 (``pip install 'headrace[keras]'``) and a backend: set ``KERAS_BACKEND`` (``jax``,
``torch`` or ``tensorflow``) before keras is first imported.
"""

from __future__ import annotations

import json
import warnings
import weakref
from collections import deque
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ._deps import require
from ._errors import IteratorClosedError, MissingDependencyError, StateError
from ._sync import InFlight
from ._versioned import check_versioned


def _import_keras() -> Any:
    try:
        return require("keras", "headrace.keras")
    except MissingDependencyError as e:
        cause = e.__cause__
        if not (isinstance(cause, ModuleNotFoundError) and cause.name in ("tensorflow", "jax", "torch")):
            raise
        err = MissingDependencyError(
            f"headrace.keras: keras is installed but its backend {cause.name} is not (keras uses tensorflow unless "
            "KERAS_BACKEND says otherwise); set KERAS_BACKEND to an installed one before keras is first imported: "
            "os.environ['KERAS_BACKEND'] = 'jax' (or 'torch'), or pip install it", name="keras")
        err.extra = "keras"
        raise err from cause


if TYPE_CHECKING:  # Keras's real types for mypy; at run time it comes through require() (a clear error)
    import keras
    from keras.src.trainers.data_adapters import data_adapter as _data_adapter
else:
    keras = _import_keras()
    # Keras exports no public name for the adapter base class; get_data_adapter checks against this one.
    _data_adapter = require("keras.src.trainers.data_adapters.data_adapter", "headrace.keras")
_adapter_utils = require("keras.src.trainers.data_adapters.data_adapter_utils", "headrace.keras")
_file_utils = require("keras.src.utils.file_utils", "headrace.keras")
_module_utils = require("keras.src.utils.module_utils", "headrace.keras")

if TYPE_CHECKING:
    from collections.abc import Generator

    from ._dataset import Dataset
    from ._iterator import Iterator as HeadraceIterator

STATE_FORMAT = "headrace.keras"
STATE_VERSION = 1
READ_AHEAD_LIMIT = 64
"""Most batches a Keras trainer may read beyond the last one it trained on while a :class:`BackupAndRestore`
tracks the data (their positions are kept to back up the trained one)."""
_METADATA_KEY = "headrace_data"
_RAN_OUT = "Your input ran out of data"  # the warning Keras gives when an epoch's data ends early


@dataclass
class _Position:
    """Where the next batch comes from: ``iteration`` of the dataset, ``batches`` taken from it, the headrace
    iterator's state after them (None at an iteration's start), and ``epoch_steps``: batches of the current
    Keras epoch taken so far."""

    iteration: int = 0
    batches: int = 0
    iterator: dict[str, Any] | None = None
    epoch_steps: int = 0


class KerasDataset(_data_adapter.DataAdapter):
    """A headrace ``Dataset`` as a Keras ``DataAdapter`` (see :func:`adapt` and the module docstring).

    >>> model.fit(hr.keras.adapt(ds.batch(32)), epochs=3)

    ``num_batches``: steps per Keras epoch (the cardinality, or ``steps_per_epoch``). ``get_state()`` /
    ``set_state(state)``: the data position (a JSON-serializable dict; see :class:`BackupAndRestore`).
    ``close()`` stops the pipeline's threads (also at interpreter exit, as every headrace iterator).
    Feed one ``KerasDataset`` to one ``fit`` / ``evaluate`` / ``predict`` at a time (``validation_data``:
    adapt it separately).

    Raises:
        IteratorClosedError: a read after ``close()`` stopped a read under it (the position is unknown).
        RuntimeError: two Keras loops read it at once (adapt the dataset once per use); with
            :class:`BackupAndRestore`, Keras read more than ``READ_AHEAD_LIMIT`` batches past the one it trained on.
        ValueError: an iteration yields no batch, or a batch that is not one of Keras's structures.
        StateError: ``set_state()`` of a dict that is not a ``get_state()`` dict.
    """

    def __init__(self, dataset: Dataset, steps: int, length: int | None) -> None:
        self._dataset = dataset
        self._steps = steps  # batches per Keras epoch
        self._length = length  # batches per iteration of the dataset, when known
        self._pos = _Position()
        self._it: HeadraceIterator | None = None
        self._in_next = InFlight("KerasDataset batch read")  # close() from another thread waits for it
        self._lost: str | None = None  # why the position is unknown (close() stopped a read under it)
        self._run: object | None = None  # the generator now reading (None: the last one finished)
        self._run_start = _Position()
        self._quota: int | None = None  # steps of the next Keras epoch, when it resumes one
        self._tracking = False  # a BackupAndRestore counts the batches trained on
        self._pulled = self._trained = 0
        self._ahead: deque[tuple[int, _Position]] = deque(maxlen=READ_AHEAD_LIMIT)

    # ---- what Keras asks ---------------------------------------------------------------------------------
    @property
    def num_batches(self) -> int:
        return self._steps

    @property
    def batch_size(self) -> int | None:
        return None  # headrace batches; Keras needs no size

    @property
    def has_partial_batch(self) -> bool | None:
        return None

    @property
    def partial_batch_size(self) -> int | None:
        return None

    def get_numpy_iterator(self) -> Generator[Any, None, None]:
        return self._batches()

    def get_jax_iterator(self) -> Generator[Any, None, None]:
        return self._batches()  # numpy: what Keras's JAX trainer prefers (it places the batches itself)

    def get_torch_dataloader(self) -> Any:
        return _adapter_utils.get_torch_dataloader(self._batches())

    def get_tf_dataset(self) -> Any:
        tf = _module_utils.tensorflow  # (imported on first use, as Keras's own adapters do)
        from ._iterator import Iterator as HeadraceIterator

        with HeadraceIterator(self._dataset, iteration=self._pos.iteration) as it:  # a look, not a step
            first = _standardize(next(it))
        return tf.data.Dataset.from_generator(self._batches,
                                              output_signature=_adapter_utils.get_tensor_spec([first]))

    # ---- the data position -------------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """The position after the last batch handed to Keras.

        Returns:
            dict: ``{"format", "version", "iteration", "batches", "iterator", "epoch_steps"}`` (``iterator``: the
            headrace ``Iterator.get_state()``, None at an iteration's start). JSON-serializable.
        """
        return _as_state(self._snapshot())

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue right after the batch ``state`` (from :meth:`get_state`) was taken at.

        The next Keras epoch runs the rest of the epoch it was taken in (``num_batches - state["epoch_steps"]`` steps).

        Args:
            state: a dict :meth:`get_state` returned.

        Raises:
            StateError: ``state`` is not a dict :meth:`get_state` returned.
        """
        self._move_to(_from_state(state))

    def close(self) -> None:
        """Stop the pipeline (its threads, files, memory accounts); idempotent. ``get_state()`` still gives the
        position (a Keras epoch read again starts where the unfinished one started, as always)."""
        self._in_next.settle(self._keep_position)

    def _keep_position(self, settled: bool) -> None:
        """close()'s position, after the last batch handed out (``settled``: no batch read in progress; else the
        read in progress is stopped under it and raises, its batch not counted)."""
        if not settled:
            self._lost = ("closed by close() from another thread while a batch read was in progress (its "
                          "position is unknown); set_state() a state saved before")
        elif self._it is not None and self._pos.batches:
            self._pos.iterator = self._it.get_state()
        self._drop()

    def _drop(self) -> None:
        if self._it is not None:
            self._it.close()
            self._it = None

    # ---- reading -----------------------------------------------------------------------------------------
    def _snapshot(self) -> _Position:
        if self._lost is not None:
            raise IteratorClosedError(f"headrace.keras: KerasDataset {self._lost}")
        live = self._it.get_state() if self._it is not None and self._pos.batches else None
        return replace(self._pos, iterator=live if live is not None else self._pos.iterator)

    def _move_to(self, pos: _Position) -> None:
        self._drop()
        self._lost = None
        self._pos = replace(pos)
        self._run = None
        self._quota = self._steps - pos.epoch_steps if pos.epoch_steps else None
        self._pulled = self._trained = 0
        self._ahead.clear()

    def _begin(self, token: object) -> int:
        """A new Keras epoch's generator starts reading: the steps it may take."""
        if _PENDING:  # a BackupAndRestore given no data= takes the first dataset read after its train begins
            callback = _PENDING.pop()()
            if callback is not None:
                callback._attach(self)
        if self._run is not None:  # the last epoch did not finish: it is not counted
            self._move_to(self._run_start)
        quota = self._quota if self._quota is not None else self._steps
        if self._quota is None:
            self._pos.epoch_steps = 0
        self._quota = None
        self._run, self._run_start = token, replace(self._snapshot(), epoch_steps=self._pos.epoch_steps)
        return quota

    def _batches(self) -> Generator[Any, None, None]:
        token = object()
        quota = self._begin(token)
        for n in range(1, quota + 1):
            if self._run is not token:
                raise RuntimeError("headrace.keras: a KerasDataset was read by two Keras loops at once (e.g. the "
                                   "same adapt(ds) as x and validation_data); adapt the dataset once per use")
            batch = self._pull()
            if n == quota:
                self._run = None  # finished (Keras may never ask past the last step)
            yield batch

    def _pull(self) -> Any:
        if self._tracking and self._trained < self._pulled:  # read ahead: keep the position of each batch
            self._ahead.append((self._pulled, self._snapshot()))
        from ._iterator import Iterator as HeadraceIterator

        while True:
            if self._it is None:
                if self._lost is not None:
                    raise IteratorClosedError(f"headrace.keras: KerasDataset {self._lost}")
                self._it = HeadraceIterator(self._dataset, iteration=self._pos.iteration)
                if self._pos.iterator is not None:
                    self._it.set_state(self._pos.iterator)
            it = self._it
            try:
                self._in_next.begin(lambda: None)
                try:
                    batch = next(it)
                finally:
                    self._in_next.end()
                if self._it is not it:  # close() from another thread stopped it under this read: not counted
                    raise IteratorClosedError("headrace.keras: the KerasDataset was closed from another thread "
                                              "while it read a batch; get_state() is the position before it")
                break
            except StopIteration:
                if self._pos.batches == 0:
                    raise ValueError("headrace.keras: the dataset yielded no batch in an iteration; Keras needs "
                                     "at least one per epoch") from None
                self._next_iteration()
        self._pos.batches += 1
        self._pos.epoch_steps += 1
        self._pulled += 1
        if self._pos.batches == self._length:
            self._next_iteration()
        return _standardize(batch)

    def _next_iteration(self) -> None:
        self._drop()
        self._pos = _Position(self._pos.iteration + 1, 0, None, self._pos.epoch_steps)

    # ---- what BackupAndRestore asks ----------------------------------------------------------------------
    def _trained_position(self) -> _Position:
        """The position after the last batch the model trained on (``_trained`` of ``_pulled`` read)."""
        if self._trained > self._pulled:
            raise RuntimeError(f"headrace.keras.BackupAndRestore: Keras trained on {self._trained} batches but this "
                               f"KerasDataset handed out {self._pulled}; pass data= the adapt() that fit trains on")
        if self._trained == self._pulled:
            return self._snapshot()
        for count, pos in self._ahead:
            if count == self._trained:
                return pos
        raise RuntimeError(f"headrace.keras: Keras read {self._pulled - self._trained} batches beyond the one it "
                           f"trained on, more than the {READ_AHEAD_LIMIT} whose positions are kept")


def _standardize(batch: Any) -> Any:
    """A batch as Keras takes it from tf.data: a tuple ``(x,)``, ``(x, y)``, ``(x, y, w)``, or ``x``."""
    if isinstance(batch, list):
        batch = tuple(batch)
    if isinstance(batch, tuple) and not 1 <= len(batch) <= 3:
        raise ValueError(f"headrace.keras: an element is a tuple of {len(batch)}; Keras takes (x,), (x, y) or "
                         "(x, y, sample_weight): map the dataset to one of these (or a dict of inputs)")
    if not isinstance(batch, tuple | dict | np.ndarray):
        raise ValueError(f"headrace.keras: an element is a {type(batch).__name__}; Keras takes arrays, dicts of "
                         "arrays, or tuples (x, y) / (x, y, sample_weight) of them")
    return batch


def _as_state(pos: _Position) -> dict[str, Any]:
    return {"format": STATE_FORMAT, "version": STATE_VERSION, **asdict(pos)}


def _from_state(state: Any) -> _Position:
    check_versioned(state, fmt=STATE_FORMAT, version=STATE_VERSION, source="KerasDataset.set_state()",
                    what="Keras data state", error=StateError, fix="pass the dict KerasDataset.get_state() returned")
    try:
        pos = _Position(**{k: state[k] for k in ("iteration", "batches", "iterator", "epoch_steps")})
    except KeyError as e:
        raise StateError(f"KerasDataset.set_state(): the state lacks {e}; pass the dict get_state() returned") from None
    if not all(isinstance(v, int) and v >= 0 for v in (pos.iteration, pos.batches, pos.epoch_steps)):
        raise StateError(f"KerasDataset.set_state(): iteration, batches and epoch_steps must be ints >= 0, got "
                         f"{pos.iteration!r}, {pos.batches!r}, {pos.epoch_steps!r}")
    return pos


def adapt(dataset: Dataset, *, steps_per_epoch: int | None = None) -> KerasDataset:
    """``dataset`` as what ``keras.Model.fit`` / ``evaluate`` / ``predict`` take as ``x`` (every backend).

    >>> model.fit(hr.keras.adapt(ds.batch(32).repeat(), steps_per_epoch=100), epochs=3)

    Args:
        dataset: a headrace ``Dataset`` of batches (``ds.batch(n)``), each ``(x, y)``, ``(x, y,
            sample_weight)``, ``(x,)`` or ``x`` (numpy arrays or dicts of them: Keras's ``x`` / ``y``
            structures).
        steps_per_epoch: batches per Keras epoch, from a stream of the dataset's iterations one after
            another; needed when the cardinality is infinite (``repeat()``) or unknown (``filter``). ``None``
            (default): one iteration per epoch, its batch count from the cardinality. Do not pass another
            ``steps_per_epoch`` to ``fit``.

    Returns:
        A :class:`KerasDataset`. Keras's ``class_weight`` does not apply to it (as to torch DataLoaders):
        put sample weights in the elements instead.

    Raises:
        TypeError: ``dataset`` is not a headrace ``Dataset``.
        ValueError: ``steps_per_epoch`` is not an int >= 1; or it is None and the cardinality is infinite or
            unknown (the message names the op that makes it so and the fix), or 0.
    """
    from ._dataset import Dataset
    from ._engine.counted_cardinality import counting, unknown_cause
    from ._options import INFINITE_CARDINALITY

    if not isinstance(dataset, Dataset):
        raise TypeError(f"headrace.keras.adapt(dataset): expected a headrace.Dataset, got {type(dataset).__name__}")
    if steps_per_epoch is not None and (isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int)
                                        or steps_per_epoch < 1):
        raise ValueError(f"adapt(steps_per_epoch={steps_per_epoch!r}): expected None or an int >= 1 (batches per "
                         "Keras epoch)")
    with counting():
        length = dataset._node.cardinality()
        cause = unknown_cause(dataset._node) if length < 0 and length != INFINITE_CARDINALITY else None
    if steps_per_epoch is None:
        if length == INFINITE_CARDINALITY:
            raise ValueError("headrace.keras.adapt(ds): the dataset is infinite (repeat() without a count), so a "
                             "Keras epoch has no end; pass adapt(ds, steps_per_epoch=n) (batches per epoch)")
        if length < 0:
            what = cause.label if cause is not None else "an op"
            raise ValueError(f"headrace.keras.adapt(ds): the number of batches is unknown without running the "
                             f"pipeline ({what} makes it unknown); pass adapt(ds, steps_per_epoch=n) (batches per "
                             "epoch; count them with n = sum(1 for _ in ds))")
        if length == 0:
            raise ValueError("headrace.keras.adapt(ds): the dataset is empty (cardinality 0); Keras needs at least "
                             "one batch per epoch")
        steps_per_epoch = length
    return KerasDataset(dataset, steps_per_epoch, length if length >= 0 else None)


# BackupAndRestore callbacks whose train began without data=: the next KerasDataset that starts reading binds
_PENDING: list[weakref.ref[BackupAndRestore]] = []


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """``keras.callbacks.BackupAndRestore`` that also backs up and restores the data position of a
    :class:`KerasDataset`, so a resumed ``fit`` trains on every batch of the interrupted epoch once.

    >>> data = hr.keras.adapt(ds.batch(32))
    >>> model.fit(data, epochs=3, callbacks=[hr.keras.BackupAndRestore("/tmp/backup", data)])

    At each backup (the end of every epoch with ``save_freq="epoch"``, every ``save_freq`` batches with an
    int) the position after the last batch the model trained on (:meth:`KerasDataset.get_state`) goes into
    ``training_metadata.json`` beside Keras's ``epoch`` (with the weights, and with ``double_checkpoint``
    their ``.bkp`` copies). ``on_train_begin`` restores weights, epoch and position: the interrupted epoch
    runs its remaining batches only, the later epochs whole (Keras's "ran out of data" warning for that one
    short epoch is silenced). The epoch a mid-epoch backup records is the one running (Keras records the
    last finished one while a resumed run has not finished an epoch yet).

    Args:
        backup_dir: as Keras's: where the backup lives (one training run per directory).
        data: the :class:`KerasDataset` given to ``fit`` as ``x``. ``None`` (default): the first
            ``KerasDataset`` that starts reading after ``fit`` calls ``on_train_begin`` (``fit``'s ``x``).
        save_freq, double_checkpoint, delete_checkpoint: as Keras's.

    Raises:
        TypeError: ``data`` is not a :class:`KerasDataset` (or None).
        StateError: (``fit``) the backup has weights but no data position (written by Keras's own
            callback); delete ``backup_dir`` or resume with Keras's callback.
    """

    def __init__(self, backup_dir: str, data: KerasDataset | None = None, save_freq: str | int = "epoch",
                 double_checkpoint: bool = False, delete_checkpoint: bool = True) -> None:
        super().__init__(backup_dir, save_freq=save_freq, double_checkpoint=double_checkpoint,
                         delete_checkpoint=delete_checkpoint)
        if data is not None and not isinstance(data, KerasDataset):
            raise TypeError(f"BackupAndRestore(data=...): expected the KerasDataset from headrace.keras.adapt(), "
                            f"got {type(data).__name__}")
        self._data = data
        self._bound: KerasDataset | None = None
        self._restored: _Position | None = None
        self._last_end = -1
        self._short_epoch = False  # the next epoch resumes one: it runs only the batches it had left
        self._quiet: warnings.catch_warnings | None = None

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._restored = None
        super().on_train_begin(logs)  # weights and epoch; our _load_model reads the data position too
        self._short_epoch = self._restored is not None and self._restored.epoch_steps > 0
        if self._data is not None:
            self._attach(self._data)
        else:
            _PENDING[:] = [ref for ref in _PENDING if ref() not in (None, self)] + [weakref.ref(self)]

    def _attach(self, data: KerasDataset) -> None:
        self._bound = data
        if self._restored is not None:
            data._move_to(self._restored)
        else:
            data._pulled = data._trained = 0
            data._ahead.clear()
        data._tracking = True

    def _load_model(self) -> None:
        super()._load_model()
        if not _file_utils.exists(self._training_metadata_path):
            return
        with _file_utils.File(self._training_metadata_path, "r") as f:
            metadata = json.loads(f.read())
        if _METADATA_KEY not in metadata:
            raise StateError(f"headrace.keras.BackupAndRestore: the backup in {self.backup_dir!r} has no data "
                             "position (written by keras.callbacks.BackupAndRestore?); delete the directory to "
                             "start over, or resume with the callback that wrote it")
        if metadata[_METADATA_KEY] is not None:  # (None: no KerasDataset was being trained on)
            self._restored = _from_state(metadata[_METADATA_KEY])

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._current_epoch = epoch
        self._last_end = -1
        if self._short_epoch and self._quiet is None:
            self._short_epoch = False
            self._quiet = warnings.catch_warnings()
            self._quiet.__enter__()
            warnings.filterwarnings("ignore", message=_RAN_OUT)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._bound is not None:
            self._bound._trained += batch - self._last_end if batch > self._last_end else batch + 1
        self._last_end = batch
        super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self._quiet is not None:
            self._quiet.__exit__(None, None, None)
            self._quiet = None
        if self._bound is not None:
            self._bound._pos.epoch_steps = 0  # the position the next epoch starts from
        super().on_epoch_end(epoch, logs)

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        super().on_train_end(logs)
        if self._bound is not None:
            self._bound._tracking = False
        self._bound = None
        _PENDING[:] = [ref for ref in _PENDING if ref() not in (None, self)]

    def _save_model(self) -> None:
        """Keras's backup (weights, then ``training_metadata.json``), the data position in the metadata."""
        if not _file_utils.exists(self.backup_dir):
            _file_utils.makedirs(self.backup_dir)
        if self.double_checkpoint:
            for path, prev in ((self._weights_path, self._prev_weights_path),
                               (self._training_metadata_path, self._prev_training_metadata_path)):
                if _file_utils.exists(path):
                    _file_utils.copy(path, prev)
        epoch, data = self._current_epoch, None
        if self._bound is not None:
            pos = self._bound._trained_position()
            if pos.epoch_steps >= self._bound.num_batches:  # the epoch's last step: resume with the next epoch
                epoch, pos = epoch + 1, replace(pos, epoch_steps=0)  # (Keras cannot run an epoch of no steps)
            data = _as_state(pos)
        self.model.save_weights(filepath=self._weights_path, overwrite=True)
        with _file_utils.File(self._training_metadata_path, "w") as f:
            f.write(json.dumps({"epoch": epoch, "batch": self._last_batch_seen, _METADATA_KEY: data}))


__all__ = ["READ_AHEAD_LIMIT", "BackupAndRestore", "KerasDataset", "adapt"]
