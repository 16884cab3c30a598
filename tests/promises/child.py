"""One promise check in a fresh process: ``python -m tests.promises.child MODE SHAPE_JSON [ARGS_JSON]``.

Prints one JSON line (the result) on stdout. Modes:

- ``memory``: stream the whole shape; RSS of this process and its children is sampled every 2 ms from the
  moment before ``iter()``; reports the growth over that base, the tracked peak, the overdraft and the ids
  (and a ``MemoryBudgetError``'s message, ``refused``, where the pipeline refused its budget).
- ``restore``: at ``points`` (element counts) take ``get_state()`` (through ``json``), close, build the
  pipeline again, ``set_state`` and go on; reports the ids (exactly once means the multiset is whole).
- ``run``: stream and log every id (``log`` file, flushed per element), writing a checkpoint
  (``{"consumed": k, "state": ...}``, atomic rename) every ``every`` elements, until killed.
- ``recover``: read ``log`` and the checkpoint; restore and stream the rest; reports the ids consumed
  before the checkpoint plus the ids after the restore.
- ``interrupt``: a thread sends SIGINT to the main thread (``group``: to the whole process group, workers
  included, as Ctrl-C in a terminal does) at random moments while it iterates (``min_gap_s``..``max_gap_s``
  apart; with ``second_gap_s``: each one followed by another that far behind; ``signals``: that many, then
  the loop ends, the last iterator left as the last signal left it); each ``KeyboardInterrupt`` is
  caught; the iterator must then be usable or closed (``IteratorClosedError``: a new one is built, as a
  notebook user does). Reports the child processes still alive 1 s after the last ``close()``.
- ``close_thread``: another thread closes the iterator while the main thread waits in ``next()``.

A watchdog (``faulthandler``) dumps every thread's stack and exits on a hang (the parent reports it).
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
import warnings
from collections import Counter
from typing import Any

import psutil

import headrace as hr
from tests.promises.shapes import build, check_payload, ids


class RssSampler:
    """Peak RSS of this process plus its children, sampled in a thread (what the OS sees)."""

    def __init__(self, period_s: float = 0.002) -> None:
        self.proc = psutil.Process()
        self.base = self.rss()
        self.peak = self.base
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def rss(self) -> int:
        total = self.proc.memory_info().rss
        for c in self.proc.children(recursive=True):
            try:
                total += c.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.peak = max(self.peak, self.rss())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        self.peak = max(self.peak, self.rss())
        return self.peak - self.base


def _ids_result(got: Counter[int]) -> dict[str, Any]:
    return {"ids": sorted(got.items())}


def mode_memory(shape: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    ds = build(shape, args.get("cache_dir"))
    got: Counter[int] = Counter()
    sampler = RssSampler()
    t0 = time.perf_counter()
    refused = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hr.MemoryBudgetWarning)
        with iter(ds) as it:
            try:
                for x in it:
                    check_payload(x)
                    got.update(ids(x))
                    del x
            except hr.MemoryBudgetError as e:  # a budget that cannot hold what the pipeline needs at once
                refused = str(e)
            stats = it.memory_stats()
    seconds = time.perf_counter() - t0
    growth = sampler.stop()
    return {"refused": refused, "growth": growth, "seconds": seconds, "tracked_peak": stats["peak_bytes"],
            "limit": stats["limit_bytes"], "overdraft": stats["overdraft_bytes"], **_ids_result(got)}


def mode_restore(shape: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    points = sorted(args["points"])
    got: Counter[int] = Counter()
    state = None
    consumed = 0
    for stop_at in [*points, None]:
        with iter(build(shape, args.get("cache_dir"))) as it:
            if state is not None:
                it.set_state(state)
            while stop_at is None or consumed < stop_at:
                try:
                    x = next(it)
                except StopIteration:
                    break
                check_payload(x)
                got.update(ids(x))
                consumed += 1
            if stop_at is not None:
                state = json.loads(json.dumps(it.get_state()))
    return _ids_result(got)


def mode_run(shape: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    log_path, ckpt, every = args["log"], args["checkpoint"], args["every"]
    consumed = 0
    with open(log_path, "w") as log, iter(build(shape, args.get("cache_dir"))) as it:
        for x in it:
            log.write(" ".join(map(str, ids(x))) + "\n")
            log.flush()
            consumed += 1
            if consumed % every == 0:
                tmp = ckpt + ".tmp"
                with open(tmp, "w") as f:
                    json.dump({"consumed": consumed, "state": it.get_state()}, f)
                os.replace(tmp, ckpt)
    return {"finished": consumed}


def mode_recover(shape: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    with open(args["log"]) as f:
        lines = [line.split() for line in f.read().splitlines()]
    got: Counter[int] = Counter()
    consumed, state = 0, None
    if os.path.exists(args["checkpoint"]):
        with open(args["checkpoint"]) as f:
            saved = json.load(f)
        consumed, state = saved["consumed"], saved["state"]
    if len(lines) < consumed:
        raise AssertionError(f"log has {len(lines)} lines but the checkpoint says {consumed} were consumed")
    for line in lines[:consumed]:
        got.update(int(v) for v in line)
    with iter(build(shape, args.get("cache_dir"))) as it:
        if state is not None:
            it.set_state(state)
        for x in it:
            got.update(ids(x))
    return {"checkpoint_at": consumed, "logged": len(lines), **_ids_result(got)}


def mode_interrupt(shape: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random(args.get("seed", 0))
    # A shell's background job starts with SIGINT ignored and Python then leaves it ignored, so the signals
    # would vanish: Ctrl-C's own handler, as in a terminal.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main_id = threading.get_ident()
    done = threading.Event()
    sent = 0

    group = args.get("group", False)

    def gap() -> float:  # with "second_gap_s": each signal followed by a second one soon (Ctrl-C pressed twice)
        second = args.get("second_gap_s")
        if second and sent % 2:
            return rng.uniform(*second)
        return rng.uniform(args.get("min_gap_s", 0.0005), args.get("max_gap_s", 0.01))

    finished = threading.Event()

    def interrupter() -> None:  # until done, or "signals" were sent (then the loop stops)
        nonlocal sent
        while sent < args.get("signals", 1 << 62) and not done.wait(gap()):
            if group:
                os.killpg(os.getpgrp(), signal.SIGINT)
            else:
                signal.pthread_kill(main_id, signal.SIGINT)
            sent += 1
        finished.set()

    outcomes: Counter[str] = Counter()
    got: Counter[int] = Counter()

    def rebuild() -> hr.Iterator:
        # Building a pipeline runs user code (element specs are traced from the map functions, as tf.data
        # traces them): an interrupt landing there is the user's KeyboardInterrupt, not the engine's; retry.
        while True:
            try:
                return iter(build(shape, args.get("cache_dir")))
            except KeyboardInterrupt:
                outcomes["interrupted_building"] += 1

    it = iter(build(shape, args.get("cache_dir")))
    sender = threading.Thread(target=interrupter, name="interrupter", daemon=True)
    deadline = time.monotonic() + args.get("seconds", 3.0)
    try:
        sender.start()  # (inside the try: the first signal may land before start() returns)
    except KeyboardInterrupt:
        outcomes["interrupted_outside"] += 1
    while True:
        try:
            if time.monotonic() >= deadline or finished.is_set():
                break
            try:
                x = next(it)
                got.update(ids(x))
                outcomes["element"] += 1
            except StopIteration:
                outcomes["end"] += 1
                it.close()
                it = rebuild()
            except KeyboardInterrupt:
                outcomes["interrupted"] += 1
            except hr.IteratorClosedError:
                outcomes["closed"] += 1
                it = rebuild()
        except KeyboardInterrupt:  # landed outside next() (the iterator is as it was, or closed: rebuilt next)
            outcomes["interrupted_outside"] += 1
    while True:  # stop the interrupter; a signal it sent meanwhile may land anywhere in here
        try:
            done.set()
            sender.join(5.0)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # late signals from the interrupter thread
            break
        except KeyboardInterrupt:
            outcomes["interrupted_outside"] += 1
    t0 = time.monotonic()
    it.close()
    close_s = time.monotonic() - t0
    return {"outcomes": dict(outcomes), "signals": sent, "close_s": close_s, "workers_alive": _children_after(1.0)}


def _children_after(seconds: float) -> list[str]:
    """The child processes of this one still running ``seconds`` after now (zombies are not running)."""
    time.sleep(seconds)
    alive = []
    for c in psutil.Process().children(recursive=True):
        try:
            if c.status() != psutil.STATUS_ZOMBIE:
                alive.append(" ".join(c.cmdline())[-80:])
        except psutil.Error:
            pass
    return alive


def mode_close_thread(shape: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    it = iter(build(shape, args.get("cache_dir")))
    next(it)
    delay = args.get("delay_s", 0.05)
    closer = threading.Timer(delay, it.close)
    closer.start()
    raised = None
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < 10:
            next(it)
    except BaseException as e:
        raised = type(e).__name__
    closer.join(5)
    return {"raised": raised, "after_s": time.monotonic() - t0}


MODES = {"memory": mode_memory, "restore": mode_restore, "run": mode_run, "recover": mode_recover,
         "interrupt": mode_interrupt, "close_thread": mode_close_thread}


def main() -> None:
    mode, shape = sys.argv[1], json.loads(sys.argv[2])
    args = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    faulthandler.dump_traceback_later(args.get("hang_s", 60), exit=True)
    faulthandler.register(signal.SIGUSR1)
    result = MODES[mode](shape, args)
    faulthandler.cancel_dump_traceback_later()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
