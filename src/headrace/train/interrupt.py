"""Ctrl-C during ``fit``: finish the optimizer step in progress, write a checkpoint, then stop.

While the training loop runs, :class:`StopRequest` handles SIGINT in the main thread: the first Ctrl-C
only asks the loop to stop (it checks after every step and between epochs); the loop then writes a
checkpoint of exactly that point (when there is a ``checkpoint_dir``), says where, and raises
:class:`TrainingInterrupted`, a ``KeyboardInterrupt``. A second Ctrl-C raises ``KeyboardInterrupt`` at
once. Outside the loop (and where SIGINT is ignored or handled by someone else) nothing changes.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by Ctrl-C after ``step`` optimizer steps; ``checkpoint`` is the checkpoint written
    at that step (``None`` without a ``checkpoint_dir``). ``fit(..., resume=True)`` continues from it."""

    def __init__(self, step: int, checkpoint: str | None) -> None:
        where = f"checkpoint {checkpoint}" if checkpoint else "no checkpoint_dir, nothing saved"
        super().__init__(f"training interrupted after step {step} ({where})")
        self.step = step
        self.checkpoint = checkpoint


class StopRequest:
    """A context manager that turns the first SIGINT into ``requested = True`` (calling ``on_request``)."""

    def __init__(self, on_request: Callable[[], None] | None = None) -> None:
        self.requested = False
        self.on_request = on_request
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        if self.on_request is not None:
            self.on_request()

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False


__all__ = ["StopRequest", "TrainingInterrupted"]
