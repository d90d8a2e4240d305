"""``python -m sim calibrate --out DIR [--net ...]``: profiles of this machine for the simulator.

Writes ``DIR/fabric.json`` (``cluster.fabric = "calibrated:DIR/fabric.json"``),
``DIR/device.json`` (``compute.device = "calibrated:DIR/device.json"``),
``DIR/host.json`` (``cluster.host = "calibrated:DIR/host.json"``), and
``DIR/storage.json`` (``checkpoint.storage = "calibrated:DIR/storage.json"``, checkpoint
files written and read in DIR) with ``DIR/recovery.json`` (``faults.restart_s``), and
``DIR/transport.json`` (``cluster.transport = "calibrated:DIR/transport.json"``: gRPC over
loopback, :mod:`sim.calibration.transport_bench`; a few seconds, so a plain run measures it
too, last). The measuring, fitting and writing are :mod:`sim.calibration`'s
(:func:`sim.calibration.sequence.calibrate`); this command reads the flags into a plan.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sim.errors import UserError
from sim.names import config_path, unknown

if TYPE_CHECKING:
    from sim.calibration.sequence import Plan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True,
                        help="directory for fabric.json, device.json, host.json, "
                             "storage.json, recovery.json and transport.json")
    parser.add_argument("--net", default="shm",
                        help="network to measure: shm (default) or emulate:RATE")
    parser.add_argument("--ranks", default="2,4",
                        help="allreduce measured on these rank counts (default 2,4; counts "
                             "above the number of cores are shown but not fitted)")
    parser.add_argument("--collective", default="ring",
                        help="allreduce schedule measured and fitted (default ring)")
    parser.add_argument("--workload", dest="workloads", action="append", default=[],
                        type=config_path, metavar="CONFIG",
                        help="time this config's gradient (a TOML file or an experiment's "
                             "name; repeatable; default: a built-in set of logreg, softmax "
                             "and MLP sizes)")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="time kernels and the host's vector costs in this many "
                             "processes at once (default 1)")
    parser.add_argument("--only", choices=["network", "compute", "host", "recovery",
                                           "transport"],
                        help="measure only the network, the kernels, the host's CPU costs, "
                             "checkpoint files and restarts (bsp jobs of each --workload, "
                             "killed and started again) or gRPC's per-message and per-byte "
                             "costs over loopback (transport.json, a few seconds; a plain "
                             "run measures it too)")
    parser.add_argument("--host-repeats", type=int, default=None, metavar="K",
                        help="measure the host's CPU costs K times and fit each cost to "
                             "every timed point's median (default 3; 1 with --quick)")
    parser.add_argument("--wait", default="auto", choices=["auto", "spin", "sleep"],
                        help="how ranks wait, as for `sim real` (default auto)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer sizes and repetitions (a rough profile in seconds)")
    parser.add_argument("--from-runs", nargs="+", type=Path, metavar="RUN_DIR",
                        help="measure nothing: fit OUT/device.json to the gradient times real "
                             "runs recorded, and OUT/host.json's server code to their "
                             "servers' times (run directories, --repeat directories or a "
                             "`sim validate --out`)")


def parse_ranks(text: str) -> list[int]:
    try:
        ranks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        ranks = []
    if not ranks or min(ranks) < 2:
        raise UserError(f"--ranks {text!r}: expected rank counts >= 2, e.g. 2,4")
    return ranks


def main(args: argparse.Namespace) -> int:
    from sim.calibration.report import Printed
    from sim.calibration.sequence import calibrate
    from sim.real.launch.launcher import RunFailed

    if args.from_runs:
        return from_runs(args)
    plan = plan_of(args)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {args.out}: cannot make the directory "
                        f"({exc.strerror or exc})") from None
    # the failures a phase reports in one line: what failed, and the error it raised
    failures = {"network": ("network", RunFailed), "host": ("host", RunFailed),
                "recovery": ("restart", RunFailed), "transport": ("transport", RuntimeError)}
    report = Printed()
    try:
        calibrate(plan, args.out, report)
    except RuntimeError as exc:
        what, kind = failures.get(report.phase or "", ("", ()))
        if not isinstance(exc, kind):
            raise
        print(f"error: {what} measurement failed: {exc}", file=sys.stderr)
        return 1
    return 0


def plan_of(args: argparse.Namespace) -> Plan:
    """The calibration the flags ask for. Raises UserError for a bad flag."""
    from sim.calibration.measure_device import default_workloads
    from sim.calibration.sequence import PHASES, Plan
    from sim.network.collectives import REGISTRY
    from sim.training.validator import load_config

    ranks = parse_ranks(args.ranks)
    allreduces = [n for n, cls in REGISTRY.items() if cls.kind == "allreduce" and n != "ps"]
    if args.collective not in allreduces:
        raise UserError(f"--collective: {unknown('allreduce', args.collective, allreduces)}")
    if args.concurrency < 1:
        raise UserError("--concurrency must be at least 1")
    if args.host_repeats is not None and args.host_repeats < 1:
        raise UserError(f"--host-repeats must be at least 1, got {args.host_repeats}")
    workloads = [load_config(p) for p in args.workloads]
    return Plan(workloads=workloads or default_workloads(),
                phases=PHASES if args.only is None else (args.only,),
                nets=(args.net,), ranks=tuple(ranks), collective=args.collective,
                wait=args.wait, concurrency=args.concurrency,
                kernel_time_s=0.05 if args.quick else 0.2, host_repeats=args.host_repeats,
                host_net=args.net, restarts=workloads or [default_workloads()[1]],
                quick=args.quick)


def from_runs(args: argparse.Namespace) -> int:
    """``--from-runs``: the device fitted to real runs' in-run gradient times, and the
    host's server code to their servers' times."""
    from sim.calibration.from_runs import real_run_dirs, runs_device, write_device_from_runs
    from sim.calibration.report import from_runs_lines

    prior = runs_device(real_run_dirs(args.from_runs))
    device = write_device_from_runs(args.out / "device.json", args.from_runs, prior)
    from_runs_lines(device, prior, args.out / "device.json")
    serving_from_runs(args.from_runs, args.out / "host.json")
    return 0


def serving_from_runs(paths: list[Path], out: Path) -> None:
    """The host profile the runs name, with its server's code fitted to their servers'
    times, written to ``out`` (nothing without a run whose server had a core of its own)."""
    from sim.calibration.fit_serving import fit_points, runs_host, serving_points, with_serving
    from sim.calibration.from_runs import real_run_dirs
    from sim.calibration.report import serving_lines

    points = serving_points(real_run_dirs(paths))
    if not points:
        print("host: no run had a parameter server with a core per rank over MPI; "
              "host.json not written")
        return
    prior = runs_host(points)
    fit = fit_points(points, prior)
    with_serving(prior, fit, out)
    serving_lines(fit, len(points), prior, out)
