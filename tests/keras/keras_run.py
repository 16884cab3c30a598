"""Helper of test_keras_fit.py: Keras 3 fits on ``headrace.keras.adapt(ds)`` in a fresh process (the backend is
chosen by ``KERAS_BACKEND`` before keras is imported), printing what the test checks as JSON.

``python keras_run.py train DIR``: the same small classifier fit on the adapted dataset and on the same data as
numpy arrays (losses per epoch, final accuracies), ``evaluate`` and ``predict`` on the adapted dataset, and a
``BackupAndRestore(DIR)`` run interrupted (an exception) mid-epoch and resumed in this process on a fresh
dataset; then that again with Keras reading one batch ahead of the step it runs (as its JAX trainer does on an
accelerator).
``python keras_run.py kill DIR``: a fit with ``BackupAndRestore(DIR, save_freq=4)`` killed (``os._exit``) right
after the backup at epoch 1, batch 3; the ids it trained on go to ``DIR/ids.json`` first.
``python keras_run.py resume DIR``: the same fit run again (it resumes from the backup), and an uninterrupted fit
of the same pipeline for reference (the ids each trained on, per batch), and the comparison of ``train``.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import keras
import numpy as np

import headrace as hr
from headrace.keras import BackupAndRestore, adapt

N, BATCH, EPOCHS = 48, 6, 3
EAGER = keras.backend.backend() == "jax"  # (jax traces the step: record the ids eagerly)


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 4)).astype("float32")
    return np.concatenate([np.arange(N, dtype="float32")[:, None], x], axis=1), (x.sum(1) > 0).astype("int64")


def pipeline() -> hr.Dataset:
    """A fresh Dataset each call (its iterations count from 0, as in a new process): ids in column 0."""
    x, y = data()
    return hr.Dataset.from_tensor_slices((x, y)).shuffle(N, seed=3).batch(BATCH)


class Record(keras.layers.Layer):
    """Drops the id column; in training, appends the batch's ids to ``log`` (None: records nothing). (It keeps
    ``log.append``: a list attribute would be copied by Keras's attribute tracking.)"""

    def __init__(self, log: list[list[int]] | None) -> None:
        super().__init__()
        self.sink = None if log is None else log.append

    def call(self, x, training=False):
        if self.sink is not None and training and not isinstance(x, keras.KerasTensor):
            self.sink(sorted(int(i) for i in keras.ops.convert_to_numpy(x[:, 0])))
        return x[:, 1:]


def model(log: list[list[int]] | None, lr: float = 0.05, eager: bool = EAGER) -> keras.Model:
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((5,)), Record(log), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(2)])
    m.compile(keras.optimizers.Adam(lr), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"], run_eagerly=eager)
    return m


class Stop(keras.callbacks.Callback):
    """After the batch ``batch`` of epoch ``epoch`` (and the callbacks before it): ``action()``."""

    def __init__(self, epoch: int, batch: int, action) -> None:
        super().__init__()
        self.at, self.action, self.epoch = (epoch, batch), action, -1

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            self.action()


def fit_with_backup(log: list[list[int]], backup: str, *extra: keras.callbacks.Callback) -> keras.callbacks.History:
    m = model(log)
    data = adapt(pipeline())
    history = keras.callbacks.History()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            history = m.fit(data, epochs=EPOCHS, verbose=0, callbacks=[BackupAndRestore(backup, save_freq=4), *extra])
    finally:
        history.ran_out = [str(w.message) for w in caught if "ran out of data" in str(w.message)]
        READ_AHEAD.append(len(data._ahead))  # positions kept for batches read beyond the trained one
    return history


READ_AHEAD: list[int] = []


def read_one_batch_ahead() -> None:
    """Keras's JAX trainer on an accelerator reads each batch one step ahead (on CPU it does not): do it here."""
    from keras.src.backend.jax import trainer

    def ahead(self):
        return self._one_batch_ahead_iterator(self.data_adapter.get_jax_iterator())

    trainer.JAXEpochIterator._get_iterator = ahead


def compare() -> dict:
    """The same model fit on adapt(ds) and on the arrays (unshuffled: the same batches), evaluate, predict."""
    rows = 144
    rng = np.random.default_rng(1)
    big = rng.normal(size=(rows, 4)).astype("float32")
    bx, by = np.concatenate([np.zeros((rows, 1), "float32"), big], 1), (big.sum(1) > 0).astype("int64")
    ds = hr.Dataset.from_tensor_slices((bx, by)).batch(16)
    out: dict = {}
    for name, args in (("adapt", (adapt(ds),)), ("arrays", (bx, by))):
        m = model(None, lr=0.02, eager=False)  # (records nothing: compiled on jax too)
        kw = {} if name == "adapt" else {"batch_size": 16, "shuffle": False}
        h = m.fit(*args, epochs=5, verbose=0, **kw)
        out[name] = {"loss": h.history["loss"], "accuracy": h.history["accuracy"][-1]}
        if name == "adapt":
            out["evaluate"] = m.evaluate(adapt(ds), verbose=0, return_dict=True)
            out["evaluate_arrays"] = m.evaluate(bx, by, batch_size=16, verbose=0, return_dict=True)
            predicted = m.predict(adapt(ds), verbose=0)
            out["predict_shape"] = list(predicted.shape)
            out["predict_same"] = bool(np.allclose(predicted, m.predict(bx, verbose=0), atol=1e-5))
    return out


def reference() -> list[list[int]]:
    """The ids per batch of an uninterrupted fit of the same pipeline."""
    log: list[list[int]] = []
    model(log).fit(adapt(pipeline()), epochs=EPOCHS, verbose=0)
    return log


def interrupt_in_process(backup: str, with_reference: bool = True) -> dict:
    """A fit stopped by an exception right after the backup at epoch 1, batch 3, then run again."""
    interrupted: list[list[int]] = []

    def fail() -> None:
        raise RuntimeError("interrupted")

    try:
        fit_with_backup(interrupted, backup, Stop(1, 3, fail))
    except RuntimeError:
        pass
    resumed: list[list[int]] = []
    h = fit_with_backup(resumed, backup)
    return {"interrupted": interrupted, "resumed": resumed, "reference": reference() if with_reference else None,
            "resumed_epochs": len(h.history["loss"]), "ran_out": h.ran_out}


def main() -> None:
    mode, where = sys.argv[1], sys.argv[2]
    if mode == "train":
        out = {**compare(), **interrupt_in_process(where)}
        read_one_batch_ahead()
        del READ_AHEAD[:]
        ahead = interrupt_in_process(where + "-ahead", with_reference=False)
        out["ahead"] = {**ahead, "reference": out["reference"], "kept": READ_AHEAD}
        print(json.dumps(out))
    elif mode == "kill":
        log: list[list[int]] = []

        def kill() -> None:
            with open(os.path.join(where, "ids.json"), "w") as f:
                json.dump(log, f)
            os._exit(17)

        fit_with_backup(log, os.path.join(where, "backup"), Stop(1, 3, kill))
    else:
        resumed: list[list[int]] = []
        h = fit_with_backup(resumed, os.path.join(where, "backup"))
        print(json.dumps({**compare(), "resumed": resumed, "reference": reference(),
                          "resumed_epochs": len(h.history["loss"]), "ran_out": h.ran_out,
                          "backup_left": os.path.exists(os.path.join(where, "backup"))}))


if __name__ == "__main__":
    main()
