"""``python -m sim compare SIM_DIR REAL_DIR [--out DIR] [--replay]``: how well the simulation
predicted, end to end and (``--replay``) with the real run's own compute replayed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sim_dir", type=Path, help="a simulated run (sim run)")
    parser.add_argument("real_dir", type=Path,
                        help="a real run, or the repeats of one (sim real --repeat N)")
    parser.add_argument("--out", type=Path,
                        help="report directory (default: REAL_DIR-compare); gets report.json "
                             "and the figure report.png (also .svg and .pdf)")
    parser.add_argument("--no-plot", action="store_true", help="write report.json only")
    parser.add_argument("--replay", action="store_true",
                        help="also simulate each real repeat again with its own compute, "
                             "data and update times replayed (OUT/replay/r<K>): the error "
                             "left is the model's coordination, not the machine's speed")


def main(args: argparse.Namespace) -> int:
    from sim.rundir import write_atomic
    from sim.validation.sim_vs_real import compare, format_report

    report = compare(args.sim_dir, args.real_dir)
    out = args.out or args.real_dir.with_name(args.real_dir.name + "-compare")
    out.mkdir(parents=True, exist_ok=True)
    if args.replay:
        from sim.validation.replay import replay_dirs

        report["replay"] = replay_dirs(args.sim_dir, args.real_dir, out / "replay")
    write_atomic(out / "report.json", json.dumps(report, indent=2) + "\n")
    figures: list[Path] = []
    if not args.no_plot:
        from sim.validation.compare_plot import plot_report

        figures = plot_report(report, out)
    print(format_report(report))
    print(", ".join(map(str, [f"report: {out / 'report.json'}", *figures])))
    return 0
