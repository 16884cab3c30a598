"""The adapters under Ctrl-C and ``close()`` from another thread, in a fresh process:
``python -m tests.promises.adapter_child CASE_JSON`` prints one JSON line.

A case (``adapter_case(seed)``) names an adapter (``to_torch``; ``StatefulDataLoader`` over it with 2
workers started by forkserver; ``headrace.keras.adapt``; ``to_jax``; a Lightning ``Trainer.fit`` with
``headrace.lightning.ExactlyOnce`` and a checkpoint every step, resumed from the last one:
``lightning_main``), a pipeline (``range(n)`` -> map on threads or processes -> batch), and what happens
after a seeded delay: ``sigint`` (SIGINT to the main thread, as Ctrl-C) or ``close`` (the adapter's
``close()`` from a timer thread). The loop saves the adapter's state after every batch (the batch's ids and
the state appended together, so an interrupt between them replays that batch rather than losing it); after
the event it builds the adapter again from the last state and reads to the end. Reports: the ids (exactly
once: each of ``range(n)`` once), how the first run ended, the seconds from the event to that end, the
headrace threads and the child processes alive 1 s after the end (forkserver's server and multiprocessing's
resource tracker excepted, not their children: they are the start method's, kept for the process's life),
and for ``to_jax`` the peak RSS growth over the run (sampled every 2 ms) against the budget.
"""

from __future__ import annotations

import faulthandler
import json
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from typing import Any

import numpy as np
import psutil

MiB = 1024**2
ADAPTERS = ("torch", "stateful", "keras", "jax", "lightning")


def adapter_case(seed: int) -> dict[str, Any]:
    """A seeded case (see the module docstring); adapters in turn, so any 5 seeds in a row cover them all."""
    rng = random.Random(seed)
    adapter = ADAPTERS[seed % len(ADAPTERS)]
    # (a DataLoader has no close(); Lightning's Trainer catches Ctrl-C itself: its graceful shutdown is the case)
    event = "sigint" if adapter in ("stateful", "lightning") else rng.choice(["sigint", "close"])
    big = adapter == "jax" and rng.random() < 0.5  # batches of 4-16 MiB: the copies ahead show in the RSS
    case = {"seed": seed, "adapter": adapter, "event": event, "delay_s": round(rng.uniform(0.05, 0.6), 3),
            "n": rng.choice([200, 400]), "batch": rng.choice([2, 4, 8]), "executor": rng.choice(["thread", "process"]),
            "payload": 2 * MiB if big else 64, "slow_s": 0.002}
    # worker processes (~48 MiB each, in each DataLoader worker's share of the budget) need a larger budget
    return {**case, "budget": (256 if case["executor"] == "process" else 64) * MiB}


class Slow:
    """map function: the element with a payload of ``payload`` bytes, after ``slow_s`` of sleep (so the loop
    runs long enough for the event to land inside it)."""

    def __init__(self, payload: int, slow_s: float) -> None:
        self.payload, self.slow_s = payload, slow_s

    def __call__(self, i: Any) -> dict[str, Any]:
        time.sleep(self.slow_s)
        return {"id": np.int64(i), "payload": np.full(self.payload, int(i) % 251, np.uint8)}


def dataset(case: dict[str, Any]) -> Any:
    import headrace as hr

    ds = hr.Dataset.range(case["n"]).map(Slow(case["payload"], case["slow_s"]), num_parallel_calls=2,
                                         executor=case["executor"]).batch(case["batch"])
    return ds.with_options(hr.Options(memory_budget=case["budget"]))


class Run:
    """One adapter object from a state (None: the start): ``next()`` -> the batch's ids, ``state()``, ``close()``."""

    def __init__(self, case: dict[str, Any], state: Any) -> None:
        kind = case["adapter"]
        ds = dataset(case)
        self.kind = kind
        if kind == "torch":
            from headrace.torch import to_torch

            self.obj = iter(to_torch(ds))
            if state is not None:
                self.obj.load_state_dict(state)
            self.it = self.obj
        elif kind == "stateful":
            from torchdata.stateful_dataloader import StatefulDataLoader

            from headrace.torch import to_torch

            self.obj = StatefulDataLoader(to_torch(ds), batch_size=None, num_workers=2,
                                          multiprocessing_context="forkserver")
            if state is not None:
                self.obj.load_state_dict(state)
            self.it = iter(self.obj)
        elif kind == "keras":
            from headrace.keras import adapt

            self.obj = adapt(ds)
            if state is not None:
                self.obj.set_state(state)
            self.it = self.obj.get_numpy_iterator()
        else:
            from headrace.jax import to_jax

            self.obj = to_jax(ds)
            if state is not None:
                self.obj.set_state(state)
            self.it = self.obj

    def next(self) -> list[int]:
        batch = next(self.it)
        ident = batch[0]["id"] if isinstance(batch, tuple) else batch["id"]
        return [int(v) for v in np.asarray(ident).reshape(-1)]

    def state(self) -> Any:
        if self.kind in ("torch", "stateful"):
            return self.obj.state_dict()
        return json.loads(json.dumps(self.obj.get_state()))

    def close(self) -> None:
        if self.kind != "stateful":
            self.obj.close()


def _alive_children() -> list[str]:
    alive = []
    for c in psutil.Process().children(recursive=True):
        try:
            line = " ".join(c.cmdline())
            server = c.ppid() == os.getpid() and "forkserver" in line  # (its workers are its children: counted)
            if c.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in line and not server:
                alive.append(f"{c.pid} (parent {c.ppid()}): {line[-100:]}")
        except psutil.Error:
            pass
    return alive


def lightning_run(case: dict[str, Any], ckpt_dir: str, ckpt_path: str | None,
                  first_step: Any = None) -> list[list[int]]:
    """``Trainer.fit`` of a tiny model over ``StatefulDataLoader(to_torch(ds))`` with ``ExactlyOnce`` and a
    checkpoint after every step (resumed from ``ckpt_path``); the ids of each training step, in order (as far as
    it got: Lightning answers Ctrl-C by a graceful shutdown and ``sys.exit(1)``). ``first_step()``: called at the
    first training step."""
    import lightning.pytorch as pl
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    from headrace.lightning import ExactlyOnce
    from headrace.torch import to_torch

    steps: list[list[int]] = []

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if first_step is not None and not steps:
                first_step()
            steps.append([int(v) for v in batch["id"]])
            return self.layer(batch["id"].float().unsqueeze(1)).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def train_dataloader(self) -> Any:
            return StatefulDataLoader(to_torch(dataset(case)), batch_size=None)

    every = pl.callbacks.ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=1, save_top_k=-1,
                                         filename="{step}")
    trainer = pl.Trainer(accelerator="cpu", max_epochs=1, callbacks=[ExactlyOnce(), every], logger=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    try:
        trainer.fit(Tiny(), ckpt_path=ckpt_path)
    except SystemExit:  # Ctrl-C: Lightning shut down gracefully, then exits
        steps.append([])  # (marks the interruption)
    return steps


def lightning_main(case: dict[str, Any]) -> dict[str, Any]:
    """Ctrl-C during ``fit``, then ``fit(ckpt_path=<the last step's checkpoint>)`` in this process: the steps
    up to that checkpoint and the resumed run's together train on every element once."""
    import glob
    import logging
    import tempfile
    import warnings

    import torch

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    main_id = threading.get_ident()
    fired: list[float] = []

    def event() -> None:
        fired.append(time.monotonic())
        signal.pthread_kill(main_id, signal.SIGINT)

    with tempfile.TemporaryDirectory(prefix="lightning-ctrl-c-") as d:
        timer = threading.Timer(case["delay_s"], event)  # from the first step (Lightning imports for seconds)
        first = lightning_run(case, d, None, timer.start)
        ended_at = time.monotonic()
        timer.cancel()
        interrupted = bool(first) and first[-1] == []
        ckpts = sorted(glob.glob(f"{d}/*.ckpt"), key=lambda p: int(p.rsplit("step=", 1)[1].split(".")[0]))
        done = int(torch.load(ckpts[-1], weights_only=False)["global_step"]) if ckpts else 0
        signal.signal(signal.SIGINT, signal.default_int_handler)
        again = lightning_run(case, d, ckpts[-1] if ckpts else None)
    got = Counter(i for ids in first[:done] + again for i in ids)
    return {"ended": "KeyboardInterrupt" if interrupted else "end", "after_event_s": ended_at - fired[0] if fired
            else None, "batches_before": done, "ids": sorted(got.items())}


def main() -> None:
    case = json.loads(sys.argv[1])
    if case["adapter"] == "lightning":
        result = lightning_main(case)
        time.sleep(1.0)
        threads = [t.name for t in threading.enumerate() if t.name.startswith("headrace")]
        print(json.dumps({**result, "threads": threads, "processes": _alive_children(), "growth": None}), flush=True)
        return
    faulthandler.dump_traceback_later(90, exit=True)
    if case["adapter"] == "keras":
        os.environ.setdefault("KERAS_BACKEND", "torch")
    if case["adapter"] == "jax":
        import jax

        jax.devices()  # the backend's own memory, before the base RSS is taken
    from tests.promises.child import RssSampler

    signal.signal(signal.SIGINT, signal.default_int_handler)
    log: list[tuple[list[int], Any]] = []
    sampler = RssSampler() if case["adapter"] == "jax" else None
    run = Run(case, None)
    main_id = threading.get_ident()
    fired: list[float] = []

    def event() -> None:
        fired.append(time.monotonic())
        if case["event"] == "sigint":
            signal.pthread_kill(main_id, signal.SIGINT)
        else:
            run.close()

    timer = threading.Timer(case["delay_s"], event)
    ended = "end"
    try:
        timer.start()
        while True:
            try:
                ids = run.next()
            except StopIteration:
                break
            log.append((ids, run.state()))
    except BaseException as e:  # KeyboardInterrupt, IteratorClosedError: how the first run ended
        ended = type(e).__name__ if isinstance(e, KeyboardInterrupt) or "closed" in str(e) else repr(e)[:300]
    ended_at = time.monotonic()
    while True:  # the run ended before the event: it must not land in what follows
        try:
            timer.cancel()
            timer.join(5)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            break
        except KeyboardInterrupt:
            pass
    if case["adapter"] == "stateful":  # a DataLoader's workers end when it and its iterator go (it has no close())
        del run.it, run.obj
    got: Counter[int] = Counter(i for ids, _ in log for i in ids)
    state = log[-1][1] if log else None
    again = Run(case, state)
    while True:
        try:
            got.update(again.next())
        except StopIteration:
            break
    again.close()
    del again
    growth = sampler.stop() if sampler is not None else None
    time.sleep(1.0)
    threads = [t.name for t in threading.enumerate() if t.name.startswith("headrace")]
    print(json.dumps({"ended": ended, "after_event_s": ended_at - fired[0] if fired else None, "batches_before":
                      len(log), "ids": sorted(got.items()), "threads": threads, "processes": _alive_children(),
                      "growth": growth}), flush=True)


if __name__ == "__main__":
    main()
