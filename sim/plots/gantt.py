"""Per-worker timeline (Gantt) of compute / communication / wait, from trace.json.

Big runs hold far more slices than a figure can show, so the timeline covers a window
from time 0: ``window_s`` seconds if given, else as long as every worker has at most
``max_slices`` slices in it. The title says how much of the run is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from sim.errors import UserError
from sim.plots.legends import context, is_real, time_name
from sim.plots.style import (
    FAULT_KINDS,
    KIND_COLOURS,
    KIND_NAMES,
    figure,
    fmt_time,
    save,
    slug,
    time_unit,
    wrap,
)
from sim.results import Run, as_runs

MAX_SLICES = 40  # per worker, by default


def window_end(slices: list[tuple[int, str, float, float]], max_slices: int) -> float:
    """The latest end time that keeps every worker at <= max_slices slices starting before."""
    seen: dict[int, int] = {}
    end = max((s[3] for s in slices), default=0.0)
    for worker, _kind, start, _end in slices:  # sorted by start
        seen[worker] = seen.get(worker, 0) + 1
        if seen[worker] > max_slices:
            return start
    return end


def gantt_figure(run: Run, window_s: float | None = None,
                 max_slices: int = MAX_SLICES) -> Figure:
    """One run's timeline: a row per worker, its compute / communication / wait slices
    over the first ``window_s`` seconds (default: see the module doc). Raises UserError for
    a window or slice count that is not positive."""
    if window_s is not None and not window_s > 0:
        raise UserError(f"window_s: expected a positive number of seconds, got {window_s}")
    if max_slices < 1:
        raise UserError(f"max_slices: expected at least 1, got {max_slices}")
    slices = run.slices()
    total = max((s[3] for s in slices), default=0.0)
    total = max(total, float(run.summary.get("sim_time_s") or 0.0))
    end = window_s if window_s is not None else window_end(slices, max_slices)
    end = min(end, total) if total > 0 else end
    workers = max([s[0] for s in slices] + [int(run.summary.get("workers_n") or 0) - 1, 0]) + 1
    factor, unit = time_unit(end if end > 0 else 1.0)
    bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for worker, kind, start, stop in slices:
        if start < end:
            bars.setdefault((worker, kind), []).append(
                (start * factor, (min(stop, end) - start) * factor))
    with figure(7.2, min(1.7 + 0.32 * workers, 11.0)) as fig:
        ax = fig.add_subplot()
        for (worker, kind), spans in sorted(bars.items()):
            ax.broken_barh(spans, (worker - 0.38, 0.76), facecolors=KIND_COLOURS[kind],
                           edgecolors="white", linewidth=0.3)
        step = max(1, -(-workers // 24))  # at most ~24 tick labels
        ax.set_yticks(range(0, workers, step), [f"worker {w}" for w in range(0, workers, step)])
        ax.set_ylim(workers - 0.5, -0.5)
        ax.set_xlim(0, end * factor if end > 0 else 1.0)
        ax.set_xlabel(f"{time_name([run.summary])} ({unit})")
        ax.grid(axis="y", visible=False)
        shown_kinds = {kind for _, kind in bars}
        fig.legend(handles=[Patch(color=c, label=KIND_NAMES[k]) for k, c in
                            KIND_COLOURS.items() if k not in FAULT_KINDS or k in shown_kinds],
                   loc="outside lower center", ncols=3)
        shown = "the whole run" if end >= total else \
            f"the first {fmt_time(end)} of {fmt_time(total)}"
        real = " (real run)" if is_real(run.summary) else ""
        fig.suptitle(f"Worker timeline: {run.name}{real}", fontweight="bold")
        ax.set_title(wrap(f"{context([run.config])}, {shown}", 100), color="0.3")
    return fig


def plot_gantt(run_dirs: Sequence[Path | str | Run], out_dir: Path, *,
               window_s: float | None = None, max_slices: int = MAX_SLICES) -> list[Path]:
    """One timeline per run (``gantt-<run name>``): see :func:`gantt_figure`."""
    written: list[Path] = []
    stems: set[str] = set()
    for i, run in enumerate(as_runs(run_dirs)):
        stem = f"gantt-{slug(run.name)}"
        stem = f"{stem}-{i}" if stem in stems else stem
        stems.add(stem)
        written += save(gantt_figure(run, window_s, max_slices), out_dir, stem)
    return written
