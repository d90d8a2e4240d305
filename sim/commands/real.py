"""``python -m sim real CONFIG [--out DIR] [--set ...]``: the experiment on real MPI ranks."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sim import quick
from sim.commands import add_set_option
from sim.config import Config
from sim.names import CONFIG_HELP, config_path
from sim.real.launch.other_load import MAX_OTHER_LOAD
from sim.training.parallel_plan import split_key
from sim.training.validator import load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", type=config_path, help=CONFIG_HELP)
    parser.add_argument("--out", type=Path, help="run directory (default: runs/<config>-real)")
    add_set_option(parser, "cluster.workers=2")
    parser.add_argument("--net", default="shm", metavar="NET",
                        help="shm (shared memory, default) or emulate:RATE, e.g. emulate:1gbit "
                             "(root: a network namespace per rank, tbf-shaped links, MPI on TCP)")
    parser.add_argument("--transport", metavar="TRANSPORT",
                        help="set cluster.transport: mpi (default) or grpc (the parameter-server "
                             "strategies' pushes and pulls over gRPC; MPI still launches the "
                             "ranks)")
    parser.add_argument("--allreduce", dest="impl", default="schedule",
                        choices=["schedule", "mpi"],
                        help="bsp: run the simulator's strategy.collective schedule over "
                             "point-to-point messages (default), or MPI's own Allreduce")
    parser.add_argument("--wait", default="auto", choices=["auto", "spin", "sleep"],
                        help="how waiting ranks wait: spin in MPI, or poll and nap; auto naps "
                             "only when ranks outnumber cores and gradients are real kernels "
                             "(no compute.time_s)")
    parser.add_argument("--sched", default="default", choices=["default", "fifo"],
                        help="how ranks share this machine's cores: default (Linux's "
                             "scheduler) or fifo (each rank pinned to core rank mod cores, "
                             "SCHED_FIFO: it keeps its core until it waits, and waits nap; "
                             "the default scheduler, with a warning, where refused)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run it N times (OUT/r0 ... OUT/rN-1) to see the real spread")
    parser.add_argument("--timeout", dest="timeout_s", type=float, default=1800.0,
                        help="stop every rank after this many seconds (default 1800)")
    parser.add_argument("--hang-timeout", dest="hang_s", type=float, default=60.0,
                        help="stop every rank when one makes no progress for this long "
                             "(default 60 s; must exceed the longest step)")
    parser.add_argument("--twin", action="store_true",
                        help="then simulate the run's twin on this machine's calibrated device, "
                             "fabric and host (measured after the run into OUT/profiles) and "
                             "compare: OUT/twin/, OUT/twin/comparison.json")
    parser.add_argument("--profiles", type=Path, metavar="DIR",
                        help="--twin: reuse the profiles in DIR (a `sim validate --out`'s "
                             "profiles/ or an earlier twin's OUT/profiles) instead of measuring")
    parser.add_argument("--quick", action="store_true",
                        help="--twin: a rough calibration (fewer sizes and repetitions; "
                             "nothing without --twin)")


def format_repeats(summaries: list[dict], target_loss: float | None = None) -> str:
    """The repeats' figures, labelled as wall-clock: each shown key's mean over the repeats,
    with their min .. max when there are several (sim_time_s is the run's wall-clock time
    here, so it is shown as run_time_s)."""
    from sim.commands.run import SHOWN, format_summary
    from sim.stats import mean_ci

    n = len(summaries)
    mean = dict(summaries[-1])
    spread: dict[str, str] = {}
    for key in SHOWN:
        values = [s.get(key) for s in summaries]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            mean[key] = mean_ci(values).mean
            if n > 1:
                spread[key] = f"  ({min(values):.6g} .. {max(values):.6g})"
    lines = format_summary(mean, target_loss).replace("  sim_time_s ", "  run_time_s ").splitlines()
    shown = [line + spread.get(line.split()[0].replace("run_time_s", "sim_time_s"), "")
             for line in lines]
    what = f"mean of {n} repeats (min .. max)" if n > 1 else "one run"
    return "\n".join([f"  wall-clock seconds, {what}:", *shown])


def main(args: argparse.Namespace) -> int:
    from sim.errors import UserError
    from sim.real.launch.launcher import RunFailed
    from sim.real.launch.real_run import RealOptions, run_real
    from sim.results import iteration_s

    if args.profiles and not args.twin:
        raise UserError("--profiles goes with --twin")
    config = load_config(args.config, overrides(args), quick=quick.enabled())
    out = args.out or Path("runs") / f"{args.config.stem}-real"
    if args.profiles:  # checked before the real run, not after it
        from sim.validation.twin import stored

        stored(config, args.net, args.profiles)
    options = RealOptions(args.net, args.impl, args.wait, args.timeout_s, args.hang_s,
                          args.repeat, args.sched)

    def progress(repeat: int, summary: dict) -> None:
        if args.repeat > 1:
            per = iteration_s(summary)
            timing = "no updates" if per is None else f"{per * 1e3:.3f} ms per update"
            print(f"  repeat {repeat}: {timing}", flush=True)

    try:
        summaries = run_real(config, out, options, progress)
    except RunFailed as exc:
        print(f"error: real run failed: {exc}", file=sys.stderr)
        return 1
    print(f"{config.strategy.kind} on {placement(config, summaries[-1])} ({args.net}), "
          f"{config.workload.model}/{config.workload.dataset}:")
    print(format_repeats(summaries, config.run.target_loss))
    shown = "r0 ... " if args.repeat > 1 else ""
    print(f"results: {out}/ {shown}(config.toml, summary.json, metrics.csv, trace.json)")
    for line in load_warnings(summaries):
        print(line, file=sys.stderr)
    if args.twin:
        twin(config, args, out)
    return 0


def overrides(args: argparse.Namespace) -> list[str]:
    """The --set overrides, then ``--transport``'s (it wins over a --set of the key)."""
    if args.transport is None:
        return list(args.overrides)
    return [*args.overrides, f"cluster.transport={json.dumps(args.transport)}"]


def twin(config: Config, args: argparse.Namespace, out: Path) -> None:
    """Simulate the run's twin and print the comparison (``--twin``)."""
    from sim.validation.sim_vs_real import format_report
    from sim.validation.twin import TWIN, run_twin

    report = run_twin(config, str(args.config), out, args.net, args.profiles, args.quick,
                      say=lambda text: print(text, flush=True))
    print(format_report(report))
    print(f"twin: {out / TWIN}/ (its profiles: {args.profiles or out / 'profiles'}; "
          f"comparison.json, report.png)")


def placement(config: Config, summary: dict) -> str:
    """Where the run ran: ``2 real workers``, or for split replicas ``2 real replicas x 2
    stages x 1 shard (4 ranks)``."""
    workers, ranks = config.cluster.workers, summary.get("ranks", config.cluster.workers)
    if split_key(config) is None:
        return f"{workers} real workers"
    par = config.parallel
    return (f"{workers} real replica{'s' * (workers > 1)} x {par.pipeline} "
            f"stage{'s' * (par.pipeline > 1)} x {par.tensor} shard{'s' * (par.tensor > 1)} "
            f"({ranks} ranks, {par.microbatches} microbatch{'es' * (par.microbatches > 1)})")


def load_warnings(summaries: list[dict]) -> list[str]:
    """A warning per repeat during which other processes took more than
    ``MAX_OTHER_LOAD`` of the CPUs: the real times then include waiting for them."""
    return [f"warning: other processes used {s['other_load']:.0%} of the CPUs during "
            f"{'the run' if len(summaries) == 1 else f'repeat {i}'}; its times include "
            "waiting for them (rerun on a quiet machine, or compare with --repeat)"
            for i, s in enumerate(summaries) if s.get("other_load", 0.0) > MAX_OTHER_LOAD]
