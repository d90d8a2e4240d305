"""Held-out loss against time or updates: a line per configuration, seeds as a mean and band.

Runs that differ only by their seed are drawn as their mean with a shaded 95% confidence
band (:func:`sim.stats.mean_ci` at every evaluation point of the span all of them cover).
Real runs are dashed in the colour of their simulated twin, and their time is wall-clock
time. The x axis turns logarithmic when the lines' spans differ by more than
:data:`sim.plots.style.SPAN_RATIO` (a 6 ms asp run beside a 445 ms bsp one), or when asked.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from sim.errors import UserError
from sim.plots import style as st
from sim.plots.facets import Facets, and_list, facets
from sim.plots.legends import context, labelled, repeats, styles, time_name
from sim.results import Run, as_runs
from sim.stats import mean_ci

RunDirs = Sequence[Path | str | Run]
XLim = tuple[float | None, float | None]
COLUMN = {"time": "time_s", "updates": "iteration"}


@dataclass
class Line:
    label: str
    style: dict
    xs: np.ndarray
    ys: np.ndarray  # a run's losses, or the mean of its group's
    low: np.ndarray | None = None  # the group's 95% band, if it has several runs
    high: np.ndarray | None = None
    group: str = ""  # the legend label of the runs it draws


def parse_xlim(text: str) -> XLim:
    """``"LO,HI"`` (either side may be empty: automatic) -> (lo, hi).
    Raises UserError for anything but one or two finite numbers with LO < HI."""
    try:
        lo, hi = (float(p) if p.strip() else None for p in text.split(","))
        if (lo, hi) == (None, None) or (lo is not None and hi is not None and lo >= hi) \
                or not all(math.isfinite(v) for v in (lo, hi) if v is not None):
            raise ValueError(text)
    except ValueError:  # also: not two parts, not numbers
        raise UserError(f"--xlim {text}: expected LO,HI with finite numbers LO < HI "
                        "(either may be left empty), e.g. 0,0.005") from None
    return lo, hi


def eval_curve(run: Run, x: str) -> tuple[np.ndarray, np.ndarray]:
    """The finite (x, held-out loss) points of a run's evaluations; x is ``time`` (s) or
    ``updates``."""
    xs = np.array(run.column("eval", COLUMN[x]), dtype=float)
    ys = np.array(run.column("eval", "loss"), dtype=float)
    keep = np.isfinite(xs) & np.isfinite(ys)
    return xs[keep], ys[keep]


def mean_band(curves: list[tuple[np.ndarray, np.ndarray]], floor: float = 0.0
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """x, mean, low, high of the 95% t interval of several runs' curves, at every x of
    theirs inside the span all of them cover (linear interpolation between evaluations),
    clipped below at ``floor`` (a loss is never negative, so a wide interval of a few
    repeats is not drawn where no loss can be); None if that span holds fewer than two
    points or there are fewer than two curves (one run has no interval)."""
    if len(curves) < 2:
        return None
    lo = max(xs[0] for xs, _ in curves)
    hi = min(xs[-1] for xs, _ in curves)
    grid = np.unique(np.concatenate([xs for xs, _ in curves]))
    grid = grid[(grid >= lo) & (grid <= hi)]
    if grid.size < 2:
        return None
    values = np.array([np.interp(grid, xs, ys) for xs, ys in curves])
    cis = [mean_ci(column) for column in values.T]
    return (grid, np.array([c.mean for c in cis]),
            np.maximum(np.array([c.low for c in cis]), floor), np.array([c.high for c in cis]))


def has_loss(runs: list[Run]) -> bool:
    """Whether any run evaluated the held-out loss (timing-only runs do not)."""
    return any(eval_curve(r, "updates")[0].size for r in runs)


def _lines(by_label: dict[str, list[Run]], x: str) -> list[Line]:
    lines = []
    for style, (label, members) in zip(styles(by_label), by_label.items(), strict=True):
        curves = [c for c in (eval_curve(r, x) for r in members) if c[0].size]
        band = mean_band(curves) if len(curves) > 1 else None
        if band is not None:
            lines.append(Line(label, style, *band, group=label))
        else:  # one run, or seeds with no span in common: each run drawn
            lines += [Line(label if j == 0 else "_nolegend_", style, *c, group=label)
                      for j, c in enumerate(curves)]
    return lines


def _same(a: Line, b: Line, tolerance: float, log_y: bool) -> bool:
    """Whether one line draws over the other: the shorter one's x span lies inside the
    longer one's and its points lie on it, within ``tolerance`` (of the y range, or of its
    logarithm on a log axis). A run cut short beside its twin is hidden all the same."""
    if b.xs[-1] - b.xs[0] > a.xs[-1] - a.xs[0]:
        a, b = b, a
    if b.xs[0] < a.xs[0] or b.xs[-1] > a.xs[-1] or (a.xs.size < 2) != (b.xs.size < 2):
        return False
    ya, yb = (np.log(a.ys), np.log(b.ys)) if log_y else (a.ys, b.ys)
    return bool(np.all(np.abs(np.interp(b.xs, a.xs, ya) - yb) <= tolerance))


def coinciding(lines: list[Line], log_y: bool = False, share: float = 0.005
               ) -> list[list[int]]:
    """Groups (two or more) of legend lines that would hide one another: the same points,
    within ``share`` of the y range. Each group is a list of indices into ``lines``."""
    named = [i for i, line in enumerate(lines)
             if not line.label.startswith("_") and line.xs.size]
    ys = np.concatenate([lines[i].ys for i in named] or [np.zeros(1)])
    ys = np.log(ys) if log_y else ys
    tolerance = share * (float(np.ptp(ys)) or 1.0)
    groups: list[list[int]] = []
    for i in named:
        for group in groups:
            if _same(lines[group[0]], lines[i], tolerance, log_y):
                group.append(i)
                break
        else:
            groups.append([i])
    return [g for g in groups if len(g) > 1]


def _names(labels: list[str]) -> str:
    return labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"


def _distinguish(lines: list[Line], groups: list[list[int]], marker: str | None
                 ) -> list[dict[str, Any]]:
    """Matplotlib keywords per line: coinciding lines get a marker each, drawn at offset
    points (``markevery``), and the later ones a dash pattern through which the first
    shows."""
    looks: list[dict[str, Any]] = [{"marker": marker, "markersize": 3} for _ in lines]
    for group in groups:
        dashes = {lines[group[0]].style["linestyle"]}
        for k, i in enumerate(group):
            # about a dozen markers a line, each line's at points the others leave free
            every = max(len(group), -(-max(lines[j].xs.size for j in group) // 12))
            looks[i] = {"marker": st.MARKERS[k % len(st.MARKERS)], "markersize": 4.5,
                        "markevery": (k * every // len(group), every),
                        "fillstyle": "full" if k == 0 else "none"}
            if k and lines[i].style["linestyle"] in dashes:  # else its own dashes do
                looks[i]["linestyle"] = (2.0 * k, (3.0, 2.0 + 2.0 * k))
            dashes.add(lines[i].style["linestyle"])
    return looks


def _check(xlim: XLim | None, log: bool) -> None:
    if xlim and log and xlim[0] is not None and xlim[0] <= 0:
        raise UserError(f"--xlim {xlim[0]:g},{'' if xlim[1] is None else f'{xlim[1]:g}'}: "
                        "a log x axis needs LO > 0")


def _fit_y(ax: Any, lines: list[Line], xlim: XLim, factor: float, log_y: bool) -> None:
    """x limits, and y limits that fit the points inside them (matplotlib fits them all)."""
    lo = -math.inf if xlim[0] is None else xlim[0]
    hi = math.inf if xlim[1] is None else xlim[1]
    seen = [np.zeros(0)]
    for line in lines:
        inside = (line.xs >= lo) & (line.xs <= hi)
        seen += [a[inside] for a in (line.ys, line.low, line.high) if a is not None]
    ys = np.concatenate(seen)
    ys = ys[np.isfinite(ys) & ((ys > 0) if log_y else True)]
    if ys.size:
        bottom, top = ys.min(), ys.max()
        pad = (top / bottom) ** 0.05 if log_y else 0.05 * (top - bottom or abs(top) or 1.0)
        ax.set_ylim(*((bottom / pad, top * pad) if log_y else (bottom - pad, top + pad)))
    ax.set_xlim(*(None if v is None else v * factor for v in xlim))


def loss_figure(run_dirs: RunDirs, x: str = "time", *, logx: bool | None = None,
                xlim: XLim | None = None) -> Figure:
    """Held-out loss against ``x`` (``time``: s, simulated or wall-clock; ``updates``).

    ``logx``: None chooses (log when the lines' spans differ by more than SPAN_RATIO and
    ``xlim`` does not start at or below 0). ``xlim``: (lo, hi) in s or updates, None for
    automatic. Raises UserError when no run has a loss evaluation or ``xlim`` and a log
    axis do not fit.
    """
    runs = as_runs(run_dirs)
    if not has_loss(runs):
        raise UserError(f"{', '.join(str(r.path) for r in runs[:3])}: no held-out loss "
                        "evaluations (timing-only runs, workload.numerics = false): no "
                        "loss plot")
    by_label = labelled(runs)
    lines = _lines(by_label, x)
    spans = [float(line.xs.max()) for line in lines if line.xs.size]
    starts_at_zero = xlim is not None and xlim[0] is not None and xlim[0] <= 0
    log = st.spans_differ(spans) and not starts_at_zero if logx is None else logx
    _check(xlim, log)
    view = max(spans, default=1.0) if not xlim or xlim[1] is None else xlim[1]
    factor, unit = st.time_unit(view) if x == "time" else (1.0, "")
    losses = np.concatenate([line.ys for line in lines])
    log_y = bool(losses.size and losses.min() > 0 and losses.max() / losses.min() > 20)
    marker = "o" if all(line.xs.size <= 15 for line in lines) else None  # few points: shown
    layout = facets([members[0].config for members in by_label.values()])
    looks, panels, notes = _looks(by_label, lines, layout, marker, log_y)
    n = len(layout.panels) if layout else 1
    cols = min(n, 3)
    rows = -(-n // cols)
    width = 4.2 * cols + 0.8 if layout else st.width_for(list(by_label) + notes)
    with st.figure(width, 3.4 * rows + (1.6 if layout else 0.6)) as fig:
        axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
        for line, look, panel in zip(lines, looks, panels, strict=True):
            _draw(axes[panel], line, look, log, factor)
        for i, ax in enumerate(axes):
            _scale(ax, i < n, log, log_y, xlim, lines, factor)
            if layout and i < n:
                ax.set_title(layout.panel_title(i), fontsize=9)
        ax = axes[0]
        if x == "time":
            what = time_name([r.summary for r in runs])
            xlabel = f"{what} ({unit}{', log scale' if log else ''})"
            title = "time" if "/" in what else what  # sim and real: the label says which
        else:
            xlabel = f"updates applied{' (log scale)' if log else ''}"
            title = "updates"
        for i in range(n):
            if i // cols == rows - 1 or i + cols >= n:  # the bottom panel of each column
                axes[i].set_xlabel(xlabel)
            if i % cols == 0:
                axes[i].set_ylabel("held-out loss")
        if layout:
            handles, texts, ncols = layout.legend(notes)
            fig.legend(handles, texts, loc="outside lower center", ncols=ncols, fontsize=8)
        else:
            st.legend(fig, ax, list(by_label), notes)
        seeds = repeats(by_label)
        note = f"mean of {seeds}, band: 95% CI" if seeds else ""
        subtitle = ", ".join(p for p in (context([r.config for r in runs]), note) if p)
        if layout:
            fig.suptitle(f"Held-out loss vs {title}" + (f"\n{subtitle}" if subtitle else ""),
                         fontweight="bold")
        else:
            st.titles(fig, f"Held-out loss vs {title}", subtitle)
    return fig


def _looks(by_label: dict[str, list[Run]], lines: list[Line], layout: Facets | None,
           marker: str | None, log_y: bool) -> tuple[list[dict], list[int], list[str]]:
    """Each line's keywords and panel, and the legend's notes: by the swept keys when
    ``layout`` says so (too many lines for one legend), else each label its own style and
    lines that coincide told apart (:func:`_distinguish`)."""
    if layout is not None:
        configs = {label: members[0].config for label, members in by_label.items()}
        placed = [layout.place(configs[line.group]) for line in lines]
        panels = [p for p, _ in placed]
        return ([{**look, "marker": marker} for _, look in placed], panels,
                _facet_notes(layout, lines, panels, configs, log_y))
    groups = coinciding(lines, log_y)
    looks = [{**line.style, **look} for line, look in
             zip(lines, _distinguish(lines, groups, marker), strict=True)]
    return looks, [0] * len(lines), [f"{_names([lines[i].label for i in g])} coincide"
                                     for g in groups]


def _facet_notes(layout: Facets, lines: list[Line], panels: list[int],
                 configs: dict[str, Any], log_y: bool) -> list[str]:
    """Which series of each panel coincide, a note said once for all the panels it holds
    in (issue 47: the scaling sweep's 12 loss-vs-updates curves lie on one another, and its
    figure showed a single line with no word of it)."""
    where: dict[str, list[str]] = {}
    for panel in dict.fromkeys(panels):
        mine = [i for i, p in enumerate(panels) if p == panel]
        groups = [[configs[lines[mine[k]].group] for k in group]
                  for group in coinciding([lines[i] for i in mine], log_y)]
        for note in layout.describe(groups):
            where.setdefault(note, []).append(layout.panel_title(panel))
    if not layout.panel_keys:
        return list(where)
    return [f"{and_list(titles)}: {note}" for note, titles in where.items()]


def _scale(ax: Any, used: bool, log: bool, log_y: bool, xlim: XLim | None,
           lines: list[Line], factor: float) -> None:
    """A panel's scales and limits (a panel the layout leaves empty is hidden)."""
    if not used:
        ax.set_visible(False)
        return
    if log_y:
        ax.set_yscale("log")
    if log:
        ax.set_xscale("log")
        st.log_ticks(ax.xaxis)
    elif not xlim:
        ax.set_xlim(left=0)
    if xlim:
        _fit_y(ax, lines, xlim, factor, log_y)


def _draw(ax: Any, line: Line, look: dict[str, Any], log: bool, factor: float) -> None:
    """One line, and its band when it has one (points at x <= 0 left off a log axis)."""
    keep = line.xs > 0 if log else np.ones(line.xs.size, bool)
    xs = line.xs[keep] * factor
    ax.plot(xs, line.ys[keep], label=st.wrap(line.label), **look)
    if line.low is not None:
        ax.fill_between(xs, line.low[keep], line.high[keep], color=look["color"],
                        alpha=st.BAND_ALPHA, linewidth=0)


def plot_loss_time(run_dirs: RunDirs, out_dir: Path, *, logx: bool | None = None,
                   xlim: XLim | None = None) -> list[Path]:
    """Held-out loss against time (``loss-time``): see :func:`loss_figure`."""
    return st.save(loss_figure(run_dirs, "time", logx=logx, xlim=xlim), out_dir, "loss-time")


def plot_loss_updates(run_dirs: RunDirs, out_dir: Path, *, logx: bool | None = None,
                      xlim: XLim | None = None) -> list[Path]:
    """Held-out loss against updates applied (``loss-updates``): see :func:`loss_figure`."""
    return st.save(loss_figure(run_dirs, "updates", logx=logx, xlim=xlim), out_dir,
                   "loss-updates")
