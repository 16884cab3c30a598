"""The training progress display: two lines within 80 columns on a terminal (nothing cut), plain lines
with the total and an ETA without one."""

from __future__ import annotations

import io
import re

import pytest

from headrace.train.progress import Progress

MIB = 1 << 20


def test_terminal_display_fits_80_columns_and_shows_every_figure() -> None:
    from rich.console import Console

    buf = io.StringIO()
    bar = Progress(True, 234, 384 * MIB, 265 * MIB, epochs=3,
                   console=Console(file=buf, width=80, force_terminal=True, color_system=None))
    for step in (1, 2, 3):
        bar.update(step, 2.3122, 45.1, 0.03, 265 * MIB + 332 * MIB, epoch=1)
    bar.close()
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue()).replace("\r", "\n").splitlines()
    assert screen and all(len(line) <= 80 for line in screen)
    last = [line for line in screen if line.strip()][-2:]
    assert re.match(r"epoch 1/3 step +3/234 .* 1% 0:00:0\d eta \d:\d\d:\d\d$", last[0]), last
    assert last[1] == "loss 2.3122 | 45.1 samples/s | data wait 3% | RSS base + 332.0 MiB of 384.0 MiB"
    assert "…" not in buf.getvalue()  # nothing cut


def test_plain_lines_have_the_total_and_an_eta(capsys: pytest.CaptureFixture[str]) -> None:
    bar = Progress(False, None, None, 0, epochs=2, plain_every=5)
    bar.update(1, 1.0, 10.0, 0.0, 100 * MIB, epoch=1)  # the first step is shown at once
    bar.set_total(10)
    for step in range(2, 11):
        bar.update(step, 1.0, 10.0, 0.0, 100 * MIB, epoch=1 + (step - 1) // 5)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(",")[0] for line in lines] == ["headrace.fit: step 1", "headrace.fit: step 5/10 (50%)",
                                                      "headrace.fit: step 10/10 (100%)"]
    assert "epoch 1/2" in lines[1] and "epoch 2/2" in lines[2] and lines[1].endswith(tuple("0123456789"))
    assert ", eta 0:00:0" in lines[1] and "eta" not in lines[0]  # no pace to tell from after one step
