"""What a training run shows and records: a rich progress line, messages, and ``metrics.jsonl``.

The progress line shows the step, the loss, samples/s, the share of time spent waiting for data, and the
process RSS against the budget. ``metrics.jsonl`` gets one JSON object per line: ``{"event": "step", ...}``
every ``log_every`` steps, ``{"event": "epoch", ...}`` after each epoch, ``{"event": "end", ...}`` last.
Only rank 0 shows or writes anything.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from .._memory import format_bytes


class MetricsLog:
    """Appends JSON lines to ``path`` (created with its directory); a no-op when ``path`` is None."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = os.fspath(path) if path is not None else None
        if self.path is not None:
            parent = os.path.dirname(self.path)
            if parent:
                os.makedirs(parent, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, separators=(",", ":")) + "\n")


class Progress:
    """A rich progress bar on stderr when ``enabled``; otherwise messages are plain lines on stdout
    (``headrace.fit: ...``), and nothing at all when ``quiet`` (ranks other than 0)."""

    def __init__(self, enabled: bool, total_steps: int | None, budget_bytes: int | None,
                 base_rss_bytes: int, quiet: bool = False) -> None:
        self.enabled = enabled and not quiet
        self.quiet = quiet
        self.budget_bytes = budget_bytes
        self.base_rss_bytes = base_rss_bytes
        self._bar: Any = None
        self._task: Any = None
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(file=sys.stderr)
        self._bar = Progress(TextColumn("step"), MofNCompleteColumn(), BarColumn(), TimeElapsedColumn(),
                             TextColumn("{task.description}"), console=self.console, transient=False)
        self._bar.start()
        self._task = self._bar.add_task("", total=total_steps)

    def rss_text(self, rss: int) -> str:
        if self.budget_bytes is None:
            return f"RSS {format_bytes(rss)}"
        used = rss - self.base_rss_bytes
        return f"RSS {format_bytes(rss)} (base + {format_bytes(used)} of {format_bytes(self.budget_bytes)})"

    def update(self, step: int, loss: float, samples_per_s: float, data_wait: float, rss: int) -> None:
        if self._bar is None:
            return
        text = (f"loss {loss:.4f} | {samples_per_s:,.0f} samples/s | data wait {100 * data_wait:.0f}% | "
                f"{self.rss_text(rss)}")
        self._bar.update(self._task, completed=step, description=text)

    def message(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(text, highlight=False, markup=False)
        elif not self.quiet:
            print(f"headrace.fit: {text}", flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


__all__ = ["MetricsLog", "Progress"]
