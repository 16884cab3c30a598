"""Parent side of the wide sweep: run a generated case (``cases.py``) in a child process and judge each phase.

``check_case(case)`` returns ``[(phase, Verdict)]`` with ``Verdict.kind`` one of ``ok``, ``over_cap`` (RSS /
PSS growth over budget x 1.1 + 64 MiB, or tracked peak over the budget), ``overdraft``, ``lost``,
``duplicated``, ``reordered``, ``hang``, ``error``, ``refused`` (a clear ``MemoryBudgetError``: counted apart).

- ``run``: memory, then the ids against the expected stream: exactly its multiset (a sub-multiset where
  ``rejection_resample`` drops elements), in its order where the order is predictable and deterministic. A
  damaged input without ``ignore_errors()`` must end in a clear error (a ``HeadraceError`` naming it) after
  a prefix of good elements; with it, the good records exactly.
- ``chain``: element by element equal to the uninterrupted run where the pipeline is deterministic (else the
  same multiset): 0 lost, 0 duplicated, 0 reordered.
- ``torch``: the workers together yield the expected multiset; each worker's growth within the cap.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from typing import Any

from tests.promises.harness import REPO, Verdict, _env, rss_cap

MiB = 1024**2


def _counts(seq: list[list[int]]) -> Counter[int]:
    return Counter(i for e in seq for i in e)


def _compare(got: Counter[int], want: Counter[int], exact: bool, figures: dict[str, Any]) -> Verdict | None:
    lost, dup = want - got, got - want
    if dup:
        return Verdict("duplicated", f"{sum(dup.values())} ids more often than expected (e.g. {sorted(dup)[:8]})",
                       figures)
    if lost and exact:
        return Verdict("lost", f"{sum(lost.values())} ids lost (e.g. {sorted(lost)[:8]})", figures)
    return None


def _first_difference(a: list[list[int]], b: list[list[int]]) -> int | None:
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return k
    return None if len(a) == len(b) else min(len(a), len(b))


def _reference(run: dict[str, Any]) -> Counter[int]:
    """What a restored or sharded run must yield: the uninterrupted run's ids, or where elements are dropped at
    random (``rejection_resample``: another order draws another subset) at most the expected ids."""
    if run["expected"]["exact"]:
        return _counts(run["seq"])
    return Counter({int(k): int(v) for k, v in run["expected"]["counts"]})


def judge_run(case: dict[str, Any], res: dict[str, Any]) -> Verdict:
    figures = {k: res.get(k) for k in ("growth", "seconds", "tracked_peak", "limit", "overdraft", "pss")}
    figures["detail"] = res.get("detail", "")[-400:]
    outcome = res["outcome"]
    corrupt = case["source"].get("corrupt")
    if outcome == "error":
        return Verdict("error", "run: " + res["detail"].strip().splitlines()[-1][:300], {"stderr": res["detail"]})
    cap = rss_cap(case["budget"])
    if res["growth"] > cap:
        return Verdict("over_cap", f"{'PSS' if res['pss'] else 'RSS'} grew by {res['growth'] / MiB:.1f} MiB > cap "
                                   f"{cap / MiB:.1f} MiB", figures)
    if res["tracked_peak"] > res["limit"]:
        return Verdict("over_cap", f"tracked peak {res['tracked_peak'] / MiB:.1f} MiB > budget "
                                   f"{res['limit'] / MiB:.1f} MiB", figures)
    if res["overdraft"]:
        return Verdict("overdraft", f"overdraft of {res['overdraft'] / MiB:.1f} MiB", figures)
    if outcome == "refused":
        return Verdict("refused", res["detail"][:200], figures)
    exp = res["expected"]
    want = Counter({int(k): int(v) for k, v in exp["counts"]})
    got = _counts(res["seq"])
    if corrupt and not corrupt["ignore"]:
        bad = _compare(got, want, False, figures)
        if bad is not None:
            return bad
        if outcome == "clear_error":
            return Verdict("ok", "", figures)
        if got != want:
            return Verdict("error", "a damaged input ended without an error and without all elements", figures)
        return Verdict("ok", "", figures)  # (the ops never reached the damage)
    if outcome == "clear_error":
        return Verdict("error", "run: " + res["detail"][:300], figures)
    bad = _compare(got, want, exp["exact"], figures)
    if bad is not None:
        return bad
    if exp["order"] is not None and exp["deterministic"]:
        k = _first_difference(res["seq"], exp["order"])
        if k is not None:
            return Verdict("reordered", f"run: element {k} holds {res['seq'][k][:6]}, expected "
                                        f"{exp['order'][k][:6]}", figures)
    return Verdict("ok", "", figures)


def judge_chain(run: dict[str, Any], res: dict[str, Any]) -> Verdict:
    figures = {"stops": res["stops"]}
    if res["outcome"] == "refused":
        return Verdict("refused", "chain: " + res["detail"][:200], figures)
    if res["outcome"] != "ok":
        return Verdict("error", "chain: " + res["detail"].strip().splitlines()[-1][:300], {"stderr": res["detail"]})
    bad = _compare(_counts(res["seq"]), _reference(run), run["expected"]["exact"], figures)
    if bad is not None:
        return bad
    if run["expected"]["deterministic"]:
        k = _first_difference(res["seq"], run["seq"])
        if k is not None:
            return Verdict("reordered", f"chain restored at {res['stops']}: element {k} holds {res['seq'][k][:6]}, "
                                        f"the uninterrupted run {run['seq'][k][:6]}", figures)
    return Verdict("ok", "", figures)


def judge_torch(case: dict[str, Any], run: dict[str, Any], res: dict[str, Any]) -> Verdict:
    figures = {"workers": res["workers"]}
    if res["outcome"] == "refused":
        return Verdict("refused", "torch: " + res["detail"][:200], figures)
    if res["outcome"] != "ok":
        return Verdict("error", "torch: " + res["detail"].strip().splitlines()[-1][:300], {"stderr": res["detail"]})
    cap = rss_cap(case["budget"])
    for w in res["workers"]:
        if w["growth"] > cap:
            return Verdict("over_cap", f"torch worker {w['__worker__']} grew by {w['growth'] / MiB:.1f} MiB > cap "
                                       f"{cap / MiB:.1f} MiB", figures)
    want = _reference(run)
    got = _counts(res["seq"])
    # Each DataLoader worker batches its own share of the source, so a batch(drop_remainder=True) drops each
    # worker's remainder (as tf.data's sharded input does): fewer than size ids per worker and such stage.
    slack = sum(len(res["workers"]) * (st["size"] - 1) for st in case["stages"] if st.get("drop"))
    if slack and sum((want - got).values()) <= slack:
        want = want & got
    bad = _compare(got, want, run["expected"]["exact"], figures)
    return Verdict("ok", "", figures) if bad is None else bad


def check_case(case: dict[str, Any], timeout_s: float = 90.0) -> list[tuple[str, Verdict]]:
    """Run ``case`` in a child process (its files in a fresh temporary directory) and judge every phase."""
    workdir = tempfile.mkdtemp(prefix=f"promise-case-{case['seed']}-")
    phases = 3 if case.get("torch") else 2
    try:
        cmd = [sys.executable, "-m", "tests.promises.case_child", json.dumps(case), workdir,
               json.dumps({"hang_s": timeout_s})]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s * phases + 30, env=_env(),
                                 cwd=REPO)
            stdout, stderr, rc = out.stdout, out.stderr, out.returncode
        except subprocess.TimeoutExpired as e:
            stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            stderr = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            rc = None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results = {r["phase"]: r for r in (json.loads(line) for line in stdout.splitlines() if line.startswith("{"))}
    verdicts: list[tuple[str, Verdict]] = []
    run = results.get("run")
    if run is not None:
        verdicts.append(("run", judge_run(case, run)))
        if "chain" in results:
            verdicts.append(("chain", judge_chain(run, results["chain"])))
        if "torch" in results:
            verdicts.append(("torch", judge_torch(case, run, results["torch"])))
    hung = rc is None or ("Timeout (" in stderr and rc != 0)
    if hung:
        verdicts.append(("child", Verdict("hang", f"no result after {sorted(results)}", {"stderr": stderr[-6000:]})))
    elif rc != 0:
        verdicts.append(("child", Verdict("error", f"child exited {rc} after {sorted(results)}",
                                          {"stderr": stderr[-6000:]})))
    return verdicts
