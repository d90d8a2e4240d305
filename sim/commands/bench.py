"""``python -m sim bench SUITE``: each suite prints ratios measured in one run.

A suite module exposes ``measure(args) -> dict`` (JSON-ready) and
``render(result) -> str`` (the human table).
"""

from __future__ import annotations

import argparse
import importlib
import json

SUITES: dict[str, str] = {
    "builds": "sim.bench.build_bench",
    "kernels": "sim.bench.kernel_bench",
    "network": "sim.bench.network_bench",
    "scale": "sim.bench.scale_bench",
    "training": "sim.bench.training_bench",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", choices=sorted(SUITES), help="which benchmark suite")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")


def main(args: argparse.Namespace) -> int:
    suite = importlib.import_module(SUITES[args.suite])
    result = suite.measure(args)
    print(json.dumps(result, indent=2) if args.json else suite.render(result))
    return 0
