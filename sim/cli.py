"""The command line: parses, calls the library, prints (:data:`DESCRIPTION` and
:data:`EPILOG` are what users read in ``--help``).

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``main(args) -> int``. Only the chosen command's module is imported, so one
command's heavy imports never slow down (or break) another.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from sim import quick
from sim.errors import UserError

DESCRIPTION = """\
sgd-lab: distributed SGD on a simulated cluster (Infiniband or Ethernet, parameter servers or
allreduce, sync, async or bounded staleness, data, pipeline and tensor parallelism), with real
loss curves under simulated time; the same config also runs as real MPI ranks on this
machine, and `compare` says how far the simulation was from them."""
EPILOG = """\
start here:
  python -m sim list experiments                      the shipped experiment configs
  python -m sim run experiments/quickstart.toml       one run: summary.json, metrics.csv, ...
  python -m sim sweep experiments/quickstart.toml     its [sweep] grid, with comparison plots
  python -m sim COMMAND --help                        a command's options"""

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("sim.commands.run", "run one experiment config"),
    "sweep": ("sim.commands.sweep", "run an experiment's [sweep] grid (resumable)"),
    "plot": ("sim.commands.plot", "figures from result directories"),
    "list": ("sim.commands.list", "what the lab knows: fabrics, transports, host-links, "
             "strategies, models, profiles, datasets, collectives, topologies, devices, "
             "clusters, hosts, storage, experiments"),
    "bench": ("sim.commands.bench", "benchmarks that print ratios measured side by side"),
    "collective": ("sim.commands.collective",
                   "time collectives on simulated fabrics: one, or swept like nccl-tests"),
    "real": ("sim.commands.real", "run one experiment config on real MPI ranks"),
    "calibrate": ("sim.commands.calibrate", "measure this machine: kernel rates, network"),
    "compare": ("sim.commands.compare", "simulated vs real run: errors, curves, report"),
    "validate": ("sim.commands.validate", "run the validation matrix, write its README"),
    "papers": ("sim.commands.papers",
               "published figures (experiments/papers/) against the lab's: errors"),
}


def build_parser(chosen: str | None) -> argparse.ArgumentParser:
    """The parser, with full arguments for the ``chosen`` command only."""
    parser = argparse.ArgumentParser(prog="python -m sim", description=DESCRIPTION,
                                     epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            importlib.import_module(module).add_arguments(sub_parser)
        sub_parser.set_defaults(_module=module)
    return parser


def announce_quick(args: argparse.Namespace) -> None:
    """Under ``SGD_LAB_QUICK=1`` (:mod:`sim.quick`): one line on stderr for a command it
    reduces, and ``--quick`` on for the commands that have that option."""
    if not quick.enabled():
        return
    line = quick.banner(args.command)
    if line:
        print(line, file=sys.stderr, flush=True)
    if hasattr(args, "quick"):
        args.quick = True


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; bad input prints one line on stderr and returns 2."""
    argv = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in argv if not a.startswith("-")), None)
    try:  # an argument's type (a config's name) may raise UserError while parsing
        args = build_parser(chosen).parse_args(argv)
        announce_quick(args)
        return int(importlib.import_module(args._module).main(args) or 0)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
