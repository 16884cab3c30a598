"""``Iterator.explain()``: the running plan as a tree, with what each stage does, why, and how it fares.

Per stage (outermost first, inputs indented below): its settings and why they have these values (the
user's argument, AUTOTUNE's starting rule, or the tuner's change with the rate it gained), the executor of
a ``map`` with the measurement behind ``"auto"``'s choice and its worker processes, the elements it
delivered per second, the shares of its workers' time spent computing, waiting on input, waiting for room
(its consumer) and waiting for the memory budget, the bytes it holds now / at its peak and its share of
the budget, the static optimization applied there (:class:`Optimized`) and figures of the stage's own
(:class:`Figured`: a ``pack``'s packing efficiency); a stage without them implements neither.
Then the bottleneck (:func:`bottleneck`), the CPU and memory budgets, the RSS of this process plus its
worker processes, and the tuner's state.

Shares are over the stage's lifetime: ``busy`` = time inside the function / the time its workers existed
(not parked); the same for ``input`` (getting the next input element, which includes the work of the sequential stages
below), ``output`` (waiting for room in its window: its consumer is slower) and ``budget``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..._memory import format_bytes
from ..pool.executor import THREAD_WHY, Executor
from ..pool.parallel import PoolIterator
from .knobs import StageStats, StageTuning

BUSY_BOTTLENECK = 0.5
"""A stage whose workers compute at least this share of the time can be the bottleneck."""
CONSUMER_WAIT_LOW = 0.2
INPUT_BOTTLENECK = 0.3
"""A stage whose workers wait on their input at least this share of the time, and longer than they
compute, points at its input as the bottleneck."""

EXPLAIN_TRIALS = 6
"""The tuner's last trials that the text of ``explain()`` lists (the dict has them all)."""


@runtime_checkable
class Optimized(Protocol):
    """A stage a static optimization changed (``headrace._engine.tuning.static_optimizations``)."""

    def optimization(self) -> str | None:
        """What was applied at this stage, for ``explain()``, or None."""
        ...


@runtime_checkable
class Figured(Protocol):
    """A stage with figures of its own for ``explain()`` (``pack``: its packing efficiency)."""

    def stage_figures(self) -> dict[str, Any] | None:
        """Its figures (a ``*_efficiency`` share is shown as a percentage), or None."""
        ...


def _name(it: Any) -> str:
    return str(getattr(it, "stage", None) or getattr(it, "_stage", None) or getattr(it, "kind", type(it).__name__))


def account_stage(account: str, figures: dict[str, Any], stage: str) -> bool:
    """Whether the account ``account`` (its budget ``figures``) belongs to ``stage``: the stage the budget
    reports for it (``figures["stage"]``: the account's ``stage_of``, set where it is made: a batch's
    ``assembly``, a reader's ``buffers``, a process map's ``workers``; else its own name)."""
    return bool(figures["stage"] == stage)


def _stage_bytes(stages: dict[str, dict[str, Any]], name: str) -> tuple[int, int, int, list[str]]:
    """Bytes held now, at peak, and the cap of every account of stage ``name`` (:func:`account_stage`)."""
    cur = peak = cap = 0
    accounts = []
    for acc_name, s in stages.items():
        if account_stage(acc_name, s, name):
            cur += s["current_bytes"]
            peak += s["peak_bytes"]
            cap += s["cap_bytes"] or 0
            accounts.append(acc_name)
    return cur, peak, cap, accounts


def _shares(st: StageStats) -> dict[str, float]:
    span = st.worker_time_s or max(1.0, st.workers) * st.elapsed_s
    span = max(1e-9, span)
    return {"busy": st.busy_s / span, "input": st.input_s / span, "output": st.room_s / span,
            "budget": st.budget_s / span}


def describe_stage(it: Any, stages: dict[str, dict[str, Any]], limit: int, tunings: dict[str, StageTuning],
                   resources: dict[str, Executor], started_s: float) -> dict[str, Any]:
    name = _name(it)
    node: dict[str, Any] = {"stage": name, "kind": getattr(it, "kind", type(it).__name__)}
    st: StageStats | None = None
    tuning = tunings.get(name)
    if tuning is not None and it in tuning.members():
        st = tuning.stats()  # over the stage's iterators in this iteration (one per repeat epoch)
    elif isinstance(it, PoolIterator):
        st = it.pool.stage_stats()
    if st is not None:
        node["workers"] = st.workers
        node["window"] = st.window
        elapsed = st.elapsed_s
        node["throughput_per_s"] = round(st.delivered / elapsed, 1) if elapsed > 0 else None
        node["shares"] = {k: round(v, 3) for k, v in _shares(st).items()}
        node["consumer_wait_s"] = round(st.consumer_wait_s, 3)
        node["call_ms"] = round(st.busy_s / st.calls * 1e3, 3) if st.calls else None
    if tuning is not None:
        node["settings"] = {k.value: v.value for k, v in tuning.knobs.items()}
        node["why"] = {k.value: v.why for k, v in tuning.knobs.items()}
    else:
        node["why"] = {"settings": "as given (not AUTOTUNE)"}
    optimization = it.optimization() if isinstance(it, Optimized) else None
    if optimization:
        node["why"]["optimization"] = optimization
    figures = it.stage_figures() if isinstance(it, Figured) else None
    if figures:
        node["figures"] = figures
    executor = resources.get(name)
    if executor is not None:
        node["executor"] = executor.report()
    elif node["kind"] == "map":
        where = "thread" if isinstance(it, PoolIterator) else "inline (num_parallel_calls=None)"
        node["executor"] = {"executor": where, "why": THREAD_WHY}
    cur, peak, cap, accounts = _stage_bytes(stages, name)
    if accounts:
        node["bytes"] = cur
        node["peak_bytes"] = peak
        node["budget_share"] = round(cap / limit, 3) if limit else None
    node["inputs"] = []
    return node


def build_tree(root: Any, stages: dict[str, dict[str, Any]], limit: int, tunings: dict[str, Any],
               resources: dict[str, Executor], started_s: float) -> dict[str, Any]:
    def walk(it: Any, seen: set[int]) -> dict[str, Any]:
        node = describe_stage(it, stages, limit, tunings, resources, started_s)
        seen.add(id(it))
        for child in it._children():
            if child is None or id(child) in seen:
                continue
            if getattr(child, "kind", "") == "interleave_slot":
                continue  # the interleave's readers: reported in the interleave's figures
            node["inputs"].append(walk(child, seen))
        return node

    return walk(root, set())


def _flatten(node: dict[str, Any], depth: int = 0) -> list[tuple[int, dict[str, Any]]]:
    out = [(depth, node)]
    for child in node["inputs"]:
        out += _flatten(child, depth + 1)
    return out


def bottleneck(tree: dict[str, Any], consumer_wait_share: float) -> dict[str, str]:
    """The stage that limits the rate, and why.

    The timed stage with workers (an inline stage's calls are its consumers') whose workers spend the largest
    share of their time computing, if that share is at least ``BUSY_BOTTLENECK``; else, when the consumer
    rarely waits for the pipeline, the consumer itself; else the input below the deepest stage whose workers
    wait on it longer than they compute (and at least ``INPUT_BOTTLENECK`` of their time): a source or
    sequential stages, which one thread runs at a time.
    """
    flat = _flatten(tree)
    # an inline stage (0 workers: its calls run in the threads that pull from it) is not a candidate: its busy
    # share sums the time of every thread pulling through it and says nothing about its own capacity
    timed = [(d, n) for d, n in flat if "shares" in n and n.get("workers", 1) != 0]
    best = max(timed, key=lambda dn: dn[1]["shares"]["busy"], default=None)
    if best is not None and best[1]["shares"]["busy"] >= BUSY_BOTTLENECK:
        n = best[1]
        return {"stage": n["stage"], "why": f"its {n.get('workers', 1)} worker(s) compute "
                                            f"{n['shares']['busy']:.0%} of the time (the busiest stage)"}
    if consumer_wait_share < CONSUMER_WAIT_LOW:
        return {"stage": "consumer", "why": f"next() waited only {consumer_wait_share:.0%} of the time: the "
                                            "pipeline keeps up with the loop that consumes it"}
    waiting = [(d, n) for d, n in timed if n["shares"]["input"] >= max(INPUT_BOTTLENECK, n["shares"]["busy"])]
    if waiting:
        _d, n = max(waiting, key=lambda dn: dn[0])
        below = n["inputs"][0]["stage"] if n["inputs"] else "its source"
        return {"stage": below, "why": f"the workers of {n['stage']} wait on it {n['shares']['input']:.0%} of "
                                       f"their time (and compute {n['shares']['busy']:.0%})"}
    if best is not None:
        n = best[1]
        return {"stage": n["stage"], "why": f"the busiest stage ({n['shares']['busy']:.0%} of its workers' time)"}
    leaf = flat[-1][1]
    return {"stage": leaf["stage"], "why": "no stage is timed; the source"}


def render(plan: dict[str, Any]) -> str:
    """The plan as indented text (``print(it.explain())``)."""
    lines = []
    for depth, n in _flatten(plan["tree"]):
        pad = "  " * depth
        head = f"{pad}{n['stage']}"
        parts = []
        if "settings" in n:
            parts.append(", ".join(f"{k}={v}" for k, v in n["settings"].items()))
        elif "workers" in n:
            parts.append(f"workers={n['workers']}" + (f", window={n['window']}" if "window" in n else ""))
        if n.get("throughput_per_s") is not None:
            parts.append(f"{n['throughput_per_s']:.0f}/s")
        if "shares" in n:
            s = n["shares"]
            parts.append(f"busy {s['busy']:.0%} input {s['input']:.0%} output {s['output']:.0%}"
                         + (f" budget {s['budget']:.0%}" if s["budget"] >= 0.01 else ""))
        if "bytes" in n:
            share = n.get("budget_share")
            parts.append(f"holds {format_bytes(n['bytes'])} (peak {format_bytes(n['peak_bytes'])}"
                         + (f", {share:.0%} of the budget)" if share is not None else ")"))
        lines.append(head + ("  [" + "; ".join(parts) + "]" if parts else ""))
        for key, why in n.get("why", {}).items():
            if why and key != "settings":
                lines.append(f"{pad}    {key}: {why}")
        if "figures" in n:
            lines.append(f"{pad}    figures: " + ", ".join(_figure(k, v) for k, v in n["figures"].items()))
        ex = n.get("executor")
        if ex:
            extra = ""
            if ex.get("executor") == "process":
                extra = f", {ex.get('processes', 0)} processes, RSS {format_bytes(ex.get('worker_rss_bytes', 0))}"
            lines.append(f"{pad}    executor: {ex['executor']}{extra} ({ex.get('why', '')})")
    b = plan["bottleneck"]
    lines.append(f"bottleneck: {b['stage']} - {b['why']}")
    m = plan["memory"]
    lines.append(f"memory: {format_bytes(m['current_bytes'])} held of {format_bytes(m['limit_bytes'])} (peak "
                 f"{format_bytes(m['peak_bytes'])}); RSS {format_bytes(m['rss_bytes'])} = this process "
                 f"{format_bytes(m['process_rss_bytes'])} + workers {format_bytes(m['worker_rss_bytes'])}")
    c = plan["cpu"]
    lines.append(f"cpu: tuned workers hold {c['granted']} of the {c['budget']} core(s) the pipeline may keep busy "
                 "(cpu_budget)")
    t = plan.get("tuner")
    if t:
        lines.append(f"tuner: {t['state']}; {t['trials']} trials, {len(t['accepted'])} kept"
                     + (f", converged after {t['converged_after_s']} s" if t.get("converged_after_s") else ""))
        recent = t.get("history", [])[-EXPLAIN_TRIALS:]
        if recent:
            lines.append("  last trials: " + "; ".join(
                f"{h['at_s']} s {h['stage']} {h['change']} {'kept' if h['kept'] else 'undone'}"
                + (f" ({h['gain']}x)" if h["gain"] is not None else "") for h in recent))
    lines.append(f"output: {plan['throughput_per_s']:.0f} {plan.get('output_unit', 'elements')}/s; next() waited "
                 f"{plan['consumer_wait_share']:.0%} of the time")
    return "\n".join(lines)


def _figure(key: str, value: Any) -> str:
    """One of a stage's figures as text (a share, ``*_efficiency``, as a percentage)."""
    if key.endswith("efficiency") and isinstance(value, float):
        return f"{key.replace('_', ' ')} {value:.1%}"
    return f"{key.replace('_', ' ')} {value}"


class Plan(dict):
    """``Iterator.explain()``'s result: a dict (``tree``, ``bottleneck``, ``memory``, ``cpu``, ``tuner``,
    ``throughput_per_s``, ``consumer_wait_share``) whose ``str()`` is the indented text; a caller may set
    ``output_unit`` (default ``"elements"``, e.g. ``"batches"``) to name what ``throughput_per_s`` counts."""

    def __str__(self) -> str:
        return render(self)
