"""``python -m sim validate``: the validation matrix, simulated and real, and its README."""

from __future__ import annotations

import argparse
from pathlib import Path

VALIDATION = Path(__file__).resolve().parents[2] / "experiments" / "validation"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--matrix", type=Path, default=VALIDATION / "matrix.toml",
                        help="the matrix (default experiments/validation/matrix.toml)")
    parser.add_argument("--out", type=Path,
                        help="results: profiles/, cases/, rows.json (default runs/validation; "
                             "with --resimulate DIR: DIR-resimulated)")
    parser.add_argument("--readme", type=Path,
                        help="the report (default: README.md beside the matrix)")
    parser.add_argument("--only", action="append", default=[], metavar="AXIS=LEVEL",
                        help="run only cases with this level (repeatable), e.g. workers=2")
    parser.add_argument("--repeat", type=int, help="real repeats per case (default: matrix)")
    parser.add_argument("--profiles", type=Path,
                        help="reuse the calibration in this directory (a previous --out's "
                             "profiles/) instead of measuring")
    parser.add_argument("--resimulate", type=Path, metavar="DIR",
                        help="no real runs: simulate every case again against the real runs "
                             "an earlier --out DIR holds (on DIR/profiles unless --profiles); "
                             "the report goes to OUT/README.md")
    parser.add_argument("--fit-on", action="append", default=[], metavar="AXIS=LEVEL",
                        help="with --resimulate: fit the device and the server's code to the "
                             "real runs of the cases with these levels (repeatable), simulate "
                             "every case on them and on the microbenchmark profiles, and "
                             "report in-sample against held-out errors (OUT/README.md)")
    parser.add_argument("--spread", type=int, default=0, metavar="SEEDS",
                        help="with --fit-on: simulate each case with real kernels SEEDS times, "
                             "drawing gradient times and each run's machine speed with the "
                             "spreads measured in the fit's runs, and report how often the "
                             "real mean lies inside the predicted 90%% interval")
    parser.add_argument("--sched", default="default", choices=["default", "fifo"],
                        help="the real repeats' scheduling discipline (sim real --sched), "
                             "and their twins' (cluster.sched); cases whose ranks cannot "
                             "keep to fifo (faults, gRPC) run under the default")
    parser.add_argument("--quick", action="store_true",
                        help="a rough calibration (fewer message sizes and repetitions)")
    parser.add_argument("--quiet-load", type=float, default=0.10,
                        help="other processes' share of the CPUs that a real repeat tolerates: "
                             "it waits for less before starting, and is taken again if there "
                             "was more during it (default 0.10)")
    parser.add_argument("--quiet-wait", type=float, default=10.0,
                        help="wait at most this many seconds for a quiet machine (default 10)")
    parser.add_argument("--recalibrate-every", type=int, default=15, metavar="CASES",
                        help="measure the device again after every CASES cases and simulate "
                             "each case on the calibration nearest its real repeats, so the "
                             "machine's drift moves both sides (default 15; 0: calibrate "
                             "once, at the start)")
    parser.add_argument("--retries", type=int, default=2,
                        help="take a disturbed repeat again at most this often (default 2)")


def main(args: argparse.Namespace) -> int:
    from sim.errors import UserError
    from sim.real.launch.real_run import terminated_cleanly
    from sim.validation.matrix import run_matrix

    if args.repeat is not None and args.repeat < 1:
        raise UserError("--repeat must be at least 1")
    if args.recalibrate_every < 0:
        raise UserError("--recalibrate-every must be >= 0 (0: calibrate once)")
    if args.spread < 0 or (args.spread and not args.fit_on):
        raise UserError("--spread SEEDS: a count >= 0, with --fit-on (its spread is the fit's)")
    if args.fit_on and args.resimulate is None:
        raise UserError("--fit-on goes with --resimulate DIR (the real runs to fit and predict)")
    if args.resimulate is not None:
        return resimulate(args)
    readme = args.readme or args.matrix.with_name("README.md")
    out = args.out or Path("runs") / "validation"
    with terminated_cleanly():
        rows = run_matrix(args.matrix, out, readme, args.only, args.repeat,
                          args.profiles, (args.quiet_load, args.quiet_wait),
                          say=lambda text: print(text, flush=True), quick=args.quick,
                          retries=max(args.retries, 0),
                          recalibrate_every=args.recalibrate_every, sched=args.sched)
    failed = sum("error" in row for row in rows)
    print(f"{len(rows) - failed}/{len(rows)} cases done; report: {readme}")
    return 0


def resimulate(args: argparse.Namespace) -> int:
    """``--resimulate DIR``: the cases simulated again against DIR's real runs."""
    from sim.validation.resimulate import resimulate_matrix
    from sim.validation.validate_report import summary_lines

    out = args.out or args.resimulate.with_name(args.resimulate.name + "-resimulated")
    if args.fit_on:
        from sim.validation.cross_validation import cross_validate

        cross_validate(args.matrix, args.resimulate, out, args.only, args.profiles,
                       args.fit_on, say=lambda text: print(text, flush=True),
                       seeds=args.spread)
        print((out / "README.md").read_text())
        return 0
    readme = args.readme or out / "README.md"
    rows = resimulate_matrix(args.matrix, args.resimulate, out, readme, args.only,
                             args.profiles, say=lambda text: print(text, flush=True))
    for line in summary_lines(rows):
        print(line)
    print(f"{len(rows)} case(s) simulated again against {args.resimulate}'s real runs; "
          f"report: {readme}")
    return 0
