"""Readable figures (issue 33, part 7): no series hidden under an identical one, legends
that list only what occurs, and titles, legends and axes that never overlap."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim import plots
from sim.plots import style as st
from sim.plots.loss import Line, coinciding, eval_curve
from sim.results import Run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, write_tiny_run) -> dict[str, Path]:
    """bsp and bsp-ps (their losses against updates are the same points), asp."""
    base = tmp_path_factory.mktemp("readable")
    out = {}
    for kind in ("bsp", "bsp-ps", "asp"):
        out[kind] = base / kind
        write_tiny_run(out[kind], **{"strategy.kind": kind})
    return out


def legend_texts(fig) -> list[str]:
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    return [t.get_text() for legend in legends for t in legend.get_texts()]


def test_identical_series_are_drawn_distinguishably_and_said_to_coincide(
        runs: dict[str, Path]) -> None:
    bsp, ps = (eval_curve(Run(runs[k]), "updates") for k in ("bsp", "bsp-ps"))
    assert np.array_equal(bsp[0], ps[0]) and np.allclose(bsp[1], ps[1])  # the premise
    fig = plots.loss_figure([runs["bsp"], runs["bsp-ps"], runs["asp"]], "updates")
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()
             if line.get_xdata().size}
    a, b = lines["BSP"], lines["BSP (PS)"]
    assert a.get_marker() != b.get_marker() or a.get_linestyle() != b.get_linestyle()
    assert a.get_linestyle() != b.get_linestyle()  # the top one lets the other show through
    assert a.get_markevery() != b.get_markevery()  # markers at different points
    assert "BSP and BSP (PS) coincide" in " ".join(legend_texts(fig)).replace("\n", " ")
    assert lines["ASP"].get_marker() == "o"  # a line of its own keeps its look


def test_a_line_cut_short_on_its_twin_is_hidden_too() -> None:
    xs = np.arange(0.0, 60.0, 10.0)
    ys = 1.0 / (1.0 + xs)
    twin = Line("BSP (PS)", {"linestyle": "-"}, xs, ys)
    short = Line("BSP", {"linestyle": "-"}, np.append(xs[:3], 25.0),
                 np.append(ys[:3], np.interp(25.0, xs, ys)))
    other = Line("ASP", {"linestyle": "-"}, xs, ys + 0.2)
    assert coinciding([short, twin, other]) == [[0, 1]]


def test_breakdown_legend_lists_only_activities_that_occur(runs: dict[str, Path]) -> None:
    paths = list(runs.values())
    fig = plots.breakdown_figure(paths)
    occurring = {st.KIND_NAMES[kind] for kind in st.KIND_COLOURS
                 if any(Run(p).summary.get(f"{kind}_s", 0) > 0 for p in paths)}
    assert "compute" in occurring and "restart" not in occurring  # no faults in these runs
    names = legend_texts(fig)
    assert set(names) - {"simulated time"} == occurring
    assert len(names) == len(occurring) + 1
