"""Pipelining figures from a sweep's results.csv.

- speedup over ``none`` against the compute/communication ratio M / C, a line per mode
  (and fabric), with the ideal (C + M) / max(C, M) drawn for reference;
- iteration time against bucket size: tiny buckets pay the per-message alpha for every
  bucket, huge ones lose the overlap.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.ticker import EngFormatter, ScalarFormatter

from sim.errors import UserError
from sim.plots.labels import fmt
from sim.plots.style import figure, line_style, save, time_unit, wrap
from sim.results import RESULTS, Sweep

MODE, BUCKET = "strategy.pipelining", "strategy.bucket_bytes"
LINE_KEYS = ("strategy.pipelining", "strategy.priority", "cluster.fabric", "strategy.kind")


def sweeps_key(sweep: Sweep, key: str) -> bool:
    return key in sweep.swept and len({fmt(r.get(key)) for r in sweep.rows}) > 1


def _finite(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def _lines(rows: list[dict[str, Any]], keys: list[str], x: str,
           y: str) -> dict[str, list[tuple[float, float]]]:
    """Line label (the ``keys`` that vary) -> sorted (x, y) points of its runs."""
    varying = [k for k in keys if len({fmt(r.get(k)) for r in rows}) > 1]
    lines: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        if _finite(row.get(x), row.get(y)):
            label = ", ".join(f"{k}={fmt(row.get(k))}" for k in varying) or "all runs"
            lines.setdefault(label, []).append((float(row[x]), float(row[y])))
    return {label: sorted(points) for label, points in lines.items()}


def plot_pipelining(sweep_dir: Path | str, out_dir: Path,
                    stem: str = "pipelining") -> list[Path]:
    """Speedup over no pipelining vs M / C for each mode, and the ideal curve."""
    sweep = Sweep(Path(sweep_dir))
    keys = [k for k in LINE_KEYS if k in sweep.swept]
    lines = _lines(sweep.rows, keys, "pipelining_ratio", "speedup_vs_none")
    if not lines:
        raise UserError(f"{sweep.path / RESULTS}: no run reports pipelining_ratio and "
                        "speedup_vs_none (bsp or bsp-ps runs do)")
    ratios = [x for points in lines.values() for x, _ in points]
    with figure(7.8, 4.2 + 0.35 * (len(lines) // 3 + 1) * (len(lines) > 4)) as fig:
        ax = fig.subplots()
        for i, (label, points) in enumerate(lines.items()):
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", markersize=4, label=wrap(label), **line_style(i))
        r = np.geomspace(min(ratios) / 1.5, max(ratios) * 1.5, 200)
        ax.plot(r, (1 + r) / np.maximum(1, r), color="0.35", linestyle=(0, (4, 3)),
                linewidth=1.0, label="ideal (C + M) / max(C, M)")
        ax.axhline(1.0, color="0.6", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("communication / compute, M / C (each mode's own messages)")
        ax.set_ylabel("speedup over no pipelining (×)")
        if len(lines) > 4:
            fig.legend(loc="outside lower center", ncols=3, fontsize=8)
        else:
            ax.legend(loc="best", fontsize=8)
        fig.suptitle("Does overlapping communication with backprop pay off?",
                     fontweight="bold")
        return save(fig, out_dir, stem)


def plot_buckets(sweep_dir: Path | str, out_dir: Path, stem: str = "buckets") -> list[Path]:
    """Iteration time vs bucket size, a line per fabric (or other swept key)."""
    sweep = Sweep(Path(sweep_dir))
    if not sweeps_key(sweep, BUCKET):
        raise UserError(f"{sweep.path / RESULTS}: {BUCKET} is not swept over several values")
    keys = [k for k in sweep.swept if k not in (BUCKET, "run.seed")]
    lines = _lines(sweep.rows, keys, BUCKET, "iter_s")
    if not lines:
        raise UserError(f"{sweep.path / RESULTS}: no run reports iter_s")
    factor, unit = time_unit(max(y for points in lines.values() for _, y in points))
    with figure(7.8, 4.2) as fig:
        ax = fig.subplots()
        for i, (label, points) in enumerate(lines.items()):
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, np.array(ys) * factor, marker="o", markersize=4, label=wrap(label),
                    **line_style(i))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.xaxis.set_major_formatter(EngFormatter(unit="B", sep=" "))
        ax.set_xlabel("bucket size")
        ax.set_ylabel(f"iteration time ({unit})")
        ax.legend(loc="best", fontsize=8)
        fig.suptitle("Bucket size: per-message latency vs lost overlap", fontweight="bold")
        return save(fig, out_dir, stem)
