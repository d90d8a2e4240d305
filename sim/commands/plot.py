"""``python -m sim plot DIR [DIR ...] [--out DIR] [--kind KINDS] [--logx] [--xlim LO,HI]``.

Figures from results: DIR is a run directory or a sweep directory (with ``results.csv``;
its runs are plotted). Each figure is written as PNG, SVG and PDF.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from sim.errors import UserError

KIND_HELP = "comma-separated plot kinds (listed below) or all (default: all)"


def kinds_epilog() -> str:
    """Every plot kind with its one line, for the help's epilog."""
    from sim.plots.kinds import KIND_LINES

    width = max(map(len, KIND_LINES))
    return "plot kinds:\n" + "\n".join(f"  {kind:<{width}}  {line}"
                                        for kind, line in KIND_LINES.items())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = kinds_epilog()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("dirs", type=Path, nargs="+", metavar="DIR",
                        help="run directory or sweep directory (has results.csv)")
    parser.add_argument("--out", type=Path,
                        help="where figures go (default: DIR/plots for one DIR, else "
                             "plots/ in the DIRs' common parent)")
    parser.add_argument("--kind", default="all", help=KIND_HELP)
    parser.add_argument("--window-s", type=float, metavar="SECONDS",
                        help="gantt: show the first SECONDS of simulated time "
                             "(default: as long as each worker has at most 40 slices)")
    parser.add_argument("--logx", action="store_true", default=None,
                        help="loss plots: a logarithmic x axis (default: chosen when the "
                             "runs' time spans differ by more than 10x)")
    parser.add_argument("--xlim", metavar="LO,HI",
                        help="loss-time: the x range in seconds, e.g. 0,0.005 (either side "
                             "may be left empty; a negative LO needs '=': --xlim=-1e-3,5e-3)")


def default_out(dirs: list[Path]) -> Path:
    if len(dirs) == 1:
        return dirs[0] / "plots"
    return Path(os.path.commonpath([d.resolve() for d in dirs])) / "plots"


def main(args: argparse.Namespace) -> int:
    from sim import plots

    plots.parse_kinds(args.kind)  # bad options fail before any work
    xlim = plots.parse_xlim(args.xlim) if args.xlim is not None else None
    if args.logx and xlim and xlim[0] is not None and xlim[0] <= 0:
        raise UserError(f"--xlim {args.xlim}: a log x axis (--logx) needs LO > 0")
    out = args.out or default_out(args.dirs)
    notes: list[str] = []
    written = plots.plot_runs(args.dirs, out, args.kind, gantt_window_s=args.window_s,
                              logx=args.logx, xlim=xlim, notes=notes)
    print(f"wrote {len(written)} files into {out}/:")
    for path in written:
        print(f"  {path.name}")
    for note in notes:
        print(f"note: {note}")
    return 0
