"""StopRequest: SIGINT and SIGTERM become a stop request while training; the previous handlers come back."""

from __future__ import annotations

import os
import signal

import pytest

from headrace.train.interrupt import StopRequest


def test_sigterm_is_a_stop_request_and_the_previous_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # (ignored when pytest runs as a background job)
    try:
        seen: list[int] = []
        with StopRequest(on_request=seen.append) as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.requested and stop.signum == signal.SIGTERM and seen == [signal.SIGTERM]
            os.kill(os.getpid(), signal.SIGTERM)  # torchrun's agent forwards the one it got: ignored
            assert seen == [signal.SIGTERM]
            with pytest.raises(KeyboardInterrupt):  # a second Ctrl-C stops at once
                os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGINT, before[1])


def test_a_handler_set_by_someone_else_is_left_alone() -> None:
    mine = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: mine.append(signum))
    try:
        with StopRequest() as stop:
            os.kill(os.getpid(), signal.SIGTERM)
        assert mine == [signal.SIGTERM] and not stop.requested
    finally:
        signal.signal(signal.SIGTERM, before)
