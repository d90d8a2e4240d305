"""``python -m sim calibrate --out DIR [--net ...]``: profiles of this machine for the simulator.

Writes ``DIR/fabric.json`` (``cluster.fabric = "calibrated:DIR/fabric.json"``),
``DIR/device.json`` (``compute.device = "calibrated:DIR/device.json"``),
``DIR/host.json`` (``cluster.host = "calibrated:DIR/host.json"``), and
``DIR/storage.json`` (``checkpoint.storage = "calibrated:DIR/storage.json"``, checkpoint
files written and read in DIR) with ``DIR/recovery.json`` (``faults.restart_s``), and
``DIR/transport.json`` (``cluster.transport = "calibrated:DIR/transport.json"``: gRPC over
loopback, :mod:`sim.real.calibration.transport_bench`; a few seconds, so a plain run measures
it too, last).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sim.errors import UserError
from sim.names import config_path, unknown
from sim.training.compute_model import describe_rates


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
    from sim.network.collectives import REGISTRY
    from sim.real.calibration import suite as C
    from sim.real.launch.launcher import RunFailed
    from sim.real.launch.other_load import OtherLoad
    from sim.real.launch.real_run import network, terminated_cleanly
    from sim.training.validator import load_config

    if args.from_runs:
        return from_runs(args)
    ranks = parse_ranks(args.ranks)
    allreduces = [n for n, cls in REGISTRY.items() if cls.kind == "allreduce" and n != "ps"]
    if args.collective not in allreduces:
        raise UserError(f"--collective: {unknown('allreduce', args.collective, allreduces)}")
    if args.concurrency < 1:
        raise UserError("--concurrency must be at least 1")
    if args.host_repeats is not None and args.host_repeats < 1:
        raise UserError(f"--host-repeats must be at least 1, got {args.host_repeats}")
    workloads = [load_config(p) for p in args.workloads] or C.default_workloads()
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {args.out}: cannot make the directory "
                        f"({exc.strerror or exc})") from None
    if args.only in (None, "compute"):
        with OtherLoad() as load:
            points = C.measure_kernels(workloads, args.concurrency,
                                       0.05 if args.quick else 0.2)
        warn_load("compute", load.fraction)
        device = C.write_device(args.out / "device.json", points, args.concurrency)
        rates = describe_rates(device["flops_per_s"], device["overhead_s"],
                               device["memory_Bps"], device["lookup_s"],
                               device["activation_Bps"])
        print(f"compute: {rates} "
              f"(fit errors {min(device['errors']):+.1%} .. {max(device['errors']):+.1%})")
        for p in points:
            print(f"  {p['workload']:<34} {p['seconds'] * 1e6:9.1f} us  {p['error']:+.1%}")
        warn_fit("compute", [(p["workload"], p["error"]) for p in points])
        warn_undetermined(device, len(points))
        print(f'  compute.device = "calibrated:{args.out / "device.json"}"')
    fabric_overhead_s, fabric_Bps = 0.0, float("inf")
    if args.only == "host" and (args.out / "fabric.json").exists():  # calibrated before
        data = json.loads((args.out / "fabric.json").read_text())
        fabric_overhead_s, fabric_Bps = data["overhead_s"], data["bandwidth_Bps"]
    if args.only in (None, "network"):
        try:
            with terminated_cleanly(), network(args.net, max(ranks)) as emulation, \
                    OtherLoad() as load:
                measured = C.measure_network(emulation, ranks, args.wait, args.collective,
                                             args.quick)
        except RunFailed as exc:
            print(f"error: network measurement failed: {exc}", file=sys.stderr)
            return 1
        warn_load("network", load.fraction)
        fit = C.fit_network(measured)
        fabric = C.write_fabric(args.out / "fabric.json", args.net, measured, fit)
        errors = [p["error"] for p in fit["points"] if "not fitted" not in p["what"]]
        print(f"network ({args.net}): alpha {fit['alpha_s'] * 1e6:.2f} us, "
              f"{fabric.bandwidth_Bps / 1e9:.3f} GB/s, o {fit['overhead_s'] * 1e6:.2f} us, "
              f"latency {fit['latency_s'] * 1e6:.2f} us/hop "
              f"(fit errors {min(errors):+.0%} .. {max(errors):+.0%})")
        for p in fit["points"]:
            print(f"  {p['what']:<41} {p['measured_s'] * 1e6:11.1f} us  {p['error']:+.0%}")
        warn_fit("network", [(p["what"], p["error"]) for p in fit["points"]
                             if "not fitted" not in p["what"]])
        print(f'  cluster.fabric = "calibrated:{args.out / "fabric.json"}"')
        fabric_overhead_s, fabric_Bps = fabric.overhead_s, fabric.bandwidth_Bps
    if args.only in (None, "host"):
        from sim.real.calibration.host import calibrate_host

        try:
            lines = calibrate_host(args.out / "host.json", args.quick, args.wait,
                                   fabric_overhead_s, fabric_Bps, args.concurrency,
                                   args.host_repeats)
        except RunFailed as exc:
            print(f"error: host measurement failed: {exc}", file=sys.stderr)
            return 1
        print("\n".join(lines))
    if args.only in (None, "recovery"):
        from sim.real.calibration.restart_costs import calibrate_recovery

        configs = [load_config(p) for p in args.workloads] or [C.default_workloads()[1]]
        try:
            print("\n".join(calibrate_recovery(args.out, configs, args.quick)))
        except RunFailed as exc:
            print(f"error: restart measurement failed: {exc}", file=sys.stderr)
            return 1
    if args.only in (None, "transport"):  # last: it loads grpc into this process
        return transport(args.out / "transport.json", args.quick)
    return 0


def transport(path: Path, quick: bool) -> int:
    """gRPC over loopback: ``path`` written, its fitted values and how to use it printed."""
    from sim.real.calibration.transport_bench import calibrate_transport
    from sim.real.launch.other_load import OtherLoad

    try:
        with OtherLoad() as load:
            _, lines, errors = calibrate_transport(path, quick)
    except RuntimeError as exc:
        print(f"error: transport measurement failed: {exc}", file=sys.stderr)
        return 1
    warn_load("transport", load.fraction)
    print("\n".join(lines))
    warn_fit("transport", errors)
    return 0


def from_runs(args: argparse.Namespace) -> int:
    """``--from-runs``: the device fitted to real runs' in-run gradient times, and the
    host's server code to their servers' times."""
    from sim.real.calibration.from_runs import real_run_dirs, runs_device, write_device_from_runs

    prior = runs_device(real_run_dirs(args.from_runs))
    device = write_device_from_runs(args.out / "device.json", args.from_runs, prior)
    rates = describe_rates(device["flops_per_s"], device["overhead_s"], device["memory_Bps"],
                           device["lookup_s"], device["activation_Bps"])
    print(f"compute, from in-run gradient times: {rates}"
          + (f" (pulled weakly towards {prior})" if prior else ""))
    for p in device["points"]:
        print(f"  {p['workload']:<34} {p['seconds'] * 1e6:9.1f} us  {p['error']:+.1%}  "
              f"({p['runs']} run(s))")
    warn_fit("compute", [(p["workload"], p["error"]) for p in device["points"]])
    print(f'  compute.device = "calibrated:{args.out / "device.json"}"')
    serving_from_runs(args.from_runs, args.out / "host.json")
    return 0


def serving_from_runs(paths: list[Path], out: Path) -> None:
    """The host profile the runs name, with its server's code fitted to their servers'
    times, written to ``out`` (nothing without a run whose server had a core of its own)."""
    from sim.real.calibration.from_runs import real_run_dirs
    from sim.validation.fit_serving import fit_points, runs_host, serving_points, with_serving

    points = serving_points(real_run_dirs(paths))
    if not points:
        print("host: no run had a parameter server with a core per rank over MPI; "
              "host.json not written")
        return
    prior = runs_host(points)
    fit = fit_points(points, prior)
    with_serving(prior, fit, out)
    print(f"host, the server's code from the servers' time per update in {len(points)} "
          f"case(s) (the rest as in {prior}):")
    for name, value in fit["values"].items():
        print(f"  {name:<14} {value * 1e6:7.1f} us")
    for p in fit["points"]:
        real = sum(p["real_s"].values())
        print(f"  {p['runs']:<50} {real * 1e6:8.1f} us an update  {p['error']:+.1%}")
    warn_fit("server's code", [(p["runs"], p["error"]) for p in fit["points"]])
    print(f'  cluster.host = "calibrated:{out}"')


def warn_fit(name: str, errors: list[tuple[str, float]]) -> None:
    """A warning on stderr when a fit misses a measured point by more than ``MAX_ERROR``."""
    from sim.real.calibration.host import MAX_ERROR

    what, worst = max(errors, key=lambda e: abs(e[1]), default=("", 0.0))
    if abs(worst) > MAX_ERROR:
        print(f"warning: the {name} fit is off by {worst:+.0%} at {what} (more than "
              f"{MAX_ERROR:.0%}): the machine may have been busy, or the model does not "
              "fit this machine; rerun (without --quick) before trusting it", file=sys.stderr)


def warn_undetermined(device: dict, points: int) -> None:
    """A warning on stderr when the device fit has as many terms as points: it then goes
    through them whatever the terms' values, and a rate may be far from the device's."""
    terms = 1 + (device["overhead_s"] > 0) + sum(
        device[key] is not None for key in ("memory_Bps", "activation_Bps", "lookup_s"))
    if points <= terms:
        print(f"warning: the compute fit has {terms} terms for {points} points, so its rates "
              "are not each determined (it only reproduces the workloads timed); time more "
              "workloads (the default set, or more --workload) before simulating others",
              file=sys.stderr)


def warn_load(name: str, other: float) -> None:
    """A warning on stderr when other processes took more than ``MAX_OTHER_LOAD`` of the
    CPUs while ``name`` was measured (their time would be measured as this machine's)."""
    from sim.real.launch.other_load import MAX_OTHER_LOAD

    if other > MAX_OTHER_LOAD:
        print(f"warning: other processes used {other:.0%} of the CPUs while the {name} "
              "costs were measured; rerun on a quiet machine", file=sys.stderr)
