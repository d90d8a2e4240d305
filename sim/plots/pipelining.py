"""Pipelining figures from a sweep's results.csv.

- speedup over ``none`` against the compute/communication ratio M / C, a line per mode
  (colour) and fabric (dashes), with the ideal (C + M) / max(C, M) drawn for reference;
- iteration time against bucket size: tiny buckets pay the per-message alpha for every
  bucket, huge ones lose the overlap.

Seeds of one configuration are averaged (error bars: 95% confidence interval).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from sim.errors import UserError
from sim.plots.legends import SEED, fmt
from sim.plots.style import figure, log_ticks, save, time_unit, wrap
from sim.plots.sweeplines import SweepLine, error_bars, line_styles, sweep_lines
from sim.results import RESULTS, Sweep

MODE, BUCKET = "strategy.pipelining", "strategy.bucket_bytes"
LINE_KEYS = ("strategy.pipelining", "strategy.priority", "cluster.fabric", "strategy.kind")


def sweeps_key(sweep: Sweep, key: str) -> bool:
    return key in sweep.swept and len({fmt(r.get(key)) for r in sweep.rows}) > 1


def _draw(ax: Any, lines: list[SweepLine], factor: float = 1.0, log_y: bool = False) -> None:
    """Each line's means (times ``factor``) with 95% error bars over seeds."""
    for line, style in zip(lines, line_styles(lines), strict=True):
        mean = line.mean * factor
        ax.errorbar(line.xs, mean, yerr=error_bars(mean, line.half * factor, log_y),
                    marker="o", markersize=4, capsize=2.5, label=wrap(line.label), **style)


def pipelining_figure(sweep_dir: Path | str) -> Figure:
    """Speedup over no pipelining vs M / C for each mode (a point per configuration, seeds
    averaged), and the ideal curve. Raises UserError when no run reports them."""
    sweep = Sweep(Path(sweep_dir))
    keys = [k for k in LINE_KEYS if k in sweep.swept]
    lines = sweep_lines(sweep.rows, keys, "pipelining_ratio", "speedup_vs_none")
    if not lines:
        raise UserError(f"{sweep.path / RESULTS}: no run reports pipelining_ratio and "
                        "speedup_vs_none (bsp or bsp-ps runs do)")
    ratios = np.concatenate([line.xs for line in lines])
    with figure(7.8, 4.2 + 0.35 * (len(lines) // 3 + 1) * (len(lines) > 4)) as fig:
        ax = fig.subplots()
        _draw(ax, lines)
        r = np.geomspace(ratios.min() / 1.5, ratios.max() * 1.5, 200)
        ax.plot(r, (1 + r) / np.maximum(1, r), color="0.35", linestyle=(0, (4, 3)),
                linewidth=1.0, label="ideal (C + M) / max(C, M)")
        ax.axhline(1.0, color="0.6", linewidth=0.8)
        ax.set_xscale("log")
        log_ticks(ax.xaxis)
        ax.set_xlabel("communication / compute, M / C (each mode's own messages)")
        ax.set_ylabel("speedup over no pipelining (×)")
        if len(lines) > 4:
            fig.legend(loc="outside lower center", ncols=3, fontsize=8)
        else:
            ax.legend(loc="best", fontsize=8)
        fig.suptitle("Does overlapping communication with backprop pay off?",
                     fontweight="bold")
    return fig


def plot_pipelining(sweep_dir: Path | str, out_dir: Path,
                    stem: str = "pipelining") -> list[Path]:
    """``pipelining``: see :func:`pipelining_figure`."""
    return save(pipelining_figure(sweep_dir), out_dir, stem)


def buckets_figure(sweep_dir: Path | str) -> Figure:
    """Iteration time vs bucket size on log-log axes, a line per fabric (or other swept
    key), seeds averaged. Raises UserError when the bucket size is not swept or no run
    reports iter_s."""
    sweep = Sweep(Path(sweep_dir))
    if not sweeps_key(sweep, BUCKET):
        raise UserError(f"{sweep.path / RESULTS}: {BUCKET} is not swept over several values")
    keys = [k for k in sweep.swept if k not in (BUCKET, SEED)]
    lines = sweep_lines(sweep.rows, keys, BUCKET, "iter_s")
    if not lines:
        raise UserError(f"{sweep.path / RESULTS}: no run reports iter_s")
    factor, unit = time_unit(max(float(line.mean.max()) for line in lines))
    with figure(7.8, 4.2) as fig:
        ax = fig.subplots()
        _draw(ax, lines, factor, log_y=True)
        ax.set_xscale("log")
        ax.set_yscale("log")
        log_ticks(ax.yaxis)
        ax.xaxis.set_major_formatter(EngFormatter(unit="B", sep=" "))
        ax.set_xlabel("bucket size")
        ax.set_ylabel(f"iteration time ({unit})")
        ax.legend(loc="best", fontsize=8)
        fig.suptitle("Bucket size: per-message latency vs lost overlap", fontweight="bold")
    return fig


def plot_buckets(sweep_dir: Path | str, out_dir: Path, stem: str = "buckets") -> list[Path]:
    """``buckets``: see :func:`buckets_figure`."""
    return save(buckets_figure(sweep_dir), out_dir, stem)
