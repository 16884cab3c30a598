"""Parent side of the promise suite: run a shape in a child process and judge the three promises.

``check_memory(shape)``, ``check_restore(shape, points)``, ``check_kill(shape, ...)``,
``check_interrupts(shape)`` return a :class:`Verdict`: ``ok`` plus the reason and the child's figures.
Used by ``tests/promises/test_*.py`` (a fast subset) and ``bench/promises.py`` (the full sweep).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.promises.shapes import expected_ids

REPO = Path(__file__).resolve().parents[2]
MiB = 1024**2


def rss_cap(budget: int) -> float:
    """The promise: RSS growth over the base stays within budget x 1.1 + 64 MiB."""
    return budget * 1.1 + 64 * MiB


@dataclass
class Verdict:
    kind: str                 # "ok", "over_cap", "lost", "duplicated", "hang", "error", "leak", "refused"
    detail: str = ""
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(REPO / "src")
    parts = [str(REPO), src] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


def child_command(mode: str, shape: dict[str, Any], args: dict[str, Any]) -> list[str]:
    return [sys.executable, "-m", "tests.promises.child", mode, json.dumps(shape), json.dumps(args)]


def run_child(mode: str, shape: dict[str, Any], args: dict[str, Any] | None = None,
              timeout_s: float = 60.0) -> tuple[dict[str, Any] | None, Verdict | None]:
    """Run one child (in a session of its own: its signals to its process group reach nobody else);
    (result, None) or (None, a hang/error verdict)."""
    args = {"hang_s": timeout_s, **(args or {})}
    try:
        out = subprocess.run(child_command(mode, shape, args), capture_output=True, text=True,
                             timeout=timeout_s + 15, env=_env(), cwd=REPO, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        return None, Verdict("hang", f"{mode}: no result within {timeout_s + 15:.0f} s",
                             {"stderr": (e.stderr or b"")[-4000:] if isinstance(e.stderr, bytes) else e.stderr})
    if "Timeout (" in out.stderr and out.returncode != 0:
        return None, Verdict("hang", f"{mode}: the child's watchdog fired after {timeout_s:.0f} s",
                             {"stderr": out.stderr[-6000:]})
    if out.returncode != 0:
        return None, Verdict("error", f"{mode}: child exited {out.returncode}", {"stderr": out.stderr[-6000:]})
    return json.loads(out.stdout.strip().splitlines()[-1]), None


def judge_ids(shape: dict[str, Any], got_items: list[list[int]], figures: dict[str, Any]) -> Verdict:
    got = Counter({int(k): int(v) for k, v in got_items})
    want = expected_ids(shape)
    lost = want - got
    dup = got - want
    if lost:
        return Verdict("lost", f"{sum(lost.values())} ids lost (e.g. {sorted(lost)[:8]}), "
                               f"{sum(dup.values())} duplicated", figures)
    if dup:
        return Verdict("duplicated", f"{sum(dup.values())} ids duplicated (e.g. {sorted(dup)[:8]})", figures)
    return Verdict("ok", "", figures)


def check_memory(shape: dict[str, Any], timeout_s: float = 120.0, cache_dir: str | None = None) -> Verdict:
    res, bad = run_child("memory", shape, {"cache_dir": cache_dir}, timeout_s)
    if bad is not None:
        return bad
    figures = {k: res[k] for k in ("growth", "seconds", "tracked_peak", "limit", "overdraft")}
    cap = rss_cap(shape["budget"])
    if res.get("refused") is not None:  # a clear refusal, before anything was overdrawn (judged below)
        figures["refused"] = res["refused"]
        if res["overdraft"] or res["tracked_peak"] > res["limit"] or res["growth"] > cap:
            return Verdict("over_cap", f"refused ({res['refused'][:200]}) after going over the budget", figures)
        if "\n" in res["refused"]:
            return Verdict("error", f"a refusal of more than one line: {res['refused'][:400]!r}", figures)
        return Verdict("refused", res["refused"], figures)
    if res["growth"] > cap:
        return Verdict("over_cap", f"RSS grew by {res['growth'] / MiB:.1f} MiB > cap {cap / MiB:.1f} MiB", figures)
    if res["tracked_peak"] > res["limit"]:
        return Verdict("over_cap", f"tracked peak {res['tracked_peak'] / MiB:.1f} MiB > budget "
                                   f"{res['limit'] / MiB:.1f} MiB", figures)
    if res["overdraft"]:
        return Verdict("over_cap", f"overdraft of {res['overdraft'] / MiB:.1f} MiB", figures)
    return judge_ids(shape, res["ids"], figures)


def check_restore(shape: dict[str, Any], points: list[int], timeout_s: float = 120.0,
                  cache_dir: str | None = None) -> Verdict:
    res, bad = run_child("restore", shape, {"points": points, "cache_dir": cache_dir}, timeout_s)
    if bad is not None:
        return bad
    return judge_ids(shape, res["ids"], {"points": points})


def check_kill(shape: dict[str, Any], *, after_elements: int, every: int, timeout_s: float = 120.0,
               cache_dir: str | None = None) -> Verdict:
    """Run, SIGKILL once ``after_elements`` were logged, recover from the last checkpoint, judge the ids."""
    with tempfile.TemporaryDirectory(prefix="promise-kill-") as tmp:
        args = {"log": os.path.join(tmp, "log"), "checkpoint": os.path.join(tmp, "ckpt.json"), "every": every,
                "cache_dir": cache_dir, "hang_s": timeout_s}
        proc = subprocess.Popen(child_command("run", shape, args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=_env(), cwd=REPO)
        deadline = time.monotonic() + timeout_s
        killed = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with open(args["log"]) as f:
                    if sum(1 for _ in f) >= after_elements:
                        proc.send_signal(signal.SIGKILL)
                        killed = True
                        break
            except FileNotFoundError:
                pass
            time.sleep(0.002)
        if not killed and proc.poll() is None:
            proc.kill()
            proc.communicate()
            return Verdict("hang", f"run: fewer than {after_elements} elements in {timeout_s:.0f} s")
        _, err = proc.communicate()
        if not killed and proc.returncode != 0:
            return Verdict("error", f"run: exited {proc.returncode}", {"stderr": err.decode()[-6000:]})
        res, bad = run_child("recover", shape, args, timeout_s)
        if bad is not None:
            return bad
        return judge_ids(shape, res["ids"], {"killed_after": after_elements, "checkpoint_at": res["checkpoint_at"],
                                             "logged": res["logged"]})


def check_interrupts(shape: dict[str, Any], seconds: float = 2.0, seed: int = 0, timeout_s: float = 60.0,
                     **args: Any) -> Verdict:
    """Repeated SIGINTs while iterating (``args``: ``group``, ``min_gap_s``, ``max_gap_s``: see ``child``); a
    close() over 2 s is a hang, a child process alive 1 s after the last close() a leak."""
    res, bad = run_child("interrupt", shape, {"seconds": seconds, "seed": seed, **args}, timeout_s)
    if bad is not None:
        return bad
    if res["close_s"] > 2.0:
        return Verdict("hang", f"close() took {res['close_s']:.2f} s after interrupts", res)
    if res["workers_alive"]:
        return Verdict("leak", f"{len(res['workers_alive'])} process(es) alive 1 s after the last close(): "
                               f"{res['workers_alive']}", res)
    return Verdict("ok", "", res)


def check_close_from_thread(shape: dict[str, Any], delay_s: float = 0.05, timeout_s: float = 60.0) -> Verdict:
    res, bad = run_child("close_thread", shape, {"delay_s": delay_s}, timeout_s)
    if bad is not None:
        return bad
    if res["raised"] != "IteratorClosedError":
        return Verdict("error", f"next() after close() from another thread raised {res['raised']}", res)
    if res["after_s"] > delay_s + 2.0:
        return Verdict("hang", f"next() returned {res['after_s']:.2f} s after close()", res)
    return Verdict("ok", "", res)


def kill_point(rng: random.Random, n_elements: int) -> int:
    return rng.randint(1, max(1, n_elements - 1))


def check_adapter(case: dict[str, Any], timeout_s: float = 150.0) -> Verdict:
    """An adapter under Ctrl-C or close() from another thread (``tests/promises/adapter_child.py``): the first
    run ends within 2 s of the event, the resumed run yields exactly the rest (every id once), no headrace
    thread or child process is left 1 s after, and to_jax's RSS growth stays within ``rss_cap(budget)``."""
    try:
        out = subprocess.run([sys.executable, "-m", "tests.promises.adapter_child", json.dumps(case)],
                             capture_output=True, text=True, timeout=timeout_s, env=_env(), cwd=REPO)
    except subprocess.TimeoutExpired:
        return Verdict("hang", f"{case['adapter']}: no result within {timeout_s:.0f} s")
    if out.returncode != 0:
        return Verdict("hang" if "Timeout (" in out.stderr else "error", f"{case['adapter']}: child exited "
                       f"{out.returncode}", {"stderr": out.stderr[-6000:]})
    res = json.loads(out.stdout.strip().splitlines()[-1])
    figures = {k: v for k, v in res.items() if k != "ids"}
    if res["after_event_s"] is not None and res["after_event_s"] > 2.0:
        return Verdict("hang", f"the first run ended {res['after_event_s']:.2f} s after the {case['event']}", figures)
    if res["threads"] or res["processes"]:
        return Verdict("leak", f"alive 1 s after the end: threads {res['threads']}, processes {res['processes']}",
                       figures)
    if res["growth"] is not None and res["growth"] > rss_cap(case["budget"]):
        return Verdict("over_cap", f"RSS grew by {res['growth'] / MiB:.1f} MiB > cap "
                                   f"{rss_cap(case['budget']) / MiB:.1f} MiB", figures)
    return judge_ids({"n": case["n"], "stages": []}, res["ids"], figures)
