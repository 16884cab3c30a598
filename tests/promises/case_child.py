"""One generated case (``cases.py``) in a fresh process: ``python -m tests.promises.case_child CASE WORKDIR ARGS``.

Writes the case's files under ``WORKDIR``, then prints one JSON line per phase:

- ``run``: the whole stream, uninterrupted; memory of this process and its children sampled from outside the
  pipeline (a thread: RSS every 2 ms, or PSS every 20 ms while there are child processes, whose pages the
  parent shares); the tracked peak, the overdraft, every element's ids in order, the expected stream;
- ``chain``: the restore chain (state -> json -> fresh pipeline -> restore -> read k -> state ...) at
  ``case["points"]`` (fractions of the run's length), every element's ids in order;
- ``torch``: ``to_torch`` in a 2-worker ``DataLoader`` (``case["torch"]``: fork or spawn): the ids every
  worker yielded and each worker's memory growth (measured inside the worker, around the iteration).

Each phase says its ``outcome``: ``ok``, ``refused`` (a ``MemoryBudgetError``), ``clear_error`` (another
``HeadraceError``: what a damaged input without ``ignore_errors()`` must give) or ``error`` (anything else,
with the traceback). A watchdog (``faulthandler``) dumps every thread's stack and exits on a hang.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from typing import Any

import numpy as np
import psutil

import headrace as hr
from tests.promises.cases import build
from tests.promises.ops import flat


class Sampler:
    """Peak memory of this process and its children: RSS, or PSS (shared pages split) once children exist."""

    def __init__(self) -> None:
        self.proc = psutil.Process()
        self.base = self.proc.memory_info().rss
        self.peak = self.base
        self.used_pss = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._thread.start()

    def total(self) -> int:
        children = self.proc.children(recursive=True)
        if not children:
            return self.proc.memory_info().rss
        self.used_pss = True
        total = 0
        for p in [self.proc, *children]:
            try:
                total += p.memory_full_info().pss
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        period = 0.002
        while not self._stop.wait(period):
            self.peak = max(self.peak, self.total())
            period = 0.02 if self.used_pss else 0.002

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return max(self.peak, self.total()) - self.base


def element_ids(x: Any) -> list[int]:
    v = x["id"]
    v = v.numpy() if hasattr(v, "numpy") else v
    return [int(t) for t in np.asarray(v).reshape(-1) if t >= 0]


def check_payload(x: Any) -> None:
    """Each id's payload row still holds ``id % 251`` (a decoded, recycled or padded buffer that went wrong
    would not). Rows may be padded with zeros, or ragged (object arrays)."""
    ident = np.asarray(x["id"].numpy() if hasattr(x["id"], "numpy") else x["id"])
    payload = x["payload"].numpy() if hasattr(x["payload"], "numpy") else x["payload"]
    payload = np.asarray(payload) if payload.dtype == object else payload  # (ragged rows: object arrays)
    rows = [payload] if ident.ndim == 0 else list(payload.reshape(ident.size, -1))
    for i, row in zip(ident.reshape(-1), rows):
        first = np.asarray(row).reshape(-1)
        while first.size and first.dtype == object:
            first = np.asarray(first[0]).reshape(-1)
        if i >= 0 and first.size and int(first[0]) != int(i) % 251:
            raise AssertionError(f"element {int(i)}: payload starts with {int(first[0])}, not {int(i) % 251}")


def _outcome(e: BaseException) -> dict[str, Any]:
    if isinstance(e, hr.MemoryBudgetError):
        return {"outcome": "refused", "detail": f"{type(e).__name__}: {str(e)[:300]}"}
    if isinstance(e, hr.HeadraceError):
        return {"outcome": "clear_error", "detail": f"{type(e).__name__}: {str(e)[:300]}"}
    return {"outcome": "error", "detail": "".join(traceback.format_exception(e))[-3000:]}


def phase_run(case: dict[str, Any], workdir: str) -> dict[str, Any]:
    ds, model = build(case, workdir, os.path.join(workdir, "cache-run"))
    seq: list[list[int]] = []
    res: dict[str, Any] = {"phase": "run", "outcome": "ok"}
    sampler = Sampler()
    t0 = time.perf_counter()
    it = None
    try:
        it = iter(ds)
        for x in it:
            check_payload(x)
            seq.append(element_ids(x))
            del x
    except Exception as e:
        res.update(_outcome(e))
    finally:
        stats = it.memory_stats() if it is not None else {}
        if it is not None:
            it.close()
    res.update(seconds=time.perf_counter() - t0, growth=sampler.stop(), pss=sampler.used_pss,
               tracked_peak=stats.get("peak_bytes", 0), limit=stats.get("limit_bytes", case["budget"]),
               overdraft=stats.get("overdraft_bytes", 0), seq=seq,
               expected={"order": None if model.order is None else [flat(e) for e in model.order],
                         "counts": sorted(model.counts.items()), "exact": model.exact,
                         "deterministic": model.deterministic})
    return res


def phase_chain(case: dict[str, Any], workdir: str, length: int) -> dict[str, Any]:
    stops = [round(p * length) for p in case["points"]]
    seq: list[list[int]] = []
    state = None
    try:
        for stop in [*stops, None]:
            ds, _ = build(case, workdir, os.path.join(workdir, "cache-chain"))
            with iter(ds) as it:
                if state is not None:
                    it.set_state(state)
                while stop is None or len(seq) < stop:
                    try:
                        x = next(it)
                    except StopIteration:
                        break
                    check_payload(x)
                    seq.append(element_ids(x))
                if stop is not None:
                    state = json.loads(json.dumps(it.get_state()))
    except Exception as e:
        return {"phase": "chain", "seq": seq, "stops": stops, **_outcome(e)}
    return {"phase": "chain", "outcome": "ok", "seq": seq, "stops": stops}


def phase_torch(case: dict[str, Any], workdir: str) -> dict[str, Any]:
    from torch.utils.data import DataLoader

    from tests.promises.torch_case import Measured

    ds, _ = build(case, workdir, os.path.join(workdir, "cache-torch"))
    loader = DataLoader(Measured(ds, 2), batch_size=None, num_workers=2, multiprocessing_context=case["torch"],
                        timeout=60)
    seq: list[list[int]] = []
    workers: list[dict[str, Any]] = []
    try:
        for x in loader:
            if isinstance(x, dict) and "__worker__" in x:
                workers.append({k: int(v) for k, v in x.items()})
                continue
            check_payload(x)
            seq.append(element_ids(x))
    except Exception as e:
        return {"phase": "torch", "seq": seq, "workers": workers, **_outcome(e)}
    return {"phase": "torch", "outcome": "ok", "seq": seq, "workers": workers}


def main() -> None:
    case, workdir = json.loads(sys.argv[1]), sys.argv[2]
    args = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    faulthandler.dump_traceback_later(args.get("hang_s", 120), exit=True)
    faulthandler.register(signal.SIGUSR1)
    warnings.simplefilter("ignore")
    build(case, workdir, os.path.join(workdir, "cache-write"), write=True)
    run = phase_run(case, workdir)
    print(json.dumps(run), flush=True)
    damaged_unskipped = case["source"].get("corrupt") and not case["source"]["corrupt"]["ignore"]
    if run["outcome"] == "ok" and not damaged_unskipped:
        faulthandler.dump_traceback_later(args.get("hang_s", 120), exit=True)
        print(json.dumps(phase_chain(case, workdir, len(run["seq"]))), flush=True)
    if case.get("torch") and run["outcome"] == "ok":
        faulthandler.dump_traceback_later(args.get("hang_s", 120), exit=True)
        print(json.dumps(phase_torch(case, workdir)), flush=True)
    faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    main()
