"""headrace.keras in this process (torch backend unless keras was imported already): what adapt() accepts and
refuses, the epochs and the stream it hands Keras, the data position (get_state / set_state, read-ahead), and
BackupAndRestore's checks. Fits on both backends, and resumes after a kill: test_keras_fit.py."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest

if importlib.util.find_spec("keras") is None:
    pytest.skip("needs keras (pip install 'headrace[keras]')", allow_module_level=True)
os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")

import headrace as hr  # noqa: E402
from headrace.keras import BackupAndRestore, KerasDataset, _as_state, adapt  # noqa: E402
from tests.close_race import HeldNext, close_during_next  # noqa: E402


def _ds(n: int = 20, batch: int = 4) -> hr.Dataset:
    return hr.Dataset.from_tensor_slices((np.arange(n, dtype=np.float32)[:, None], np.arange(n))).shuffle(
        n, seed=5).batch(batch)


def _ids(batches) -> list[list[int]]:
    return [b[1].tolist() for b in batches]


def _flat(batches: list[list[int]]) -> list[int]:
    return sorted(i for batch in batches for i in batch)


def test_adapt_is_a_keras_data_adapter_with_steps_from_the_cardinality() -> None:
    from keras.src.trainers.data_adapters import get_data_adapter

    a = adapt(_ds())
    assert get_data_adapter(a) is a  # Keras hands a DataAdapter through, on every backend
    assert a.num_batches == 5
    first, second = _ids(a.get_numpy_iterator()), _ids(a.get_numpy_iterator())
    assert len(first) == 5 and _flat(first) == list(range(20))
    assert _flat(second) == list(range(20)) and first != second  # epoch 2: its own shuffle order
    assert first == _ids(adapt(_ds()).get_numpy_iterator())  # the same orders run to run
    loader = adapt(_ds()).get_torch_dataloader()
    assert [b[1].tolist() for b in loader] == first


def test_an_epoch_keras_leaves_unfinished_is_not_counted() -> None:
    """fit() reads one batch to build an unbuilt model and drops the iterator: epoch 0 still starts at the start;
    the reader it replaced fails loudly if used again."""
    a = adapt(_ds())
    peek = a.get_numpy_iterator()
    first = next(peek)[1].tolist()
    epoch = _ids(a.get_numpy_iterator())
    assert epoch[0] == first and len(epoch) == 5
    with pytest.raises(RuntimeError, match="two Keras loops"):
        next(peek)


def test_steps_per_epoch_makes_a_stream_of_iterations() -> None:
    a = adapt(_ds(12, 4).repeat(), steps_per_epoch=2)
    assert a.num_batches == 2
    got = [_ids(a.get_numpy_iterator()) for _ in range(3)]
    assert [len(e) for e in got] == [2, 2, 2]
    flat = [batch for epoch in got for batch in epoch]
    assert _flat(flat[:3]) == list(range(12)) == _flat(flat[3:])
    # a finite dataset with steps_per_epoch goes on with its next iteration (reshuffled)
    b = adapt(_ds(12, 4), steps_per_epoch=2)
    stream = [batch for _ in range(3) for batch in _ids(b.get_numpy_iterator())]
    assert _flat(stream[:3]) == list(range(12)) == _flat(stream[3:])
    assert stream[3:] != stream[:3]


@pytest.mark.parametrize(("ds", "match"), [
    (lambda: _ds().repeat(), r"infinite.*adapt\(ds, steps_per_epoch=n\)"),
    (lambda: _ds().filter(lambda x, y: y > 3), r"filter.*steps_per_epoch=n"),
    (lambda: _ds().take(0), "empty"),
])
def test_adapt_refuses_what_has_no_epoch_length(ds, match) -> None:
    with pytest.raises(ValueError, match=match):
        adapt(ds())


def test_adapt_validates_its_arguments_and_elements() -> None:
    with pytest.raises(TypeError, match=r"headrace\.Dataset, got list"):
        adapt([1, 2])
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match=rf"steps_per_epoch={bad!r}.*int >= 1"):
            adapt(_ds(), steps_per_epoch=bad)
    four = hr.Dataset.from_tensor_slices((np.zeros(4), np.zeros(4), np.zeros(4), np.zeros(4))).batch(2)
    with pytest.raises(ValueError, match=r"tuple of 4.*\(x, y, sample_weight\)"):
        next(adapt(four).get_numpy_iterator())
    with pytest.raises(TypeError, match="KerasDataset"):
        BackupAndRestore("somewhere", data=_ds())


def test_state_gives_exactly_the_rest_mid_epoch_and_at_epoch_ends() -> None:
    a = adapt(_ds())
    whole = _ids(a.get_numpy_iterator()) + _ids(a.get_numpy_iterator())
    b = adapt(_ds())
    assert b.get_state()["iteration"] == 0 and b.get_state()["iterator"] is None
    reader = b.get_numpy_iterator()
    head = [next(reader)[1].tolist() for _ in range(2)]
    state = json.loads(json.dumps(b.get_state()))
    assert state["batches"] == 2 and state["epoch_steps"] == 2
    b.close()
    assert b.get_state() == state  # closing keeps the position
    c = adapt(_ds())
    c.set_state(state)
    rest = _ids(c.get_numpy_iterator())  # the rest of the interrupted epoch: 3 steps, not 5
    assert head + rest == whole[:5]
    assert _ids(c.get_numpy_iterator()) == whole[5:]  # then whole epochs, as uninterrupted
    assert c.get_state()["iteration"] == 2 and c.get_state()["batches"] == 0  # at an epoch's end: no iterator state


@pytest.mark.parametrize("wait", [True, False], ids=["close-waits", "close-stops-the-read"])
def test_close_from_another_thread_during_a_read_keeps_an_exact_position(wait, monkeypatch) -> None:
    # Issue 37: close() took the position while a batch was being read that the read then handed out: the
    # position was one batch behind it (that batch again after resume).
    import headrace._sync as sync

    if not wait:
        monkeypatch.setattr(sync, "CLOSE_WAITS_FOR_CALL_S", 0.2)
    whole = _ids(adapt(_ds()).get_numpy_iterator())
    b = adapt(_ds())
    reader = b.get_numpy_iterator()
    head = [next(reader)[1].tolist() for _ in range(2)]
    held = HeldNext(b._it)
    b._it = held
    got = close_during_next(b.close, lambda: next(reader)[1].tolist(), held, go_after_s=0.3,
                            go_after_close=not wait)
    if not wait:  # stopped under the read: no batch, and the position is unknown (never a wrong one)
        assert isinstance(got, hr.IteratorClosedError), got
        with pytest.raises(hr.IteratorClosedError, match="position is unknown"):
            b.get_state()
        return
    head.append(got)  # the read in progress handed out its batch, and the position is after it
    c = adapt(_ds())
    c.set_state(b.get_state())
    assert head + _ids(c.get_numpy_iterator()) == whole


def test_batches_keras_read_ahead_are_not_counted_as_trained() -> None:
    """The JAX trainer on an accelerator reads one batch ahead of the step it runs: the backup's position is the
    trained batch's, so the batch read ahead is trained after a resume."""
    a = adapt(_ds())
    a._tracking = True  # (as BackupAndRestore sets it)
    reader = a.get_numpy_iterator()
    got = [next(reader)[1].tolist() for _ in range(3)]  # three read ...
    a._trained = 2  # ... two trained
    state = _as_state(a._trained_position())
    b = adapt(_ds())
    b.set_state(state)
    rest = _ids(b.get_numpy_iterator())
    assert rest[0] == got[2] and len(rest) == 3


def test_set_state_refuses_what_is_not_a_keras_data_state() -> None:
    a = adapt(_ds())
    with pytest.raises(hr.StateError, match="not a headrace Keras data state"):
        a.set_state({"format": "headrace.iterator", "version": 2})
    with pytest.raises(hr.StateError, match="ints >= 0"):
        a.set_state({**a.get_state(), "batches": -1})


def _model() -> keras.Model:
    m = keras.Sequential([keras.Input((1,)), keras.layers.Dense(2)])
    m.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def test_a_backup_without_a_data_position_is_refused(tmp_path) -> None:
    (tmp_path / "training_metadata.json").write_text(json.dumps({"epoch": 1, "batch": 0}))  # Keras's own callback
    ds = _ds().map(lambda x, y: (x, y % 2))
    with pytest.raises(hr.StateError, match=r"no data position.*delete the directory"):
        _model().fit(adapt(ds), epochs=2, verbose=0, callbacks=[BackupAndRestore(str(tmp_path))])


def test_epoch_backups_record_the_next_epoch_at_its_start(tmp_path) -> None:
    ds = _ds().map(lambda x, y: (x, y % 2))
    data = adapt(ds)
    _model().fit(data, epochs=2, verbose=0, callbacks=[BackupAndRestore(str(tmp_path), data=data,
                                                                        delete_checkpoint=False)])
    saved = json.loads((tmp_path / "training_metadata.json").read_text())
    assert saved["epoch"] == 2
    assert {k: saved["headrace_data"][k] for k in ("iteration", "batches", "iterator", "epoch_steps")} == {
        "iteration": 2, "batches": 0, "iterator": None, "epoch_steps": 0}
    again = adapt(ds)
    history = _model().fit(again, epochs=3, verbose=0, callbacks=[BackupAndRestore(str(tmp_path), data=again)])
    assert len(history.history["loss"]) == 1 and again.get_state()["iteration"] == 3
    assert isinstance(again, KerasDataset)


def test_validation_data_is_adapted_separately_and_the_backup_binds_fits_x(tmp_path) -> None:
    """BackupAndRestore without data= backs up the position of fit's x, not of validation_data."""
    ds = _ds().map(lambda x, y: (x, y % 2))
    train, val = adapt(ds), adapt(_ds(8).map(lambda x, y: (x, y % 2)))

    class Look(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            if (self.epoch, batch) == (1, 1):
                self.seen = json.loads((tmp_path / "training_metadata.json").read_text())["headrace_data"]

    look = Look()
    history = _model().fit(train, validation_data=val, epochs=2, verbose=0,
                           callbacks=[BackupAndRestore(str(tmp_path), save_freq=1), look])
    assert len(history.history["val_loss"]) == 2
    assert look.seen["iteration"] == 1 and look.seen["batches"] == 2  # epoch 1 (the second), 2 batches in
    assert train.get_state()["iteration"] == 2 and val.get_state()["iteration"] == 2


def test_a_backup_at_an_epochs_last_step_resumes_with_the_next_epoch(tmp_path) -> None:
    """Keras cannot run an epoch of no steps (its JAX trainer fails): such a backup records the next epoch."""
    ds = _ds().map(lambda x, y: (x, y % 2))

    class Crash(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 4:  # epoch 0's last step
                raise RuntimeError("crash")

    with pytest.raises(RuntimeError, match="crash"):
        _model().fit(adapt(ds), epochs=2, verbose=0, callbacks=[BackupAndRestore(str(tmp_path), save_freq=1), Crash()])
    saved = json.loads((tmp_path / "training_metadata.json").read_text())
    assert saved["epoch"] == 1 and saved["headrace_data"]["epoch_steps"] == 0
    assert saved["headrace_data"]["iteration"] == 1
    data = adapt(ds)
    history = _model().fit(data, epochs=2, verbose=0, callbacks=[BackupAndRestore(str(tmp_path), save_freq=1)])
    assert len(history.history["loss"]) == 1 and data.get_state()["iteration"] == 2
