"""Lines from a sweep's results.csv: a result against a swept key, seeds averaged.

A point per configuration (the swept keys but run.seed): its seeds give the mean and the
95% confidence interval (:func:`sim.stats.mean_ci`); a line per combination of the other
swept keys that vary, labelled readably as in every legend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.plots.legends import fabric_name, fmt, run_labels, style_indices
from sim.plots.style import line_style
from sim.seeds import by_config, number, summarise
from sim.stats import MeanCI


@dataclass
class SweepLine:
    label: str
    xs: np.ndarray
    mean: np.ndarray
    half: np.ndarray  # half-width of the 95% interval at each x; NaN where one run
    runs: np.ndarray  # runs averaged at each x
    config: dict[str, Any]  # the values of the keys that tell lines apart

    def __len__(self) -> int:
        return len(self.xs)


def sweep_lines(rows: Sequence[Mapping[str, Any]], keys: Sequence[str], x: str,
                y: str) -> list[SweepLine]:
    """Column ``y`` against column ``x``: a point per configuration (its seeds: the mean x,
    the mean y and its 95% interval), a line per combination of the ``keys`` that vary.
    Rows without finite x and y are left out; lines in first-seen order, x sorted."""
    kept = [r for r in rows if number(r.get(x)) is not None and number(r.get(y)) is not None]
    configs = list(by_config(kept).values())
    firsts = [members[0] for members in configs]
    varying = [k for k in keys if len({fmt(r.get(k)) for r in firsts}) > 1]
    if varying:
        labels = run_labels([{k: r.get(k) for k in varying} for r in firsts])
    else:  # one line: name it by its fabric (a summary key) if there is one
        labels = [fabric_name(r["fabric"]) if r.get("fabric") else "all runs" for r in firsts]
    points: dict[str, list[tuple[float, MeanCI]]] = {}
    line_configs: dict[str, dict[str, Any]] = {}
    for label, members in zip(labels, configs, strict=True):
        points.setdefault(label, []).append((summarise(members, x).mean, summarise(members, y)))
        line_configs.setdefault(label, {k: members[0].get(k) for k in varying})
    lines = []
    for label, line in points.items():
        line.sort(key=lambda p: p[0])
        lines.append(SweepLine(label, np.array([p[0] for p in line]),
                               np.array([p[1].mean for p in line]),
                               np.array([p[1].half_width for p in line]),
                               np.array([p[1].n for p in line]), line_configs[label]))
    return lines


def line_styles(lines: list[SweepLine]) -> list[dict[str, Any]]:
    """Colour and dashes per line, as :func:`sim.plots.legends.style_indices` picks them."""
    return [line_style(*ij) for ij in style_indices([line.config for line in lines])]


def error_bars(mean: np.ndarray, half: np.ndarray, log: bool) -> np.ndarray | None:
    """(below, above) error bar lengths from 95% half-widths (None when no point has one);
    on a log axis the lower bar stops short of zero."""
    if not np.isfinite(half).any():
        return None
    half = np.nan_to_num(half)
    below = np.minimum(half, mean * 0.999) if log else half
    return np.array([below, half])
