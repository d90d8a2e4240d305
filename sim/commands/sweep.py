"""``python -m sim sweep CONFIG [--out DIR] [--set k=v ...] [--jobs N] [--scheduler ADDRESS]``.

Runs the config's ``[sweep]`` grid (times ``run.seeds``) into ``DIR/runs/<name>/`` and writes
``DIR/results.csv``. Killed and started again with the same command, it finishes the rest.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.sweep import SweepReport

SHOWN = ("final_loss", "time_to_target_s", "sim_time_s", "samples_per_s")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", type=Path, help="experiment config (TOML) with a [sweep] table")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="sweep directory (default: runs/<config name>); an existing one "
                             "made by the same sweep is resumed")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="override a config key before expansion, e.g. run.iterations=50, "
                             "sweep.cluster.workers=[2,4] or run.seeds=[1,2,3]")
    parser.add_argument("--jobs", type=int, metavar="N",
                        help="local worker processes (default: the CPU count)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="run on a Dask distributed cluster, e.g. tcp://host:8786")
    parser.add_argument("--no-plots", dest="plots", action="store_false",
                        help="skip the comparison plots")


def format_table(report: SweepReport) -> str:
    rows = {row["run"]: row for row in report.rows}
    names = [p.name for p in report.sweep.points]
    width = max(map(len, ["run", *names]))
    lines = [f"  {'run':<{width}}  " + "  ".join(f"{k:>13}" for k in SHOWN)]
    for name in names:
        row = rows.get(name)
        if row is None:
            cells = "FAILED" if name in report.failed else "not run"
        else:
            cells = "  ".join(f"{_fmt(row.get(k)):>13}" for k in SHOWN)
            cells += "  diverged" if row.get("diverged") else ""
        lines.append(f"  {name:<{width}}  {cells}")
    return "\n".join(lines)


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
                       scheduler=args.scheduler, plots=args.plots)
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
        print("plots: " + ", ".join(map(str, report.plots)))
    if report.failed:
        print(f"{len(report.failed)} run(s) failed; fix the cause and rerun the same command "
              f"to finish them", file=sys.stderr)
        return 1
    return 0
