"""Comparison figures of several runs: held-out loss, staleness, time breakdown.

Each function takes run directories (or sweep directories, expanded to their runs) and an
output directory, reads only the result files, and returns the PNG and SVG paths written.
Runs that differ only by their seed share a legend entry and a colour.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sim.plots import style as st
from sim.plots.labels import context, groups, run_labels, style_indices
from sim.results import Run, as_runs

RunDirs = Sequence[Path | str | Run]


def labelled(runs: list[Run]) -> dict[str, list[Run]]:
    """Legend label -> its runs; a group of several seeds says so, a diverged run and an
    incomplete (interrupted) one too."""
    labels = run_labels([r.config for r in runs], [r.name for r in runs])
    out = {}
    for label, idx in groups(labels).items():
        members = [runs[i] for i in idx]
        if len(members) > 1:
            seeds = {r.config.get("run", {}).get("seed") for r in members}
            label += f" ({len(members)} {'seeds' if len(seeds) == len(members) else 'runs'})"
        if any(r.summary.get("diverged") for r in members):
            label += " (diverged)"
        if any(r.summary.get("complete") is False for r in members):
            label += " (incomplete)"
        out[label] = members
    return out


def styles(by_label: dict[str, list[Run]]) -> list[dict]:
    """Line colour and dashes per label (see :func:`style_indices`)."""
    configs = [members[0].config for members in by_label.values()]
    return [st.line_style(*ij) for ij in style_indices(configs)]


def _loss(run_dirs: RunDirs, out_dir: Path, x: str) -> list[Path]:
    runs = as_runs(run_dirs)
    by_label = labelled(runs)
    curves = {}
    for run in runs:
        xs = np.array(run.column("eval", "time_s" if x == "time" else "iteration"))
        ys = np.array(run.column("eval", "loss"))
        keep = np.isfinite(xs) & np.isfinite(ys)
        curves[id(run)] = xs[keep], ys[keep]
    finite_x = [c[0].max() for c in curves.values() if c[0].size]
    factor, unit = st.time_unit(max(finite_x, default=1.0)) if x == "time" else (1.0, "")
    with st.figure(st.width_for(list(by_label)), 4.0) as fig:
        ax = fig.add_subplot()
        for style, (label, members) in zip(styles(by_label), by_label.items(), strict=True):
            for j, run in enumerate(members):
                xs, ys = curves[id(run)]
                ax.plot(xs * factor, ys, label=st.wrap(label) if j == 0 else "_nolegend_",
                        marker="o" if len(xs) <= 15 else None, markersize=3,
                        alpha=1.0 if len(members) == 1 else 0.65, **style)
        losses = np.concatenate([c[1] for c in curves.values()] + [np.zeros(0)])
        if losses.size and losses.min() > 0 and losses.max() / losses.min() > 20:
            ax.set_yscale("log")
        ax.set_xlabel(f"simulated time ({unit})" if x == "time" else "updates applied")
        ax.set_ylabel("held-out loss")
        ax.set_xlim(left=0)
        st.legend(fig, ax, list(by_label))
        what = "simulated time" if x == "time" else "updates"
        st.titles(fig, f"Held-out loss vs {what}", context([r.config for r in runs]))
        return st.save(fig, out_dir, f"loss-{'time' if x == 'time' else 'updates'}")


def plot_loss_time(run_dirs: RunDirs, out_dir: Path) -> list[Path]:
    """Held-out loss (eval rows of metrics.csv) against simulated time, a line per run."""
    return _loss(run_dirs, out_dir, "time")


def plot_loss_updates(run_dirs: RunDirs, out_dir: Path) -> list[Path]:
    """Held-out loss against the number of updates applied, a line per run."""
    return _loss(run_dirs, out_dir, "updates")


OVERLAY = 4  # up to this many histograms share one axes; more get one panel each


def plot_staleness(run_dirs: RunDirs, out_dir: Path) -> list[Path]:
    """Histograms of the staleness of applied updates (seeds pooled), in % of updates.

    Up to :data:`OVERLAY` runs are overlaid as outlines; more get a panel each.
    """
    runs = as_runs(run_dirs)
    by_label = labelled(runs)
    hists = {}
    for label, members in by_label.items():
        values = np.concatenate([np.array(r.column("update", "staleness")) for r in members])
        hists[label] = values[np.isfinite(values)].astype(int)
    top = max((int(v.max()) for v in hists.values() if v.size), default=0)
    edges = np.arange(-0.5, top + 1.5)
    shares = {label: 100.0 * np.histogram(v, edges)[0] / max(len(v), 1)
              for label, v in hists.items()}
    looks = styles(by_label)
    overlay = len(hists) <= OVERLAY
    cols = 1 if overlay else min(4, len(hists))
    rows = 1 if overlay else -(-len(hists) // cols)
    size = (st.width_for(list(hists)), 4.0) if overlay else (2.6 * cols + 0.6, 2.3 * rows + 0.9)
    with st.figure(*size) as fig:
        axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
        for g, (label, share) in enumerate(shares.items()):
            ax = axes[0 if overlay else g]
            if overlay:
                ax.stairs(share, edges, label=st.wrap(label), linewidth=1.8, **looks[g])
            else:
                ax.bar(edges[:-1] + 0.5, share, width=0.8, color=looks[g]["color"])
                ax.set_title(st.wrap(label, 34), fontsize=7.5)
        for ax in axes[len(shares) if not overlay else 1:]:
            ax.set_visible(False)
        for i, ax in enumerate(axes[:1 if overlay else len(shares)]):
            ax.set_xlim(edges[0], edges[-1])
            ax.set_ylim(0, None)
            if top <= 12 or (overlay and top <= 20):
                ax.set_xticks(range(top + 1))
            if i % cols == 0:
                ax.set_ylabel("updates (%)")
        fig.supxlabel("staleness (model versions behind when applied)",
                      fontsize=st.STYLE["axes.labelsize"])
        if overlay:
            st.legend(fig, axes[0], list(hists))
        title = "Staleness of applied updates"
        subtitle = context([r.config for r in runs])
        if overlay:
            st.titles(fig, title, subtitle)
        else:
            fig.suptitle(f"{title}{f' ({subtitle})' if subtitle else ''}", fontweight="bold")
        return st.save(fig, out_dir, "staleness")


def plot_breakdown(run_dirs: RunDirs, out_dir: Path) -> list[Path]:
    """Stacked bars: mean compute / communication / wait time per worker, per run."""
    runs = as_runs(run_dirs)
    by_label = labelled(runs)
    labels = list(by_label)
    parts = {kind: np.array([np.mean([_num(r.summary.get(f"{kind}_s")) for r in members])
                             for members in by_label.values()]) for kind in st.KIND_COLOURS}
    sim_time = np.array([np.mean([_num(r.summary.get("sim_time_s")) for r in members])
                         for members in by_label.values()])
    longest = np.nanmax(np.concatenate([sim_time, sum(parts.values())]))
    factor, unit = st.time_unit(longest if math.isfinite(longest) and longest > 0 else 1.0)
    ticks = [st.wrap(label, 30) for label in labels]
    y = np.arange(len(labels))[::-1]
    with st.figure(6.4, 1.7 + 0.3 * len(labels) + 0.14 * sum(t.count("\n") + 1 for t in ticks)) \
            as fig:
        ax = fig.add_subplot()
        left = np.zeros(len(labels))
        for kind, colour in st.KIND_COLOURS.items():
            width = np.nan_to_num(parts[kind]) * factor
            ax.barh(y, width, left=left, height=0.6, color=colour, label=st.KIND_NAMES[kind])
            left += width
        ax.scatter(sim_time * factor, y, marker="|", s=260, color="black", linewidths=1.5,
                   label="simulated time", zorder=3)
        ax.set_yticks(y, ticks)
        ax.set_xlabel(f"mean time per worker ({unit})")
        ax.grid(axis="y", visible=False)
        ax.set_xlim(0, longest * factor * 1.03 if math.isfinite(longest) and longest > 0 else 1)
        handles, names = ax.get_legend_handles_labels()
        order = sorted(range(len(names)), key=lambda i: names[i] == "simulated time")
        fig.legend([handles[i] for i in order], [names[i] for i in order],
                   loc="outside lower center", ncols=4)
        st.titles(fig, "Where workers' time goes", context([r.config for r in runs]))
        return st.save(fig, out_dir, "breakdown")


def _num(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else math.nan
