"""Every CLI command: one module each, with ``add_arguments(parser)`` and ``main(args)``."""

from __future__ import annotations

import argparse


def add_set_option(parser: argparse.ArgumentParser, example: str) -> None:
    """The ``--set KEY=VALUE`` option every command that reads a config takes."""
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help=f"override a config key, e.g. {example}; KEY=none removes an "
                             "optional key (one whose default is none)")
