"""Throughput and speedup against the number of workers, from a sweep's results.csv.

One line per combination of the other swept keys (typically one per fabric). Several seeds
of a point give its mean and a 95% confidence interval (error bars). Both panels are
log-log, so linear scaling is a straight line of slope 1 (the ideal drawn on the speedup
panel). Speedup is relative to the smallest worker count of the same line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, FixedLocator, NullLocator

from sim.errors import UserError
from sim.plots.legends import SEED
from sim.plots.style import figure, line_style, log_ticks, save, wrap
from sim.plots.sweeplines import error_bars, sweep_lines
from sim.results import RESULTS, Sweep

WORKERS = "cluster.workers"
THROUGHPUT = "samples_per_s"


def sweeps_workers(sweep: Sweep) -> bool:
    return WORKERS in sweep.swept and len({r.get(WORKERS) for r in sweep.rows}) > 1


def scaling_figure(sweep_dir: Path | str) -> Figure:
    """Throughput (samples/s) and speedup vs workers on log-log axes, a line per fabric (or
    other key), with 95% intervals over seeds. Raises UserError for a sweep that does not
    vary cluster.workers or has no finite throughput."""
    sweep = Sweep(Path(sweep_dir))
    results = sweep.path / RESULTS
    if not sweeps_workers(sweep):
        raise UserError(f"{results}: {WORKERS} is not swept over several values; "
                        "the scaling plot needs it")
    keys = [k for k in sweep.swept if k not in (WORKERS, SEED)]
    lines = sweep_lines(sweep.rows, keys, WORKERS, THROUGHPUT)
    if not lines:
        raise UserError(f"{results}: no run with a finite {THROUGHPUT}")
    seeds = max(int(n) for line in lines for n in line.runs)
    all_workers = sorted({int(w) for line in lines for w in line.xs})
    with figure(9.0, 3.9) as fig:
        ax_tp, ax_sp = fig.subplots(1, 2)
        for g, line in enumerate(lines):
            speedup = line.mean / line.mean[0]
            style = dict(line_style(g), marker="o", markersize=4, capsize=2.5)
            ax_tp.errorbar(line.xs, line.mean, yerr=error_bars(line.mean, line.half, True),
                           label=wrap(line.label), **style)
            ax_sp.errorbar(line.xs, speedup, yerr=error_bars(speedup, line.half / line.mean[0],
                                                             True), **style)
        bases = {line.xs[0] for line in lines}
        if len(bases) == 1:
            ideal = np.array(all_workers, dtype=float)
            ax_sp.plot(ideal, ideal / ideal[0], color="0.45", linestyle=(0, (4, 3)),
                       linewidth=1.0, label="ideal (linear in workers)")
        for ax in (ax_tp, ax_sp):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_locator(FixedLocator(all_workers))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_formatter(EngFormatter(places=0, sep=""))
            ax.set_xlabel("workers")
        log_ticks(ax_sp.yaxis)
        log_ticks(ax_tp.yaxis, EngFormatter(sep=" "))
        ax_tp.set_ylabel("throughput (samples/s)")
        ax_tp.set_title("Throughput")
        base_text = "fewest workers" if len(bases) > 1 else \
            f"{all_workers[0]} worker{'s' if all_workers[0] > 1 else ''}"
        ax_sp.set_ylabel(f"speedup over {base_text} (×)")
        ax_sp.set_title("Speedup (throughput ratio)")
        handles, labels = ax_tp.get_legend_handles_labels()
        extra = ax_sp.get_legend_handles_labels()
        # below the panels: beside them its top ran into a long title (issue 33, part 7)
        fig.legend(handles + extra[0], labels + extra[1], loc="outside lower center",
                   ncols=min(3, len(labels) + len(extra[1])))
        spread = any(np.nanmax(line.half, initial=0.0) > 0 for line in lines)
        # seeds that give the same throughput (a timing that draws nothing) draw no bars
        note = ("one run per point" if seeds == 1 else f"mean of {seeds} seeds, bars: 95% CI"
                if spread else f"{seeds} seeds alike: no spread to draw")
        fig.suptitle(f"Scaling with workers ({note}, log-log)", fontweight="bold")
    return fig


def plot_scaling(sweep_dir: Path | str, out_dir: Path, stem: str = "scaling") -> list[Path]:
    """``scaling``: see :func:`scaling_figure`."""
    return save(scaling_figure(sweep_dir), out_dir, stem)
