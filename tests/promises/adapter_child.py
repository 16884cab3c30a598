"""The adapters under Ctrl-C and ``close()`` from another thread, in a fresh process:
``python -m tests.promises.adapter_child CASE_JSON`` prints one JSON line.

A case (``adapter_case(seed)``) names an adapter (``to_torch``; ``StatefulDataLoader`` over it with 2
workers started by forkserver; ``headrace.keras.adapt``; ``to_jax``), a pipeline (``range(n)`` -> map on
threads or processes -> batch), and what happens after a seeded delay: ``sigint`` (SIGINT to the main thread,
as Ctrl-C) or ``close`` (the adapter's ``close()`` from a timer thread). The loop saves the adapter's state
after every batch (the batch's ids and the state appended together, so an interrupt between them replays that
batch rather than losing it); after the event it builds the adapter again from the last state and reads to the
end. Reports: the ids (exactly once: each of ``range(n)`` once), how the first run ended, the seconds from
the event to that end, the headrace threads and the child processes alive 1 s after the end (forkserver's
server and multiprocessing's resource tracker excepted: they are the start method's, kept for the process's
life), and for ``to_jax`` the peak RSS growth over the run (sampled every 2 ms) against the budget.
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
ADAPTERS = ("torch", "stateful", "keras", "jax")


def adapter_case(seed: int) -> dict[str, Any]:
    """A seeded case (see the module docstring); adapters in turn, so any 4 seeds in a row cover them all."""
    rng = random.Random(seed)
    adapter = ADAPTERS[seed % len(ADAPTERS)]
    event = "sigint" if adapter == "stateful" else rng.choice(["sigint", "close"])  # (no close() on a DataLoader)
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


def main() -> None:
    case = json.loads(sys.argv[1])
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
