"""Comparison figures of several runs: staleness histograms and the time breakdown.

Each ``*_figure`` function takes run directories (or sweep directories, expanded to their
runs), reads only the result files and returns the :class:`matplotlib.figure.Figure`; each
``plot_*`` function saves it (PNG, SVG, PDF) and returns the paths. Runs that differ only by
their seed share a legend entry and a colour (:mod:`sim.plots.legends`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from sim.plots import style as st
from sim.plots.legends import context, labelled, repeats, styles, time_name
from sim.results import Run, as_runs

__all__ = ["OVERLAY", "breakdown_figure", "labelled", "plot_breakdown", "plot_staleness",
           "staleness_figure", "styles"]

RunDirs = Sequence[Path | str | Run]
OVERLAY = 4  # up to this many histograms share one axes (bars side by side); more: panels
PANEL_BARS = 15  # bars of one breakdown panel: more wrap into panels side by side
MAX_BINS = 24  # bins of a shared axes: wider ones beyond, so that every bar can be seen


def _subtitle(runs: list[Run], by_label: dict[str, list[Run]], how: str) -> str:
    seeds = repeats(by_label)
    return ", ".join(p for p in (context([r.config for r in runs]),
                                 f"{how} {seeds}" if seeds else "") if p)


def staleness_figure(run_dirs: RunDirs) -> Figure:
    """Histograms of the staleness of applied updates (seeds pooled), in % of updates.

    Up to :data:`OVERLAY` labels share one axes, their bars side by side in each bin (so
    equal histograms, bsp's and bsp-ps's all at 0, both show; beyond :data:`MAX_BINS`
    staleness values a bin holds several); more labels get a panel each.
    """
    runs = as_runs(run_dirs)
    by_label = labelled(runs)
    hists = {}
    for label, members in by_label.items():
        values = np.concatenate([np.array(r.column("update", "staleness")) for r in members])
        hists[label] = values[np.isfinite(values)].astype(int)
    top = max((int(v.max()) for v in hists.values() if v.size), default=0)
    overlay = len(hists) <= OVERLAY
    step = -(-(top + 1) // MAX_BINS) if overlay else 1  # bars side by side stay visible
    edges = np.arange(-0.5, top + step + 0.5, step)
    shares = {label: 100.0 * np.histogram(v, edges)[0] / max(len(v), 1)
              for label, v in hists.items()}
    looks = styles(by_label)
    cols = 1 if overlay else min(4, len(hists))
    rows = 1 if overlay else -(-len(hists) // cols)
    size = (st.width_for(list(hists)), 4.0) if overlay else (2.6 * cols + 0.6, 2.3 * rows + 0.9)
    centres = edges[:-1] + step / 2
    width = 0.8 * step / (len(shares) if overlay else 1)
    with st.figure(*size) as fig:
        axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
        for g, (label, share) in enumerate(shares.items()):
            ax = axes[0 if overlay else g]
            offset = (g - (len(shares) - 1) / 2) * width if overlay else 0.0
            ax.bar(centres + offset, share, width=width, label=st.wrap(label),
                   **st.bar_look(looks[g]))
            if not overlay:
                ax.set_title(st.wrap(label, 34), fontsize=7.5)
        for ax in axes[len(shares) if not overlay else 1:]:
            ax.set_visible(False)
        for i, ax in enumerate(axes[:1 if overlay else len(shares)]):
            ax.set_xlim(edges[0], edges[-1])
            ax.set_ylim(0, None)
            ax.grid(axis="x", visible=False)
            if step == 1 and (top <= 12 or (overlay and top <= 20)):
                ax.set_xticks(range(top + 1))
            if i % cols == 0:
                ax.set_ylabel("updates (%)")
        per_bin = f"; bins of {step}" if step > 1 else ""
        fig.supxlabel(f"staleness (model versions behind when applied{per_bin})",
                      fontsize=st.STYLE["axes.labelsize"])
        if overlay:
            st.legend(fig, axes[0], list(hists))
        title = "Staleness of applied updates"
        subtitle = _subtitle(runs, by_label, "pooled over")
        if overlay:
            st.titles(fig, title, subtitle)
        else:
            fig.suptitle(f"{title}{f' ({subtitle})' if subtitle else ''}", fontweight="bold")
    return fig


def plot_staleness(run_dirs: RunDirs, out_dir: Path) -> list[Path]:
    """``staleness``: see :func:`staleness_figure`."""
    return st.save(staleness_figure(run_dirs), out_dir, "staleness")


def breakdown_figure(run_dirs: RunDirs) -> Figure:
    """Stacked bars: mean time per worker by activity (compute, batch gather, update,
    message CPU, network, wait), a bar per label (seeds averaged), and the run's length."""
    runs = as_runs(run_dirs)
    by_label = labelled(runs)
    labels = list(by_label)
    parts = {kind: np.array([np.mean([_num(r.summary.get(f"{kind}_s")) for r in members])
                             for members in by_label.values()]) for kind in st.KIND_COLOURS}
    run_time = np.array([np.mean([_num(r.summary.get("sim_time_s")) for r in members])
                         for members in by_label.values()])
    longest = np.nanmax(np.concatenate([run_time, sum(parts.values())]))
    factor, unit = st.time_unit(longest if math.isfinite(longest) and longest > 0 else 1.0)
    ticks = [st.wrap(label, 30) for label in labels]
    clock = time_name([r.summary for r in runs])
    cols = -(-len(labels) // PANEL_BARS)  # a long breakdown wraps into side-by-side panels
    per = -(-len(labels) // cols)
    tall = max(0.3 * len(chunk) + 0.14 * sum(t.count("\n") + 1 for t in chunk)
               for chunk in (ticks[i:i + per] for i in range(0, len(ticks), per)))
    with st.figure(6.4 + 5.4 * (cols - 1), 1.7 + tall) as fig:
        axes = fig.subplots(1, cols, sharex=True, squeeze=False).ravel()
        for ax, first in zip(axes, range(0, len(labels), per), strict=True):
            rows = slice(first, first + per)
            y = np.arange(per)[::-1][:len(labels[rows])]
            left = np.zeros(len(y))
            for kind, colour in st.KIND_COLOURS.items():
                width = np.nan_to_num(parts[kind][rows]) * factor
                if not np.any(np.nan_to_num(parts[kind]) > 0):  # no run spends time on it:
                    continue  # no bar, no legend entry
                ax.barh(y, width, left=left, height=0.6, color=colour,
                        label=st.KIND_NAMES[kind])
                left += width
            ax.scatter(run_time[rows] * factor, y, marker="|", s=260, color="black",
                       linewidths=1.5, label=clock, zorder=3)
            ax.set_yticks(y, ticks[rows])
            ax.set_ylim(-0.6, per - 0.4)
            ax.set_xlabel(f"mean time per worker ({unit})")
            ax.grid(axis="y", visible=False)
        axes[0].set_xlim(0, longest * factor * 1.03
                         if math.isfinite(longest) and longest > 0 else 1)
        handles, names = axes[0].get_legend_handles_labels()
        order = sorted(range(len(names)), key=lambda i: names[i] == clock)
        fig.legend([handles[i] for i in order], [names[i] for i in order],
                   loc="outside lower center", ncols=4 if cols == 1 else 8)
        title, subtitle = "Where workers' time goes", _subtitle(runs, by_label, "mean of")
        if cols == 1:
            st.titles(fig, title, subtitle)
        else:
            fig.suptitle(f"{title}{f' ({subtitle})' if subtitle else ''}", fontweight="bold")
    return fig


def plot_breakdown(run_dirs: RunDirs, out_dir: Path) -> list[Path]:
    """``breakdown``: see :func:`breakdown_figure`."""
    return st.save(breakdown_figure(run_dirs), out_dir, "breakdown")


def _num(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else math.nan
