"""``python -m sim run CONFIG [--out DIR] [--set key=value ...]``: one experiment."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from sim.config import load_config
from sim.record import check_out_dir, write_run

SHOWN = ("sim_time_s", "iterations", "final_loss", "final_accuracy", "time_to_target_s",
         "samples_per_s", "staleness_mean", "staleness_max", "compute_s", "comm_s", "wait_s",
         "events", "wall_s")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", type=Path, help="experiment config (TOML)")
    parser.add_argument("--out", type=Path, help="run directory (default: runs/<config name>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config key, e.g. cluster.workers=8")


def default_out(config_path: Path) -> Path:
    return Path("runs") / config_path.stem


def format_summary(summary: dict) -> str:
    width = max(map(len, SHOWN))
    lines = []
    for key in SHOWN:
        value = summary.get(key)
        shown = "-" if value is None else (f"{value:.6g}" if isinstance(value, float)
                                            else str(value))
        lines.append(f"  {key:<{width}}  {shown}")
    if summary.get("diverged"):
        lines.append("  DIVERGED: a NaN or Inf appeared; the run stopped early")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    from sim.training.engine import simulate

    config = load_config(args.config, args.overrides)
    if config.sweep:
        print(f"note: {args.config} has a [sweep] table; this runs its base point only "
              f"(`python -m sim sweep {args.config}` runs the grid)")
    out = args.out or default_out(args.config)
    check_out_dir(out)  # before spending time on the run
    with tqdm(total=config.run.iterations, unit="update", file=sys.stderr, disable=None,
              leave=False) as bar:
        result = simulate(config, lambda done, _: bar.update(done - bar.n))
    write_run(out, result.files())
    print(f"{config.strategy.kind} on {config.cluster.workers} workers, "
          f"{config.workload.model}/{config.workload.dataset}:")
    print(format_summary(result.summary))
    print(f"results: {out}/ (config.toml, summary.json, metrics.csv, trace.json)")
    return 0
