"""``python -m sim run CONFIG [--out DIR] [--set key=value ...]``: one experiment."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim import quick
from sim.commands import add_set_option
from sim.config import Config
from sim.errors import UserError
from sim.names import CONFIG_HELP, config_path
from sim.progress import Progress, Stopped, shielded, stop_on_signals
from sim.rundir import check_out_dir, write_run
from sim.training.config_warnings import config_warnings
from sim.training.validator import load_config

SHOWN = ("sim_time_s", "iterations", "final_loss", "final_accuracy", "time_to_target_s",
         "samples_per_s", "staleness_mean", "staleness_max", "compute_s", "comm_s", "wait_s",
         "events", "wall_s")
# shown when the run had [faults] or [checkpoint]
FAULT_SHOWN = ("failures", "checkpoints", "lost_work_s", "lost_updates", "checkpoint_time_s",
               "restart_time_s", "goodput_updates_per_s")
# shown when the run split its replicas ([parallel]; all its keys: docs/reference/results.md)
PARALLEL_SHOWN = ("ranks", "bubble_fraction", "pipeline_p2p_s", "tensor_allreduce_s")
# shown when the run's model has dense layers whose bytes the plan counts (every such run)
MEMORY_SHOWN = ("peak_memory_bytes", "memory_fits")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", type=config_path, help=CONFIG_HELP)
    parser.add_argument("--out", type=Path, help="run directory (default: runs/<config name>)")
    add_set_option(parser, "cluster.workers=8")
    parser.add_argument("--force", action="store_true",
                        help="replace OUT if it holds an earlier run (the old run stays until "
                             "the new one is written)")


def default_out(config_path: Path) -> Path:
    return Path("runs") / config_path.stem


def format_summary(summary: dict, target_loss: float | None = None) -> str:
    """The shown figures, one a line. As in the sweep's table, a figure this run cannot
    have (null: no run.target_loss, no device memory to fit in, no loss evaluated) is left
    out rather than printed as ``-``; a target set but not reached reads ``never``."""
    keys = SHOWN + tuple(k for k in FAULT_SHOWN + PARALLEL_SHOWN + MEMORY_SHOWN
                         if k in summary)
    values = {k: summary.get(k) for k in keys}
    if values.get("time_to_target_s") is None and target_loss is not None:
        values["time_to_target_s"] = "never"
    values = {k: v for k, v in values.items() if v is not None}
    width = max(map(len, values), default=0)
    lines = []
    for key, value in values.items():
        shown = f"{value:.6g}" if isinstance(value, float) else str(value)
        lines.append(f"  {key:<{width}}  {shown}")
    if summary.get("reduced"):
        lines.append(f"  REDUCED: {summary['reduced']}")
    if summary.get("diverged"):
        lines.append("  DIVERGED: a NaN or Inf appeared; the run stopped early")
    return "\n".join(lines)


def run_warnings(path: Path, overrides: list[str], config: Config) -> list[str]:
    """What in the run's config has no effect; for an experiment with a [sweep], only what
    has none at any of its points (its settings serve the sweep, not only the base point
    run here)."""
    if not config.sweep:
        return config_warnings(config)
    from sim.sweep.grid import load_sweep

    try:
        return load_sweep(path, overrides).warnings
    except UserError:  # the grid's own problems are the sweep command's to report
        return config_warnings(config)


def main(args: argparse.Namespace) -> int:
    """Run it; Ctrl-C or SIGTERM stops it and keeps what it reached (``complete: false``),
    exiting 128 + the signal's number."""
    from sim.simulated.engine import simulate

    config = load_config(args.config, args.overrides, quick=quick.enabled())
    if config.sweep:
        print(f"note: {args.config} has a [sweep] table; this runs its base point only "
              f"(`python -m sim sweep {args.config}` runs the grid)")
    out = args.out or default_out(args.config)
    check_out_dir(out, replace=args.force)  # before spending time on the run
    for line in run_warnings(args.config, args.overrides, config):
        print(f"warning: {line}", file=sys.stderr)
    progress = Progress(config.run.iterations, config.run.time_limit_s,
                        samples=config.run.samples)
    try:
        with stop_on_signals(progress):
            result = simulate(config, progress)
    except Stopped as stop:  # after the simulation, before its results were gathered
        progress.close()
        print(f"stopped by {stop.signal_name} before the results were gathered; "
              f"nothing written", flush=True)
        return stop.exit_status
    finally:
        progress.close()
    with shielded():  # a second Ctrl-C waits until the run directory is whole
        write_run(out, result.files(), replace=args.force)
    summary = result.summary
    par = config.parallel
    split = (f" ({par.pipeline} stages x {par.tensor} shards, {par.microbatches} "
             f"microbatches, {par.schedule})" if "ranks" in summary else "")
    print(f"{config.strategy.kind} on {config.cluster.workers} workers{split}, "
          f"{config.workload.model}/{config.workload.dataset}:")
    print(format_summary(summary, config.run.target_loss))
    print(f"results: {out}/ (config.toml, summary.json, metrics.csv, trace.json)")
    flows = result.trace.get("otherData", {}).get("link_flows")
    if flows and flows["left_out"]:
        start, end = flows["window_s"]
        window = f"{start:g} s to {'the end' if end is None else f'{end:g} s'}"
        print(f"trace: {flows['left_out']} of {flows['finished']} link flows left out "
              f"(run.trace_flows = {flows['limit']}, window {window}); trace.json marks "
              "the cut")
    if flows and flows.get("samples_cut_s") is not None:
        print(f"trace: the link counters stop at {flows['samples_cut_s']:g} s after "
              f"{flows['sample_limit']} samples (run.trace_samples); trace.json marks the cut")
    if summary["complete"]:
        return 0
    stop = Stopped(summary["stopped_by"])
    print(f"INCOMPLETE: stopped by {stop.signal_name} after {summary['iterations']} of "
          f"{config.run.iterations} updates; the run directory says \"complete\": false")
    return stop.exit_status
