"""The checkpoint-interval study on rows whose wall times are Daly's expectation: the
fitted optimum is Daly's; bad sweeps are refused naming why."""

from __future__ import annotations

import numpy as np
import pytest

from sim.errors import UserError
from sim.faults import theory
from sim.faults.interval_study import fitted_optimum, interval_study

WORK, M, DELTA, DELAY, READ, STEP = 20_000.0, 1000.0, 10.0, 60.0, 10.0, 4.0


def rows(steps, seeds=(1, 2), noise=0.0, **changed):
    rng = np.random.default_rng(0)
    out = []
    for k in steps:
        for seed in seeds:
            wall = theory.daly_wall_s(WORK, k * STEP, DELTA, DELAY + READ, M)
            out.append({"checkpoint.every_steps": k, "run.seed": seed,
                        "sim_time_s": wall * (1 + noise * rng.standard_normal()),
                        "fault_free_s": WORK, "iterations": WORK / STEP, "job_mtbf_s": M,
                        "checkpoint_write_s": DELTA, "checkpoint_read_s": READ,
                        "restart_delay_s": DELAY, **changed})
    return out


GRID = [8, 12, 16, 20, 25, 30, 34, 40, 50, 60, 75, 100]


def test_the_fitted_optimum_of_dalys_curve_is_dalys_optimum():
    study = interval_study(rows(GRID))
    assert study.daly_optimum_s == pytest.approx(theory.daly_interval(DELTA, M))
    assert abs(study.optimum_error) < 0.02
    assert study.young_optimum_s == pytest.approx(np.sqrt(2 * DELTA * M))
    assert study.tau_s.tolist() == [k * STEP for k in GRID]
    # the overhead of Daly's curve is Young's to first order at tau << M
    assert study.sim_overhead[0] == pytest.approx(study.young_overhead[0], rel=0.1)


def test_noise_of_a_tenth_of_a_percent_keeps_the_optimum_within_ten_percent():
    study = interval_study(rows(GRID, seeds=range(24), noise=0.001))
    assert abs(study.optimum_error) < 0.10


def test_sweeps_that_cannot_be_studied_are_refused():
    with pytest.raises(UserError, match="no run swept checkpoint.every_steps"):
        interval_study([{"sim_time_s": 1.0}])
    with pytest.raises(UserError, match="job_mtbf_s"):
        interval_study(rows(GRID, job_mtbf_s=None))
    mixed = rows(GRID[:6]) + rows(GRID[6:], job_mtbf_s=2 * M)
    with pytest.raises(UserError, match="job_mtbf_s differs"):
        interval_study(mixed)
    with pytest.raises(UserError, match="edge"):
        fitted_optimum(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0]))


def test_the_interval_figure_shows_the_study(tmp_path):
    """A small sweep of the experiment: the figure's series are the study's numbers."""
    from pathlib import Path

    from sim.cli import main
    from sim.plots import interval_figure, plot_runs
    from sim.results import Sweep

    experiment = Path(__file__).resolve().parents[2] / "experiments" / "fault-tolerance.toml"
    out = tmp_path / "sweep"
    assert main(["sweep", str(experiment), "--out", str(out), "--jobs", "1", "--no-plots",
                 "--set", "run.iterations=500", "--set", "run.seeds=[1, 2, 3]",
                 "--set", "sweep.checkpoint.every_steps=[8, 16, 34, 60, 100]"]) == 0
    study = interval_study(Sweep(out).rows)
    fig = interval_figure(out)
    top, bottom = fig.axes
    lines = {line.get_label().split(":")[0]: line for line in top.lines}
    bars = top.containers[0]
    assert bars.get_label() == "simulated (mean of 3 seeds)"
    simulated = bars.lines[0]
    assert simulated.get_xdata().tolist() == study.tau_s.tolist()
    assert np.allclose(simulated.get_ydata(), [w.mean / 3600 for w in study.wall_s])
    assert lines["Daly (2006), expected"].get_linestyle() == "--"
    marks = [lines[name].get_xdata()[0] for name in
             ("simulated optimum", "Daly's optimum", "Young's optimum")]
    assert marks == pytest.approx([study.optimum_s, study.daly_optimum_s,
                                   study.young_optimum_s])
    assert bottom.get_xscale() == "log" and top.get_ylabel() == "wall time (h)"
    below = {line.get_label(): line for line in bottom.lines}
    assert np.allclose(below["simulated"].get_ydata(), 100 * study.sim_overhead)
    assert np.allclose(below["Young (1974), first order"].get_ydata(),
                       100 * study.young_overhead)
    written = plot_runs([out], tmp_path / "plots", "checkpoint-interval")
    assert {p.suffix for p in written} == {".png", ".svg", ".pdf"}
