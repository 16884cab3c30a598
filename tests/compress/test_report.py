"""The compression report: Wilson intervals, the ISA of the int8 kernels, the speed-up baseline (the fastest
fp32 row, whichever runtime), the printed table's CPU line, and a plot whose texts do not overlap."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from headrace.compress.report import add_ratios, int8_isa, plot, print_table, speedup_baseline, wilson_interval


def test_wilson_interval_matches_the_formula_and_its_edges() -> None:
    # 240 of 300: p = 0.8, z = 1.96; by hand: centre 0.80640 / 1.01281 = 0.79621, half-width 0.04514
    low, high = wilson_interval(240, 300)
    assert low == pytest.approx(0.7511, abs=2e-4) and high == pytest.approx(0.8413, abs=2e-4)
    z = 1.959964
    p, n = 0.8, 300
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    assert (low + high) / 2 == pytest.approx(centre, rel=1e-9)
    assert wilson_interval(0, 10)[0] == pytest.approx(0.0, abs=1e-12)
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0)
    assert 0 < wilson_interval(10, 10)[0] < 1  # never the degenerate [1, 1] of the normal approximation
    for bad in ((1, 0), (-1, 5), (6, 5)):
        with pytest.raises(ValueError, match="n >= 1"):
            wilson_interval(*bad)


@pytest.mark.parametrize(("flags", "isa"), [
    (["avx2", "avx512f", "avx512bw", "avx512_vnni", "amx_tile", "amx_int8"], "AMX"),
    (["avx2", "avx512f", "avx512bw", "avx512_vnni"], "AVX-512 VNNI"),
    (["avx2", "avx_vnni"], "AVX-VNNI"),
    (["avx2", "avx512f", "avx512bw"], "AVX-512"),
    (["sse4_2", "avx", "avx2", "fma"], "AVX2"),
    (["asimd"], "NEON"),
    ([], "SSE"),
])
def test_int8_isa_follows_the_cpu_flags(flags: list[str], isa: str) -> None:
    assert int8_isa(flags) == isa


def _row(name: str, precision: str, ms32: float, size: int, accuracy: float = 0.8) -> dict:
    return {"name": name, "precision": precision, "latency_ms_batch32": ms32, "latency_ms_batch1": ms32 / 20,
            "size_bytes": size, "accuracy": accuracy, "parameters": 1_000_000, "macs": 300_000_000,
            "accuracy_ci95": list(wilson_interval(round(accuracy * 300), 300))}


@pytest.mark.parametrize("torch_ms", [60.0, 20.0])
def test_speedups_are_against_the_fastest_fp32_row(torch_ms: float) -> None:
    rows = [_row("fp32-torch", "fp32", torch_ms, 11_000_000), _row("fp32-onnxruntime", "fp32", 30.0, 11_200_000),
            _row("int8", "int8", 10.0, 2_900_000, 0.79), _row("pruned", "fp32", 15.0, 5_500_000, 0.78)]
    base = speedup_baseline(rows)
    want = "fp32-torch" if torch_ms < 30 else "fp32-onnxruntime"
    assert base is not None and base["name"] == want  # the int8 row (fastest of all) is never the baseline
    assert add_ratios(rows) == want
    base_ms, base_size = min(torch_ms, 30.0), (11_000_000 if torch_ms < 30 else 11_200_000)
    int8 = rows[2]
    assert int8["speedup_batch32"] == round(base_ms / 10.0, 3)
    assert int8["size_ratio"] == round(base_size / 2_900_000, 3)
    assert int8["accuracy_delta_points"] == pytest.approx(-1.0)
    assert speedup_baseline([_row("int8", "int8", 1.0, 1)]) is None


def test_the_table_names_the_cpu_isa_and_baseline() -> None:
    rows = [_row("fp32-torch", "fp32", 60.0, 11_000_000), _row("int8", "int8", 10.0, 2_900_000)]
    add_ratios(rows)
    lines: list[str] = []
    report = {"machine": {"cpu": "Some CPU", "int8_isa": "AVX2"}, "threads": 2, "speedup_baseline": "fp32-torch",
              "eval_examples": 300}
    print_table(rows, report, lines.append)
    assert "Some CPU" in lines[0] and "int8 kernels: AVX2" in lines[0] and "fp32-torch" in lines[0]
    assert "Wilson" in lines[0] and lines[1].split()[0] == "variant"
    assert "80.0% (75.1-84.1)" in lines[2] and lines[3].rstrip().endswith("6.00x")


def _overlaps(boxes: list[tuple[str, object]]) -> list[tuple[str, str]]:
    found = []
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1:]:
            if ba.overlaps(bb):  # type: ignore[attr-defined]
                found.append((a, b))
    return found


def test_plot_texts_do_not_overlap_even_when_points_coincide(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every text of the figure (titles, axis labels, tick labels, legend entries) has its own room, with six
    variants of which two sit at the same point (int8 and pruned-int8 once had labels on top of each other)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [_row("fp32-torch", "fp32", 61.0, 11_000_000, 0.84),
            _row("fp32-onnxruntime", "fp32", 30.0, 11_200_000, 0.84),
            _row("int8", "int8", 12.9, 2_900_000, 0.83), _row("pruned", "fp32", 13.0, 2_900_000, 0.83),
            _row("pruned-int8", "int8", 6.0, 1_500_000, 0.82), _row("distilled", "fp32", 5.0, 1_500_000, 0.82)]
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot(tmp_path / "report.png", rows, 2, title="Some CPU, int8 kernels AVX-512 VNNI; 300 eval examples")
    assert (tmp_path / "report.png").read_bytes()[:4] == b"\x89PNG"
    fig = figures[0]
    renderer = fig.canvas.get_renderer()
    fig.canvas.draw()
    hidden = set()  # tick labels outside the view limits exist but are not drawn
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            hidden |= {id(tick.label1) for tick in axis.get_major_ticks() if not low <= tick.get_loc() <= high}
    texts = [t for t in fig.findobj(matplotlib.text.Text)
             if t.get_visible() and t.get_text().strip() and id(t) not in hidden]
    names = [t.get_text() for t in texts]
    for name in ("fp32-torch", "int8", "pruned-int8", "distilled", "accuracy vs size"):
        assert name in names
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    assert _overlaps(boxes) == []
    width, height = fig.get_size_inches() * fig.dpi
    for name, box in boxes:  # inside the figure
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= width + 0.5 and box.y1 <= height + 0.5, name
    assert math.isfinite(width)
    plt.close(fig)
