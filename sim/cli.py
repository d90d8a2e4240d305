"""The command line: parses, calls the library, prints.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``main(args) -> int``; they are imported lazily so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from sim.errors import UserError

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("sim.bench", "benchmarks that print ratios measured side by side"),
    "collective": ("sim.network.calculator", "time of one collective on a simulated fabric"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(sub_parser)
        sub_parser.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; bad input prints one line on stderr and returns 2."""
    args = build_parser().parse_args(argv)
    try:
        return int(importlib.import_module(args._module).main(args) or 0)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
