"""What a training run shows and records: a progress display, messages, and ``metrics.jsonl``.

On a terminal (stderr), two lines redrawn after every optimizer step::

    epoch 1/3 step 120/234 ━━━━━━━━━━━━━━━━━━━━  51% 0:02:10 eta 0:02:05
    loss 2.3122 | 45.1 samples/s | data wait 3% | RSS base + 332.1 MiB of 384.0 MiB

(the second line wraps rather than being cut on a narrow terminal). Without a terminal, plain lines on
stdout instead: every message, and every ``plain_every`` steps (and the first) a line with the same
figures, ``headrace.fit: step 120/234 (51%), epoch 1/3, loss 2.3122, ..., eta 0:02:05``. The total is
known when ``fit`` knows the steps per epoch (``steps``, the dataset's cardinality, ``dataset_size``, or
after the first epoch); until then it shows ``?`` and no ETA. Epochs are numbered from 1, as in
``metrics.jsonl``. Only rank 0 shows anything.

``metrics.jsonl`` gets one JSON object per line: ``{"event": "step", ...}`` every ``log_every`` steps,
``{"event": "epoch", ...}`` after each epoch, ``{"event": "end", ...}`` last. Only rank 0 writes.
"""

from __future__ import annotations

import json
import os
import sys
import time
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


def _clock(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _rich_display(console: Any) -> Any:
    """A rich ``Progress`` drawing the bar line and, under it, the figures line (``.figures``)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class _TwoLines(Progress):
        figures = ""

        def get_renderables(self) -> Any:
            yield self.make_tasks_table(self.tasks)
            if self.figures:
                yield Text(self.figures)

    return _TwoLines(TextColumn("{task.fields[epoch]}"), TextColumn("step"), MofNCompleteColumn(),
                     BarColumn(bar_width=20), TaskProgressColumn(), TimeElapsedColumn(), TextColumn("eta"),
                     TimeRemainingColumn(), console=console, transient=False)


class Progress:
    """The progress display of a run (module docstring): rich on stderr when ``enabled``, else plain lines
    on stdout; nothing at all when ``quiet`` (ranks other than 0). ``console``: a rich ``Console`` to draw
    on instead of stderr's."""

    def __init__(self, enabled: bool, total_steps: int | None, budget_bytes: int | None,
                 base_rss_bytes: int, quiet: bool = False, *, epochs: int | None = None,
                 plain_every: int = 10, console: Any = None) -> None:
        self.enabled = enabled and not quiet
        self.quiet = quiet
        self.budget_bytes = budget_bytes
        self.base_rss_bytes = base_rss_bytes
        self.total_steps = total_steps
        self.epochs = epochs
        self.plain_every = max(1, plain_every)
        self._start: tuple[float, int] | None = None  # (time, step) of the first update: the ETA's origin
        self._bar: Any = None
        self._task: Any = None
        if not self.enabled:
            return
        from rich.console import Console

        self._bar = _rich_display(console if console is not None else Console(file=sys.stderr))
        self._bar.start()
        self._task = self._bar.add_task("", total=total_steps, epoch=self._epoch_text(1))

    def _epoch_text(self, epoch: int) -> str:
        return f"epoch {epoch}/{self.epochs}" if self.epochs else f"epoch {epoch}"

    def set_total(self, total_steps: int | None) -> None:
        """The number of steps of the whole run, once known."""
        self.total_steps = total_steps
        if self._bar is not None:
            self._bar.update(self._task, total=total_steps)

    def rss_text(self, rss: int) -> str:
        if self.budget_bytes is None:
            return f"RSS {format_bytes(rss)}"
        used = rss - self.base_rss_bytes
        return f"RSS base + {format_bytes(used)} of {format_bytes(self.budget_bytes)}"

    def figures(self, loss: float, samples_per_s: float, data_wait: float, rss: int) -> str:
        return (f"loss {loss:.4f} | {samples_per_s:,.1f} samples/s | data wait {100 * data_wait:.0f}% | "
                f"{self.rss_text(rss)}")

    def eta_s(self, step: int) -> float | None:
        """Seconds left at the pace of the steps since the first update; None when it cannot tell."""
        if self._start is None or self.total_steps is None or step <= self._start[1]:
            return None
        t0, s0 = self._start
        return (time.perf_counter() - t0) / (step - s0) * max(0, self.total_steps - step)

    def update(self, step: int, loss: float, samples_per_s: float, data_wait: float, rss: int,
               epoch: int | None = None) -> None:
        """After optimizer step ``step`` (of epoch ``epoch``, counted from 1)."""
        first = self._start is None
        if self._start is None:
            self._start = (time.perf_counter(), step)
        text = self.figures(loss, samples_per_s, data_wait, rss)
        if self._bar is not None:
            self._bar.figures = text
            fields = {"epoch": self._epoch_text(epoch)} if epoch is not None else {}
            self._bar.update(self._task, completed=step, **fields)
        elif not self.quiet and (first or step % self.plain_every == 0 or step == self.total_steps):
            total = self.total_steps
            where = f"step {step}/{total} ({100 * step / total:.0f}%)" if total else f"step {step}"
            if epoch is not None:
                where += ", " + self._epoch_text(epoch)
            eta = self.eta_s(step)
            tail = f", eta {_clock(eta)}" if eta is not None else ""
            print(f"headrace.fit: {where}, {text.replace(' | ', ', ')}{tail}", flush=True)

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
