"""Figures from result files only (never from live objects): PNG and SVG, deterministic.

Every function reads run directories (``config.toml``, ``summary.json``, ``metrics.csv``,
``trace.json``) or a sweep directory (``results.csv`` and ``runs/<name>/``), writes
``<stem>.png`` and ``<stem>.svg`` atomically into an output directory and returns their
paths. Legends name each run by the config keys that differ between the runs compared
(:func:`run_labels`).

- :func:`plot_loss_time`, :func:`plot_loss_updates`: held-out loss, a line per run
- :func:`plot_staleness`: staleness histograms of the applied updates (overlaid, or a
  panel each for many runs)
- :func:`plot_gantt`: per-worker compute / communication / wait timeline, one per run
- :func:`plot_breakdown`: mean compute / communication / wait time per worker, a bar per run
- :func:`plot_scaling`: throughput and speedup vs workers from a sweep's results.csv
- :func:`plot_pipelining`: speedup of each pipelining mode vs M / C, with the ideal;
  :func:`plot_buckets`: iteration time vs bucket size (both from a sweep's results.csv)
- :func:`plot_runs`: the kinds asked for (the ``plot`` command);
  :func:`plot_sweep`: a sweep's standard comparison figures into ``SWEEP/plots/``
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from sim.errors import UserError
from sim.plots.figures import plot_breakdown, plot_loss_time, plot_loss_updates, plot_staleness
from sim.plots.gantt import plot_gantt
from sim.plots.labels import differing_keys, run_labels
from sim.plots.pipelining import BUCKET, MODE, plot_buckets, plot_pipelining, sweeps_key
from sim.plots.scaling import plot_scaling, sweeps_workers
from sim.results import Run, Sweep, expand

__all__ = ["KINDS", "differing_keys", "parse_kinds", "plot_breakdown", "plot_buckets",
           "plot_gantt", "plot_loss_time", "plot_loss_updates", "plot_pipelining", "plot_runs",
           "plot_scaling", "plot_staleness", "plot_sweep", "run_labels"]

RUN_PLOTS = {"loss-time": plot_loss_time, "loss-updates": plot_loss_updates,
             "staleness": plot_staleness, "gantt": plot_gantt, "breakdown": plot_breakdown}
# figures of a whole sweep: kind -> (the swept key it needs, the function)
SWEEP_PLOTS = {"pipelining": (MODE, plot_pipelining), "buckets": (BUCKET, plot_buckets)}
KINDS = (*RUN_PLOTS, "scaling", *SWEEP_PLOTS)


def _names(kinds: str | Iterable[str]) -> list[str]:
    parts = [kinds] if isinstance(kinds, str) else list(kinds)
    return [n.strip() for part in parts for n in part.split(",") if n.strip()]


def parse_kinds(kinds: str | Iterable[str]) -> list[str]:
    """``"loss-time,gantt"`` or ``["all"]`` -> the plot kinds, in :data:`KINDS` order."""
    names = _names(kinds)
    unknown = [n for n in names if n not in (*KINDS, "all")]
    if unknown or not names:
        raise UserError(f"--kind {','.join(unknown) or repr('')}: unknown plot kind; "
                        f"expected all or a comma-separated list of {', '.join(KINDS)}")
    return list(KINDS) if "all" in names else [k for k in KINDS if k in names]


def _scaling(dirs: list[Path], sweeps: list[Sweep], out_dir: Path,
             explicit: bool) -> list[Path]:
    able = [s for s in sweeps if sweeps_workers(s)]
    if explicit and not able:
        raise UserError(f"--kind scaling: {', '.join(map(str, dirs))}: needs a sweep directory "
                        "(with results.csv) that sweeps cluster.workers over several values")
    written: list[Path] = []
    for sweep in able:
        stem = "scaling" if len(able) == 1 else f"scaling-{sweep.path.name}"
        written += plot_scaling(sweep.path, out_dir, stem)
    return written


def _sweep_plot(kind: str, dirs: list[Path], sweeps: list[Sweep], out_dir: Path,
                explicit: bool) -> list[Path]:
    key, function = SWEEP_PLOTS[kind]
    able = [s for s in sweeps if sweeps_key(s, key)]
    if explicit and not able:
        raise UserError(f"--kind {kind}: {', '.join(map(str, dirs))}: needs a sweep directory "
                        f"(with results.csv) that sweeps {key} over several values")
    written: list[Path] = []
    for sweep in able:
        written += function(sweep.path, out_dir,
                            kind if len(able) == 1 else f"{kind}-{sweep.path.name}")
    return written


def plot_runs(run_dirs: Sequence[Path | str], out_dir: Path,
              kinds: str | Iterable[str] = ("all",), *,
              gantt_window_s: float | None = None) -> list[Path]:
    """The figures of ``kinds`` for run and sweep directories (sweeps expand to their runs).

    With ``all``, scaling is drawn only for sweeps of ``cluster.workers``; asked for
    explicitly, it needs one. ``gantt_window_s`` limits the timelines to the first seconds.
    Raises UserError naming a bad path or kind.
    """
    chosen = parse_kinds(kinds)
    if gantt_window_s is not None and not gantt_window_s > 0:
        raise UserError(f"--window-s {gantt_window_s}: expected a positive number of seconds")
    dirs = [Path(p) for p in run_dirs]
    runs, sweeps = expand(dirs)
    if not runs:
        raise UserError("no run directories given")
    written: list[Path] = []
    for kind in chosen:
        if kind == "scaling":
            written += _scaling(dirs, sweeps, Path(out_dir), "all" not in _names(kinds))
        elif kind in SWEEP_PLOTS:
            written += _sweep_plot(kind, dirs, sweeps, Path(out_dir),
                                   "all" not in _names(kinds))
        elif kind == "gantt":
            written += plot_gantt(runs, Path(out_dir), window_s=gantt_window_s)
        else:
            written += RUN_PLOTS[kind](runs, Path(out_dir))
    return written


def plot_sweep(sweep_dir: Path) -> list[Path]:
    """A sweep's standard comparison figures, into ``sweep_dir/plots/``.

    Loss vs time and vs updates, the time breakdown, the staleness histogram when any
    update was stale, throughput / speedup vs workers when ``cluster.workers`` is swept,
    and the pipelining figures when the pipelining mode or the bucket size is swept.
    """
    sweep = Sweep(Path(sweep_dir))
    runs: list[Run] = sweep.runs()
    out = sweep.path / "plots"
    written = plot_loss_time(runs, out) + plot_loss_updates(runs, out) + \
        plot_breakdown(runs, out)
    if any((r.summary.get("staleness_max") or 0) > 0 for r in runs):
        written += plot_staleness(runs, out)
    if sweeps_workers(sweep):
        written += plot_scaling(sweep.path, out)
    for kind, (key, function) in SWEEP_PLOTS.items():
        if sweeps_key(sweep, key):
            written += function(sweep.path, out, kind)
    return written
