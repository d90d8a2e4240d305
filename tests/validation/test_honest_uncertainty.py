"""Uncertainty shown as it is (issue 47, item 3): bands from the repeats' t interval clipped
to what a loss can take, no band and no "CI" for one run, bars with headroom, and `sim real`
printing the repeats' mean and spread as wall-clock seconds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from sim.commands.real import format_repeats
from sim.plots.loss import mean_band
from sim.validation.compare_plot import report_figure
from sim.validation.sim_vs_real import compare


def test_a_wide_band_of_few_repeats_stops_at_zero_loss() -> None:
    xs = np.array([0.0, 1.0, 2.0])
    curves = [(xs, np.array([0.9, 0.5, 0.1])), (xs, np.array([0.9, 0.3, 0.02])),
              (xs, np.array([0.9, 0.7, 0.6]))]
    grid, mean, low, high = mean_band(curves)
    assert np.all(low >= 0) and low[-1] == 0.0  # the t interval alone goes below 0 there
    assert np.all(high >= mean) and np.all(mean >= low)
    assert mean_band(curves[:1]) is None  # one run: no interval, no band


@pytest.fixture()
def sim_and_real(tmp_path: Path, write_tiny_run) -> tuple[Path, Path]:
    """A simulated run, and the same files posing as one real repeat (clock: wall)."""
    sim, real = tmp_path / "sim", tmp_path / "real"
    write_tiny_run(sim, **{"run.iterations": 20, "run.eval_every": 5})
    shutil.copytree(sim, real / "r0")
    summary = json.loads((real / "r0" / "summary.json").read_text())
    posed = {**summary, "clock": "wall", "kind": "real"}
    (real / "r0" / "summary.json").write_text(json.dumps(posed))
    return sim, real


def test_one_real_run_gets_no_interval_and_bars_keep_headroom(sim_and_real) -> None:
    fig = report_figure(compare(*sim_and_real))
    loss, iteration, staleness, breakdown = fig.axes[:4]
    labels = [t.get_text() for t in iteration.get_xticklabels()]
    assert labels == ["sim", "real (one run)"] and not any("CI" in x for x in labels)
    assert not loss.collections  # no band drawn
    for ax in (iteration, staleness, breakdown):
        top = max(p.get_y() + p.get_height() for p in ax.patches)
        assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 1.09 * top


def test_sim_real_prints_the_repeats_mean_and_spread_as_wall_clock() -> None:
    runs = [{"sim_time_s": t, "iterations": 10, "wall_s": 2 * t} for t in (1.0, 2.0, 3.0)]
    text = format_repeats(runs)
    assert text.splitlines()[0] == "  wall-clock seconds, mean of 3 repeats (min .. max):"
    line = next(x for x in text.splitlines() if x.split()[0] == "run_time_s")
    assert line.split()[1] == "2" and "(1 .. 3)" in line
    assert "sim_time_s" not in text
    assert "one run" in format_repeats(runs[:1]) and ".." not in format_repeats(runs[:1])
