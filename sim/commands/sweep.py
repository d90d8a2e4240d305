"""``python -m sim sweep CONFIG [--out DIR] [--set k=v ...] [--seeds N] [--jobs N]
[--scheduler ADDRESS]``.

Runs the config's ``[sweep]`` grid (times ``run.seeds``) into ``DIR/runs/<name>/`` and writes
``DIR/results.csv``. Killed and started again with the same command, it finishes the rest;
started again with more ``--seeds`` (or a longer run.seeds), it runs only the new seeds
(fewer: the other seeds' runs are kept but not reported; see :mod:`sim.sweep.execute`).
The table printed at the end has a line per run, or, with several seeds, a line per
configuration with each figure's mean and 95% confidence interval over the seeds.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from sim import quick
from sim.commands import add_set_option
from sim.names import CONFIG_HELP, config_path
from sim.seeds import SEED, format_ci, summarise
from sim.sweep.grid import point_names

if TYPE_CHECKING:
    from sim.sweep import Point, SweepReport

SHOWN = ("final_loss", "time_to_target_s", "sim_time_s", "samples_per_s")
# the summary figures a sweep of a table's keys is about, shown after SHOWN
SWEPT_FIGURES: dict[str, tuple[str, ...]] = {
    "parallel.": ("bubble_fraction", "peak_memory_bytes"),
    "embeddings.": ("pull_bytes_per_step", "push_bytes_per_step"),
    "checkpoint.": ("checkpoints", "lost_work_s", "goodput_updates_per_s"),
    "faults.": ("failures", "lost_work_s", "goodput_updates_per_s"),
    "strategy.pipelining": ("exposed_comm_s", "pipelining_ratio"),
}
CI_NOTE = ("  mean ± half-width of its 95% confidence interval over the seeds (Student t);\n"
           "  time_to_target_s: of the seeds that reached run.target_loss (reached: how many)")
SAME_NOTE = "  a value without an interval was the same for every seed"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", type=config_path, help=f"{CONFIG_HELP} with a [sweep] table")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="sweep directory (default: runs/<config name>); an existing one "
                             "made by the same sweep is resumed")
    add_set_option(parser, "run.iterations=50, sweep.cluster.workers=[2,4] or "
                   "run.seeds=[1,2,3] (before the grid is expanded)")
    parser.add_argument("--seeds", type=int, metavar="N",
                        help="repeat every point with N seeds: run.seed, run.seed + 1, ... "
                             "(replaces run.seeds); tables and plots show the mean and its "
                             "95%% confidence interval. On a finished sweep in DIR it adds "
                             "the new seeds and reuses the runs done")
    parser.add_argument("--jobs", type=int, metavar="N",
                        help="local worker processes (default: the CPU count)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="run on a Dask distributed cluster, e.g. tcp://host:8786")
    parser.add_argument("--no-plots", dest="plots", action="store_false",
                        help="skip the comparison plots")


def _columns(header: list[str], rows: list[list[str]]) -> list[str]:
    """Rows as aligned text: the first column left, the others right (short rows end early,
    a row may have a last, unnamed column)."""
    table = [header, *rows]
    widths = [max(len(r[i]) for r in table if i < len(r))
              for i in range(max(map(len, table)))]
    return ["  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                             for i, (cell, w) in enumerate(zip(row, widths, strict=False)))
            .rstrip() for row in table]


def _filled(header: list[str], rows: list[list[str]], keep: int = 1
            ) -> tuple[list[str], list[list[str]]]:
    """``header`` and ``rows`` without the named columns (after the first ``keep``) that are
    ``-`` in every row holding figures (short rows, FAILED or not run, hold none)."""
    full = [r for r in rows if len(r) >= len(header)]
    if not full:
        return header, rows
    shown = [i for i in range(len(header))
             if i < keep or any(r[i] != "-" for r in full)]
    extra = range(len(header), max(map(len, rows)))  # the unnamed last column
    return ([header[i] for i in shown],
            [[r[i] for i in [*shown, *extra] if i < len(r)] if len(r) >= len(header) else r
             for r in rows])


def _target(point: Point) -> object:
    run = point.data.get("run", {})
    return run.get("target_loss") if isinstance(run, dict) else None


def _time_to_target(row: dict, target: object) -> str:
    value = row.get("time_to_target_s")
    return _fmt(value) if value is not None else ("never" if target is not None else "-")


def shown(report: SweepReport) -> tuple[str, ...]:
    """:data:`SHOWN`, then the figures of :data:`SWEPT_FIGURES` for the keys the sweep
    varies (bubble and memory for [parallel], pull bytes for [embeddings], ...)."""
    swept = [part.strip() for key in report.sweep.keys for part in key.split(",")]
    extra = [figure for prefix, figures in SWEPT_FIGURES.items()
             if any(k.startswith(prefix) for k in swept) for figure in figures]
    return SHOWN + tuple(dict.fromkeys(f for f in extra if f not in SHOWN))


def run_table(report: SweepReport) -> str:
    """One line per run: its name and the :func:`shown` figures (``never``: the target not
    reached); a column with no value in any row is left out."""
    figures = shown(report)
    rows = {row["run"]: row for row in report.rows}
    lines = []
    for point in report.sweep.points:
        row = rows.get(point.name)
        if row is None:
            lines.append([point.name, "FAILED" if point.name in report.failed else "not run"])
            continue
        cells = [_fmt(row.get(k)) if k != "time_to_target_s" else
                 _time_to_target(row, _target(point)) for k in figures]
        lines.append([point.name, *cells, "diverged" if row.get("diverged") else ""])
    return "\n".join(_columns(*_filled(["run", *figures], lines)))


def configurations(points: list[Point]) -> dict[tuple, list[Point]]:
    """The sweep's points by configuration (their values but run.seed), in point order."""
    out: dict[tuple, list[Point]] = {}
    for point in points:
        key = tuple((k, repr(v)) for k, v in point.values.items() if k != SEED)
        out.setdefault(key, []).append(point)
    return out


def seed_table(report: SweepReport) -> str:
    """One line per configuration: how many seeds finished, then each of :data:`SHOWN` as
    mean ± 95% interval (the bare value when every seed gave the same), and how many seeds
    reached the target; a column with no value in any row is left out."""
    figures = shown(report)
    rows = {row["run"]: row for row in report.rows}
    configs = configurations(report.sweep.points)
    names = point_names([{k: v for k, v in points[0].values.items() if k != SEED}
                         for points in configs.values()])
    lines = []
    for name, points in zip(names, configs.values(), strict=True):
        done = [rows[p.name] for p in points if p.name in rows]
        if not done:
            lines.append([name or "all", "FAILED" if any(p.name in report.failed for p in points)
                          else "not run"])
            continue
        target = _target(points[0])
        reached = sum(r.get("time_to_target_s") is not None for r in done)
        cells = [format_ci(summarise(done, k)) for k in figures]
        cells.insert(2, f"{reached}/{len(done)}" if target is not None else "-")
        seeds = str(len(done)) if len(done) == len(points) else f"{len(done)}/{len(points)}"
        diverged = sum(bool(r.get("diverged")) for r in done)
        lines.append([name or "all", seeds, *cells, f"{diverged} diverged" if diverged else ""])
    header, lines = _filled(["configuration", "seeds", *figures[:2], "reached", *figures[2:]],
                            lines, keep=2)
    columns = [i for i, k in enumerate(header) if k in figures]
    cells = [r[i] for r in lines if len(r) >= len(header) for i in columns]
    notes = CI_NOTE.splitlines() if any("±" in c for c in cells) else []
    if notes and "time_to_target_s" not in header:
        notes = notes[:1]
    if any("±" not in c and c != "-" for c in cells):
        notes.append(SAME_NOTE)
    return "\n".join([*_columns(header, lines), *notes])


def format_table(report: SweepReport) -> str:
    """The seed table when a configuration ran with several seeds, else the run table."""
    several = any(len(p) > 1 for p in configurations(report.sweep.points).values())
    return seed_table(report) if several else run_table(report)


def plots_line(paths: list[Path]) -> str:
    """``plots: DIR/ (loss-time, breakdown; .png .svg .pdf)``: the figures, once each."""
    stems = list(dict.fromkeys(p.stem for p in paths))
    suffixes = list(dict.fromkeys(p.suffix for p in paths))
    return f"plots: {paths[0].parent}/ ({', '.join(stems)}; {' '.join(suffixes)})"


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def main(args: argparse.Namespace) -> int:
    import sys

    from sim.commands.run import default_out
    from sim.sweep import run_sweep

    out = args.out or default_out(args.config)
    report = run_sweep(args.config, out, args.overrides, jobs=args.jobs,
                       scheduler=args.scheduler, plots=args.plots, seeds=args.seeds,
                       quick=quick.enabled())
    done = len(report.rows)
    for line in report.sweep.warnings:
        print(f"warning: {line}", file=sys.stderr)
    print(f"sweep {args.config}: {len(report.sweep.points)} runs "
          f"({len(report.ran)} ran, {len(report.skipped)} already done, "
          f"{len(report.failed)} failed)")
    print(format_table(report))
    for point in report.sweep.points:
        if point.name in report.failed:
            print(f"failed: {point.name}: {report.failed[point.name]}", file=sys.stderr)
    print(f"results: {report.results_csv} ({done} rows); runs in {out / 'runs'}/")
    if report.plots:
        print(plots_line(report.plots))
    for note in report.plot_notes:
        print(f"note: {note}")
    if report.failed:
        print(f"{len(report.failed)} run(s) failed; fix the cause and rerun the same command "
              f"to finish them", file=sys.stderr)
        return 1
    return 0
