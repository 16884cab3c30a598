"""Ctrl-C or SIGTERM during ``fit``: finish the optimizer step in progress, write a checkpoint, then stop.

While the training loop runs, :class:`StopRequest` handles SIGINT (Ctrl-C) and SIGTERM (how Kubernetes,
Slurm and torchrun's elastic agent stop or preempt a job) in the main thread of every rank: the first
signal only asks the loop to stop (it checks after every step and between epochs, and all ranks stop at
the same step); the loop then writes a checkpoint of exactly that point (when there is a
``checkpoint_dir``), says where, and raises :class:`TrainingInterrupted`, a ``KeyboardInterrupt`` whose
``signum`` says which signal it was. A second Ctrl-C raises ``KeyboardInterrupt`` at once; a second
SIGTERM is ignored (the checkpoint is being written): a worker under torchrun often gets two, the one
sent to the job's processes and the one the elastic agent forwards. The previous handlers are back when
the loop ends. Outside the loop, and for a signal that is ignored or handled by
someone else when the loop starts, nothing changes. ``headrace train`` then exits with status
128 + the signal's number (130 after SIGINT, 143 after SIGTERM), as shells report a process killed by it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

_DEFAULTS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
"""The signals :class:`StopRequest` handles, each with the handler it must find to take over."""


def signal_name(signum: int) -> str:
    """``"Ctrl-C"`` for SIGINT, else the signal's name (``"SIGTERM"``)."""
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by Ctrl-C or SIGTERM (``signum``) after ``step`` optimizer steps; ``checkpoint`` is
    the checkpoint written at that step (``None`` without a ``checkpoint_dir``). ``fit(..., resume=True)``
    continues from it."""

    def __init__(self, step: int, checkpoint: str | None, signum: int = signal.SIGINT) -> None:
        where = f"checkpoint {checkpoint}" if checkpoint else "no checkpoint_dir, nothing saved"
        super().__init__(f"training interrupted ({signal_name(signum)}) after step {step} ({where})")
        self.step = step
        self.checkpoint = checkpoint
        self.signum = signum


class StopRequest:
    """A context manager that turns the first SIGINT or SIGTERM into ``requested = True`` (``signum`` set to
    the signal's number; ``on_request(signum)`` called); a second SIGINT raises ``KeyboardInterrupt``, a second
    SIGTERM is ignored."""

    def __init__(self, on_request: Callable[[int], None] | None = None) -> None:
        self.requested = False
        self.signum: int | None = None
        self.on_request = on_request
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            return
        self.requested = True
        self.signum = signum
        if self.on_request is not None:
            self.on_request(signum)

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for signum, default in _DEFAULTS.items():
                if signal.getsignal(signum) is default:
                    self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()


__all__ = ["StopRequest", "TrainingInterrupted", "signal_name"]
