"""The checkpoint-interval figure from a sweep's results.csv
(:func:`sim.faults.interval_study.interval_study`).

Mean wall time over the seeds (95% error bars) against the work between checkpoints,
with Daly's (2006) expected wall time for the same M, delta and R, the simulated optimum
(the fitted parabola's vertex) and Daly's and Young's optima; and below it the share of
time lost to checkpoints and failures against Young's (1974) first-order estimate.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from sim.faults import theory
from sim.faults.interval_study import interval_study
from sim.plots.style import colour, figure, log_ticks, save, wrap
from sim.results import Sweep


def seconds(x: float) -> str:
    """Seconds as a paper writes them here: 1,000 s, 10.2 s."""
    return f"{x:,.0f} s" if x >= 100 else f"{x:.3g} s"


def interval_figure(sweep_dir: Path | str) -> Figure:
    """The study's two panels. Raises UserError when the sweep cannot be studied."""
    sweep = Sweep(Path(sweep_dir))
    study = interval_study(sweep.rows)
    tau = study.tau_s
    mean = np.array([w.mean for w in study.wall_s])
    half = np.nan_to_num(np.array([w.half_width for w in study.wall_s]))
    hours = 1 / 3600
    with figure(7.2, 6.2) as fig:
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
        top.errorbar(tau, mean * hours, yerr=half * hours, marker="o", markersize=4,
                     capsize=2.5, color=colour(0), label=f"simulated (mean of "
                     f"{study.wall_s[0].n} seeds)")
        fine = np.geomspace(tau.min(), tau.max(), 200)
        top.plot(fine, [theory.daly_wall_s(study.work_s, t, study.delta_s, study.restart_s,
                                           study.mtbf_s) * hours for t in fine],
                 color="0.35", linestyle=(0, (4, 3)), label="Daly (2006), expected")
        for x, name, style in ((study.optimum_s, "simulated optimum", "-"),
                               (study.daly_optimum_s, "Daly's optimum", "--"),
                               (study.young_optimum_s, "Young's optimum", ":")):
            for ax in (top, bottom):
                ax.axvline(x, color=colour(3), linestyle=style, linewidth=1.0,
                           label=f"{name}: {seconds(x)}" if ax is top else None)
        top.set_ylabel("wall time (h)")
        top.legend(loc="best")
        bottom.plot(tau, 100 * study.sim_overhead, marker="o", markersize=4, color=colour(0),
                    label="simulated")
        bottom.plot(tau, 100 * study.young_overhead, color="0.35", linestyle=":",
                    label="Young (1974), first order")
        bottom.set_xscale("log")
        log_ticks(bottom.xaxis)
        bottom.set_xlabel("work between checkpoints, tau (s)")
        bottom.set_ylabel("time lost (% of work)")
        bottom.legend(loc="best")
        fig.suptitle("Checkpoint interval under exponential failures", fontweight="bold")
        top.set_title(wrap(f"job MTBF M = {seconds(study.mtbf_s)}, checkpoint delta = "
                           f"{seconds(study.delta_s)}, restart and read R = "
                           f"{seconds(study.restart_s)}, {seconds(study.work_s)} of work, "
                           f"simulated optimum {100 * study.optimum_error:+.1f}% from "
                           f"Daly's", 90), color="0.3")
    return fig


def plot_checkpoint_interval(sweep_dir: Path | str, out_dir: Path,
                             stem: str = "checkpoint-interval") -> list[Path]:
    return save(interval_figure(sweep_dir), out_dir, stem)
