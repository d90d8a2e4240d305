"""Model-parallel figures: the pipeline bubble, a schedule's Gantt chart, memory vs time.

- :func:`bubble_figure`: a sweep of ``parallel.microbatches`` x ``parallel.pipeline`` x
  ``parallel.schedule``: measured ``bubble_fraction`` against the closed form
  (p - 1)/(m + p - 1) (GPipe, Huang et al. 2019), and each schedule's peak memory per rank;
- :func:`schedule_figure`: one run's first step from trace.json, a row per rank, its
  forward (F) and backward (B) passes labelled by microbatch (the picture papers draw);
- :func:`memory_time_figure`: a sweep of layouts (data-parallel replicas D x pipeline
  stages p x tensor shards t): peak memory per rank against time per sample, a panel per
  model width, the device's memory drawn across.

The values drawn are the result files' own (``bubble_rows``, ``schedule_slices`` and
``layout_rows`` return them, for tests and notebooks).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from sim.errors import UserError
from sim.plots.style import colour, figure, save, time_unit
from sim.results import RESULTS, Run, Sweep, as_runs, numeric, read_json

PIPELINE, MICRO, SCHEDULE = "parallel.pipeline", "parallel.microbatches", "parallel.schedule"
TENSOR, REPLICAS = "parallel.tensor", "cluster.workers"
PASS = re.compile(r"^([FB])(\d+)$")  # a pipeline pass's slice name: F3, B3
PASS_COLOURS = {"F": "#4878d0", "B": "#ee854a"}
SCHEDULE_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B"}


def closed_form(p: int, m: int) -> float:
    """The bubble of p balanced stages and m microbatches: (p - 1)/(m + p - 1)."""
    return (p - 1) / (m + p - 1)


def _config(row: dict[str, Any], sweep: Sweep, key: str) -> Any:
    """A row's value of a config key: its results.csv column, else its run's config."""
    if key in row and row[key] is not None:
        return row[key]
    value: Any = Run(sweep.path / "runs" / str(row["run"])).config
    for part in key.split("."):
        value = value.get(part, {}) if isinstance(value, dict) else None
    return value


def bubble_rows(sweep_dir: Path | str) -> list[dict[str, Any]]:
    """One row per finished run: run, pipeline, microbatches, schedule, bubble_fraction, the
    closed form and peak_memory_bytes, as results.csv has them. Raises UserError when no
    run reports a bubble."""
    sweep = Sweep(Path(sweep_dir))
    rows = []
    for row in sweep.rows:
        bubble = numeric(row.get("bubble_fraction"))
        if not math.isfinite(bubble):
            continue
        p, m = int(_config(row, sweep, PIPELINE)), int(_config(row, sweep, MICRO))
        rows.append({"run": str(row["run"]), "pipeline": p, "microbatches": m,
                     "schedule": str(_config(row, sweep, SCHEDULE)),
                     "bubble_fraction": bubble, "closed_form": closed_form(p, m),
                     "peak_memory_bytes": numeric(row.get("peak_memory_bytes"))})
    if not rows:
        raise UserError(f"{sweep.path / RESULTS}: no run reports bubble_fraction "
                        "(runs with [parallel] pipeline stages do)")
    return sorted(rows, key=lambda r: (r["pipeline"], r["schedule"], r["microbatches"]))


def bubble_figure(sweep_dir: Path | str) -> Figure:
    """Left: measured bubble vs microbatches, a colour per stage count, a marker per
    schedule, the closed form dotted. Right: peak memory per rank vs microbatches."""
    rows = bubble_rows(sweep_dir)
    stages = sorted({r["pipeline"] for r in rows})
    schedules = sorted({r["schedule"] for r in rows})
    with figure(9.6, 4.2) as fig:
        bubble_ax, memory_ax = fig.subplots(1, 2)
        for i, p in enumerate(stages):
            for j, schedule in enumerate(schedules):
                mine = [r for r in rows if r["pipeline"] == p and r["schedule"] == schedule]
                ms = [r["microbatches"] for r in mine]
                name = f"p = {p}, {SCHEDULE_NAMES.get(schedule, schedule)}"
                look = {"color": colour(i), "marker": "os^D"[j % 4],
                        "linestyle": ["-", "--"][j % 2], "markersize": 4,
                        "fillstyle": ["full", "none"][j % 2]}
                bubble_ax.plot(ms, [r["bubble_fraction"] for r in mine], label=name, **look)
                memory_ax.plot(ms, [r["peak_memory_bytes"] / 2**20 for r in mine],
                               label=name, **look)
            ms = sorted({r["microbatches"] for r in rows if r["pipeline"] == p})
            grid = np.geomspace(min(ms), max(ms), 100)
            bubble_ax.plot(grid, (p - 1) / (grid + p - 1), color=colour(i), linestyle=":",
                           linewidth=1.0, label=f"p = {p}: (p - 1)/(m + p - 1)")
        for ax in (bubble_ax, memory_ax):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("microbatches per step m")
        bubble_ax.set_ylabel("bubble fraction (idle share of stage time)")
        bubble_ax.set_ylim(0, 1)
        memory_ax.set_ylabel("peak memory per rank (MiB)")
        memory_ax.set_ylim(0, None)
        bubble_ax.set_title("bubble vs closed form", color="0.3")
        memory_ax.set_title("peak memory (GPipe stashes m, 1F1B min(p - i, m))", color="0.3")
        handles, names = bubble_ax.get_legend_handles_labels()
        fig.legend(handles, names, loc="outside right upper", fontsize=7)
        fig.suptitle("Pipeline bubble and memory", fontweight="bold")
    return fig


def plot_bubble(sweep_dir: Path | str, out_dir: Path, stem: str = "bubble") -> list[Path]:
    """``bubble``: see :func:`bubble_figure`."""
    return save(bubble_figure(sweep_dir), out_dir, stem)


def schedule_slices(run: Run | Path | str) -> list[tuple[int, str, int, float, float]]:
    """(rank, "F" or "B", microbatch, start_s, end_s) of every pass on trace.json's rank
    tracks, by start."""
    run = as_runs([run])[0]
    trace = read_json(run.path / "trace.json")
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace
    out = []
    for e in events or []:
        match = PASS.match(str(e.get("name", ""))) if isinstance(e, dict) else None
        if match and e.get("ph") == "X" and e.get("pid", 0) == 0:
            start = float(e["ts"]) * 1e-6
            out.append((int(e["tid"]), match.group(1), int(match.group(2)), start,
                        start + float(e.get("dur", 0.0)) * 1e-6))
    return sorted(out, key=lambda s: (s[3], s[0]))


def passes(slices: list[tuple[int, str, int, float, float]]
           ) -> list[tuple[int, str, int, float, float]]:
    """A rank's back-to-back slices of one pass (a slice per layer) merged into one."""
    merged: dict[int, list[list[Any]]] = {}
    for rank, kind, k, start, stop in slices:
        mine = merged.setdefault(rank, [])
        last = mine[-1] if mine else None
        if last and last[1] == kind and last[2] == k and start - last[4] <= 1e-9 * max(stop, 1e-9):
            last[4] = max(last[4], stop)
        else:
            mine.append([rank, kind, k, start, stop])
    out = [tuple(x) for mine in merged.values() for x in mine]
    return sorted(out, key=lambda s: (s[3], s[0]))  # type: ignore[return-value]


def first_step(slices: list[tuple[int, str, int, float, float]],
               microbatches: int) -> list[tuple[int, str, int, float, float]]:
    """Each rank's first 2 m passes (one step's forward and backward passes)."""
    seen: dict[int, int] = {}
    out = []
    for s in passes(slices):
        seen[s[0]] = seen.get(s[0], 0) + 1
        if seen[s[0]] <= 2 * microbatches:
            out.append(s)
    return out


def schedule_figure(run: Run | Path | str) -> Figure:
    """The first step of a pipelined run: a row per rank, forward and backward passes
    labelled by microbatch. Raises UserError for a run whose trace has no passes."""
    run = as_runs([run])[0]
    parallel = run.config.get("parallel", {})
    m = int(parallel.get("microbatches", 1))
    slices = first_step(schedule_slices(run), m)
    if not slices:
        raise UserError(f"{run.path / 'trace.json'}: no pipeline passes (F0, B0, ...): "
                        "a run with [parallel] stages or shards draws them")
    ranks = max(s[0] for s in slices) + 1
    end = max(s[4] for s in slices)
    factor, unit = time_unit(end)
    with figure(8.4, 1.5 + 0.36 * ranks) as fig:
        ax = fig.subplots()
        for rank, kind, k, start, stop in slices:
            ax.broken_barh([(start * factor, (stop - start) * factor)], (rank - 0.38, 0.76),
                           facecolors=PASS_COLOURS[kind], edgecolors="white", linewidth=0.4)
            if (stop - start) / end > 0.012:
                ax.text((start + stop) / 2 * factor, rank, str(k), ha="center",
                        va="center", fontsize=6.5, color="white")
        ax.set_yticks(range(ranks), [f"rank {r}" for r in range(ranks)])
        ax.set_ylim(ranks - 0.5, -0.5)
        ax.set_xlim(0, end * factor)
        ax.set_xlabel(f"simulated time ({unit})")
        ax.grid(axis="y", visible=False)
        fig.legend(handles=[Patch(color=PASS_COLOURS["F"], label="forward (microbatch)"),
                            Patch(color=PASS_COLOURS["B"], label="backward (microbatch)")],
                   loc="outside lower center", ncols=2)
        schedule = SCHEDULE_NAMES.get(str(parallel.get("schedule")), parallel.get("schedule"))
        fig.suptitle(f"{schedule} schedule: p = {parallel.get('pipeline', 1)}, "
                     f"t = {parallel.get('tensor', 1)}, m = {m} (first step)",
                     fontweight="bold")
    return fig


def plot_schedule(runs: list[Run], out_dir: Path) -> list[Path]:
    """``schedule``: :func:`schedule_figure` of each run with pipeline passes."""
    written: list[Path] = []
    able = [r for r in as_runs(runs)
            if (r.path / "trace.json").is_file() and schedule_slices(r)]
    for run in able:
        stem = "schedule" if len(able) == 1 else f"schedule-{run.path.name}"
        written += save(schedule_figure(run), out_dir, stem)
    return written


def layout_name(replicas: int, pipeline: int, tensor: int) -> str:
    """``DP 8``, ``PP 8``, ``TP 4 x PP 2``, ``DP 2 x TP 4``: the layout of D x p x t ranks."""
    parts = [f"{name} {n}" for name, n in (("DP", replicas), ("TP", tensor),
                                          ("PP", pipeline)) if n > 1]
    return " x ".join(parts) or "1 rank"


def _width(value: Any) -> int:
    widths = json.loads(value) if isinstance(value, str) else value
    return int(max(widths)) if widths else 0


def layout_rows(sweep_dir: Path | str) -> list[dict[str, Any]]:
    """One row per finished run: layout, D, p, t, fabric, width (the widest hidden layer),
    time_per_sample_s (1 / samples_per_s), and from its summary peak_memory_bytes,
    device_memory_bytes and memory_fits (NaN, NaN and None for a model without dense layers,
    which reports none). Raises UserError when no run has a rate."""
    sweep = Sweep(Path(sweep_dir))
    rows = []
    for row in sweep.rows:
        peak = numeric(row.get("peak_memory_bytes"))
        device = numeric(row.get("device_memory_bytes"))
        rate = numeric(row.get("samples_per_s"))
        if not (math.isfinite(rate) and rate > 0):
            continue
        fits = row.get("memory_fits")
        d, p, t = (int(_config(row, sweep, k)) for k in (REPLICAS, PIPELINE, TENSOR))
        rows.append({"layout": layout_name(d, p, t), "replicas": d, "pipeline": p,
                     "tensor": t, "fabric": str(_config(row, sweep, "cluster.fabric")),
                     "width": _width(_config(row, sweep, "workload.hidden")),
                     "time_per_sample_s": 1.0 / rate, "peak_memory_bytes": peak,
                     "device_memory_bytes": device,
                     "memory_fits": fits if isinstance(fits, bool) else None})
    if not rows:
        raise UserError(f"{sweep.path / RESULTS}: no run reports samples_per_s")
    return rows


def memory_time_figure(sweep_dir: Path | str) -> Figure:
    """Peak memory per rank against time per sample (log-log), a panel per model width, a
    marker per layout and a colour per fabric; hollow markers do not fit the device."""
    rows = layout_rows(sweep_dir)
    widths = sorted({r["width"] for r in rows})
    layouts = list(dict.fromkeys(r["layout"] for r in rows))
    fabrics = list(dict.fromkeys(r["fabric"] for r in rows))
    markers = "osD^vPX*<>"
    with figure(4.0 * len(widths) + 2.4, 4.2) as fig:
        axes = fig.subplots(1, len(widths), squeeze=False).ravel()
        for ax, width in zip(axes, widths, strict=True):
            mine = [r for r in rows if r["width"] == width]
            times = [r["time_per_sample_s"] for r in mine]
            factor, unit = time_unit(max(times))
            for r in mine:
                fits = r["memory_fits"] is not False
                ax.plot(r["time_per_sample_s"] * factor, r["peak_memory_bytes"] / 2**20,
                        linestyle="none", marker=markers[layouts.index(r["layout"])
                                                        % len(markers)],
                        color=colour(fabrics.index(r["fabric"])), markersize=6,
                        fillstyle="full" if fits else "none")
            device = {r["device_memory_bytes"] for r in mine
                      if math.isfinite(r["device_memory_bytes"])}
            for limit in device:
                ax.axhline(limit / 2**20, color="0.4", linestyle="--", linewidth=0.9)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(f"time per sample ({unit})")
            ax.set_ylabel("peak memory per rank (MiB)")
            ax.set_title(f"hidden width {width}", color="0.3")
        handles = [ax.plot([], [], linestyle="none", marker=markers[i % len(markers)],
                           color="0.3", label=name)[0] for i, name in enumerate(layouts)]
        handles += [Patch(color=colour(i), label=name) for i, name in enumerate(fabrics)]
        handles += [Line2D([], [], color="0.4", linestyle="--", label="device memory"),
                    Line2D([], [], linestyle="none", marker="o", color="0.3",
                           fillstyle="none", label="hollow: does not fit")]
        fig.legend(handles=handles, loc="outside right upper", fontsize=7)
        fig.suptitle("Data vs model parallel: memory per rank against time per sample",
                     fontweight="bold")
    return fig


def plot_memory_time(sweep_dir: Path | str, out_dir: Path,
                     stem: str = "memory-time") -> list[Path]:
    """``memory-time``: see :func:`memory_time_figure`."""
    return save(memory_time_figure(sweep_dir), out_dir, stem)
