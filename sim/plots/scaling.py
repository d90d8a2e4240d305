"""Throughput and speedup against the number of workers, from a sweep's results.csv.

One line per combination of the other swept keys (typically one per fabric). Several seeds
of a point are averaged (error bars span their min to max). Speedup is relative to the
smallest worker count of the same line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.ticker import EngFormatter, FixedLocator, NullLocator

from sim.errors import UserError
from sim.plots.labels import SEED, fmt
from sim.plots.style import figure, line_style, save, wrap
from sim.results import RESULTS, Sweep

WORKERS = "cluster.workers"
THROUGHPUT = "samples_per_s"


def sweeps_workers(sweep: Sweep) -> bool:
    return WORKERS in sweep.swept and len({r.get(WORKERS) for r in sweep.rows}) > 1


def scaling_lines(rows: list[dict[str, Any]], keys: list[str]
                  ) -> dict[str, dict[int, list[float]]]:
    """Line label -> workers -> the throughputs of its runs (one per seed)."""
    varying = [k for k in keys if len({fmt(r.get(k)) for r in rows}) > 1]
    lines: dict[str, dict[int, list[float]]] = {}
    for row in rows:
        value, workers = row.get(THROUGHPUT), row.get(WORKERS)
        if not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not isinstance(workers, int):
            continue
        label = ", ".join(f"{k}={fmt(row.get(k))}" for k in varying) or \
            fmt(row.get("fabric", "all runs"))
        lines.setdefault(label, {}).setdefault(workers, []).append(float(value))
    return {label: dict(sorted(points.items())) for label, points in lines.items()}


def line_stats(points: dict[int, list[float]]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Workers, mean throughput, its (below, above) spread to min / max, and the speedup
    over the smallest worker count, for one line's points (workers -> throughputs)."""
    workers = np.array(sorted(points))
    runs = [points[w] for w in workers]
    mean = np.array([np.mean(v) for v in runs])
    spread = np.array([[m - min(v), max(v) - m] for m, v in zip(mean, runs, strict=True)]).T
    return workers, mean, spread, mean / mean[0]


def plot_scaling(sweep_dir: Path | str, out_dir: Path, stem: str = "scaling") -> list[Path]:
    """Throughput (samples/s) and speedup vs workers, a line per fabric (or other key)."""
    sweep = Sweep(Path(sweep_dir))
    results = sweep.path / RESULTS
    if not sweeps_workers(sweep):
        raise UserError(f"{results}: {WORKERS} is not swept over several values; "
                        "the scaling plot needs it")
    keys = [k for k in sweep.swept if k not in (WORKERS, SEED)]
    lines = scaling_lines(sweep.rows, keys)
    if not lines:
        raise UserError(f"{results}: no run with a finite {THROUGHPUT}")
    seeds = max(len(v) for points in lines.values() for v in points.values())
    all_workers = sorted({w for points in lines.values() for w in points})
    with figure(9.0, 3.9) as fig:
        ax_tp, ax_sp = fig.subplots(1, 2)
        for g, (label, points) in enumerate(lines.items()):
            workers, mean, spread, speedup = line_stats(points)
            style = dict(line_style(g), marker="o", markersize=4, capsize=2.5)
            ax_tp.errorbar(workers, mean, yerr=spread if seeds > 1 else None,
                           label=wrap(label), **style)
            ax_sp.errorbar(workers, speedup, yerr=spread / mean[0] if seeds > 1 else None,
                           **style)
        bases = {min(points) for points in lines.values()}
        ideal = np.array(all_workers, dtype=float)
        if len(bases) == 1:
            ax_sp.plot(ideal, ideal / ideal[0], color="0.45", linestyle=(0, (4, 3)),
                       linewidth=1.0, label="ideal (linear in workers)")
        for ax in (ax_tp, ax_sp):
            if all_workers[-1] / all_workers[0] >= 8:
                ax.set_xscale("log", base=2)
            ax.xaxis.set_major_locator(FixedLocator(all_workers))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_formatter(EngFormatter(places=0, sep=""))
            ax.set_xlabel("workers")
            ax.set_ylim(bottom=0)
        ax_tp.yaxis.set_major_formatter(EngFormatter(sep=" "))
        ax_tp.set_ylabel("throughput (samples/s)")
        ax_tp.set_title("Throughput")
        base_text = "fewest workers" if len(bases) > 1 else \
            f"{all_workers[0]} worker{'s' if all_workers[0] > 1 else ''}"
        ax_sp.set_ylabel(f"speedup over {base_text} (×)")
        ax_sp.set_title("Speedup (throughput ratio)")
        handles, labels = ax_tp.get_legend_handles_labels()
        extra = ax_sp.get_legend_handles_labels()
        fig.legend(handles + extra[0], labels + extra[1], loc="outside right upper")
        note = f"mean of {seeds} seeds, bars: min to max" if seeds > 1 else "one run per point"
        fig.suptitle(f"Scaling with workers ({note})", fontweight="bold")
        return save(fig, out_dir, stem)
