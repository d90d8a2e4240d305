"""``python -m sim plot DIR [DIR ...] [--out DIR] [--kind KINDS]``: figures from results.

DIR is a run directory or a sweep directory (with ``results.csv``; its runs are plotted).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

KIND_HELP = ("comma-separated plot kinds: loss-time, loss-updates, staleness, gantt, "
             "breakdown, scaling, or all (default: all)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dirs", type=Path, nargs="+", metavar="DIR",
                        help="run directory or sweep directory (has results.csv)")
    parser.add_argument("--out", type=Path,
                        help="where figures go (default: DIR/plots for one DIR, else "
                             "plots/ in the DIRs' common parent)")
    parser.add_argument("--kind", default="all", help=KIND_HELP)
    parser.add_argument("--window-s", type=float, metavar="SECONDS",
                        help="gantt: show the first SECONDS of simulated time "
                             "(default: as long as each worker has at most 40 slices)")


def default_out(dirs: list[Path]) -> Path:
    if len(dirs) == 1:
        return dirs[0] / "plots"
    return Path(os.path.commonpath([d.resolve() for d in dirs])) / "plots"


def main(args: argparse.Namespace) -> int:
    from sim import plots

    plots.parse_kinds(args.kind)  # a bad kind fails before any work
    out = args.out or default_out(args.dirs)
    written = plots.plot_runs(args.dirs, out, args.kind, gantt_window_s=args.window_s)
    print(f"wrote {len(written)} files into {out}/:")
    for path in written:
        print(f"  {path.name}")
    return 0
