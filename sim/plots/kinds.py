"""The plot kinds: which figures ``sim plot`` draws for runs and sweeps, and a sweep's
standard comparison figures (:func:`plot_sweep`, drawn after a sweep).

A kind is drawn per run set (``loss-time``, ``gantt``, ...: :data:`RUN_PLOTS`), per sweep
of ``cluster.workers`` (``scaling``) or per sweep of one key (``pipelining``, ``bubble``,
...: :data:`SWEEP_PLOTS`). Bad kinds and options raise UserError naming them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sim.errors import UserError
from sim.faults.interval_study import INTERVAL_KEY
from sim.plots.checkpoint_interval import plot_checkpoint_interval
from sim.plots.embedding_figures import PLACEMENT, plot_placements
from sim.plots.figures import plot_breakdown, plot_staleness
from sim.plots.gantt import plot_gantt
from sim.plots.loss import XLim, has_loss, plot_loss_time, plot_loss_updates
from sim.plots.parallel_figures import (
    SCHEDULE,
    TENSOR,
    plot_bubble,
    plot_memory_time,
    plot_schedule,
)
from sim.plots.pipelining import BUCKET, MODE, plot_buckets, plot_pipelining, sweeps_key
from sim.plots.scaling import plot_scaling, sweeps_workers
from sim.plots.transport_figures import TRANSPORT, plot_transports
from sim.results import Run, Sweep, expand


@dataclass(frozen=True)
class PlotOptions:
    logx: bool | None = None  # loss plots: log x axis (None: when the spans differ > 10x)
    xlim: XLim | None = None  # loss-time: x range in seconds
    gantt_window_s: float | None = None  # gantt: the first seconds shown


RunPlot = Callable[[list[Run], Path, PlotOptions], list[Path]]
RUN_PLOTS: dict[str, RunPlot] = {
    "loss-time": lambda runs, out, o: plot_loss_time(runs, out, logx=o.logx, xlim=o.xlim),
    "loss-updates": lambda runs, out, o: plot_loss_updates(runs, out, logx=o.logx),
    "staleness": lambda runs, out, o: plot_staleness(runs, out),
    "gantt": lambda runs, out, o: plot_gantt(runs, out, window_s=o.gantt_window_s),
    "breakdown": lambda runs, out, o: plot_breakdown(runs, out),
    "schedule": lambda runs, out, o: plot_schedule(runs, out),
}
LOSS_KINDS = ("loss-time", "loss-updates")
# figures of a whole sweep: kind -> (the swept key it needs, the function)
SWEEP_PLOTS = {"pipelining": (MODE, plot_pipelining), "buckets": (BUCKET, plot_buckets),
               "checkpoint-interval": (INTERVAL_KEY, plot_checkpoint_interval),
               "bubble": (SCHEDULE, plot_bubble), "memory-time": (TENSOR, plot_memory_time),
               "placements": (PLACEMENT, plot_placements),
               "transports": (TRANSPORT, plot_transports)}
KINDS = (*RUN_PLOTS, "scaling", *SWEEP_PLOTS)
# what each kind draws, one line each (`sim plot --help`)
KIND_LINES: dict[str, str] = {
    "loss-time": "held-out loss against simulated (or a real run's wall-clock) time",
    "loss-updates": "held-out loss against updates applied",
    "staleness": "histogram of the applied updates' staleness",
    "gantt": "each worker's timeline: compute, communication, waiting",
    "breakdown": "where each run's time goes, by activity",
    "schedule": "a pipeline's forward and backward passes per stage (runs with [parallel])",
    "scaling": "throughput and speedup against workers (a sweep of cluster.workers)",
    "pipelining": "step time and exposed communication per pipelining mode (a sweep of "
                  "strategy.pipelining)",
    "buckets": "step time against the bucket size (a sweep of strategy.bucket_bytes)",
    "checkpoint-interval": "wall time against the checkpoint interval, with Young and "
                           "Daly's optimum (a sweep of checkpoint.every_steps)",
    "bubble": "pipeline bubble against microbatches, with the closed form (a sweep of "
              "parallel.schedule)",
    "memory-time": "time per sample against each rank's memory per layout (a sweep of "
                   "parallel.tensor)",
    "placements": "embedding placements' bytes and time (a sweep of embeddings.placement)",
    "transports": "time per update by transport (a sweep of cluster.transport)",
}
NO_LOSS = ("no loss plots: no run evaluated the held-out loss (timing-only runs, "
           "workload.numerics = false)")


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


def _needs_sweep(kind: str, key: str, dirs: list[Path]) -> str:
    return (f"--kind {kind}: {', '.join(map(str, dirs))}: needs a sweep directory (with "
            f"results.csv) that sweeps {key} over several values")


def undrawable(kind: str, runs: list[Run], sweeps: list[Sweep], dirs: list[Path]) -> str | None:
    """Why ``kind`` cannot be drawn from these runs and sweeps, or None if it can: checked
    for every kind asked for before the first is drawn, so a long plot never fails at its
    last figure."""
    if kind == "scaling" and not any(sweeps_workers(s) for s in sweeps):
        return _needs_sweep(kind, "cluster.workers", dirs)
    if kind in SWEEP_PLOTS and not any(sweeps_key(s, SWEEP_PLOTS[kind][0]) for s in sweeps):
        return _needs_sweep(kind, SWEEP_PLOTS[kind][0], dirs)
    if kind in LOSS_KINDS and not has_loss(runs):
        return (f"--kind {kind}: {', '.join(str(r.path) for r in runs[:3])}: no held-out loss "
                "evaluations (timing-only runs, workload.numerics = false)")
    return None


def _scaling(sweeps: list[Sweep], out_dir: Path) -> list[Path]:
    able = [s for s in sweeps if sweeps_workers(s)]
    written: list[Path] = []
    for sweep in able:
        stem = "scaling" if len(able) == 1 else f"scaling-{sweep.path.name}"
        written += plot_scaling(sweep.path, out_dir, stem)
    return written


def _sweep_plot(kind: str, sweeps: list[Sweep], out_dir: Path) -> list[Path]:
    key, function = SWEEP_PLOTS[kind]
    able = [s for s in sweeps if sweeps_key(s, key)]
    written: list[Path] = []
    for sweep in able:
        written += function(sweep.path, out_dir,
                            kind if len(able) == 1 else f"{kind}-{sweep.path.name}")
    return written


def plot_runs(run_dirs: Sequence[Path | str], out_dir: Path,
              kinds: str | Iterable[str] = ("all",), *, gantt_window_s: float | None = None,
              logx: bool | None = None, xlim: XLim | None = None,
              notes: list[str] | None = None) -> list[Path]:
    """The figures of ``kinds`` for run and sweep directories (sweeps expand to their runs).

    With ``all``, scaling is drawn only for sweeps of ``cluster.workers`` and the loss
    plots only for runs with loss evaluations (``notes`` gets why one is left out); asked
    for explicitly, they need those. ``gantt_window_s`` limits the timelines to the first
    seconds; ``logx`` and ``xlim`` shape the loss plots (see :func:`loss_figure`).
    Raises UserError naming a bad path, kind or option.
    """
    chosen = parse_kinds(kinds)
    explicit = "all" not in _names(kinds)
    if gantt_window_s is not None and not gantt_window_s > 0:
        raise UserError(f"--window-s {gantt_window_s}: expected a positive number of seconds")
    dirs = [Path(p) for p in run_dirs]
    runs, sweeps = expand(dirs)
    if not runs:
        raise UserError("no run directories given")
    if not explicit and not has_loss(runs):
        chosen = [k for k in chosen if k not in LOSS_KINDS]
        _note(notes, NO_LOSS)
    problems = [why for kind in chosen if (why := undrawable(kind, runs, sweeps, dirs))]
    if explicit and problems:
        raise UserError("; ".join(problems))
    options = PlotOptions(logx, xlim, gantt_window_s)
    written: list[Path] = []
    for kind in chosen:
        if kind == "scaling":
            written += _scaling(sweeps, Path(out_dir))
        elif kind in SWEEP_PLOTS:
            written += _sweep_plot(kind, sweeps, Path(out_dir))
        else:
            written += RUN_PLOTS[kind](runs, Path(out_dir), options)
    return written


def _note(notes: list[str] | None, text: str) -> None:
    if notes is not None:
        notes.append(text)


def plot_sweep(sweep_dir: Path, notes: list[str] | None = None) -> list[Path]:
    """A sweep's standard comparison figures, into ``sweep_dir/plots/``.

    Loss vs time and vs updates (when any run evaluated the loss; else ``notes`` says
    so), the time breakdown, the staleness histogram when any update was stale,
    throughput / speedup vs workers when ``cluster.workers`` is swept, and the pipelining
    figures when the pipelining mode or the bucket size is swept.
    """
    sweep = Sweep(Path(sweep_dir))
    runs: list[Run] = sweep.runs()
    out = sweep.path / "plots"
    written: list[Path] = []
    if has_loss(runs):
        written += plot_loss_time(runs, out) + plot_loss_updates(runs, out)
    else:
        _note(notes, NO_LOSS)
    written += plot_breakdown(runs, out)
    if any((r.summary.get("staleness_max") or 0) > 0 for r in runs):
        written += plot_staleness(runs, out)
    if sweeps_workers(sweep):
        written += plot_scaling(sweep.path, out)
    for kind, (key, function) in SWEEP_PLOTS.items():
        if sweeps_key(sweep, key):
            written += function(sweep.path, out, kind)
    return written
