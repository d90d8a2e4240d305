"""``SGD_LAB_QUICK=1``: the small form of the long commands, for tests that run them.

The tests of the documentation run every documented command (tests/project/test_docs_commands.py),
and the notebooks' tests run each notebook; with this variable set the same commands finish
in seconds. On the command line it

- stops every simulated or real run after at most :data:`ITERATIONS` updates (and evaluates
  at least twice in them), in ``sim run``, ``sim sweep`` and ``sim real``;
- gives a sweep at most :data:`SEEDS` seeds (``--seeds N``, ``run.seeds``);
- makes ``sim calibrate``, ``sim validate`` and ``sim bench`` run as with ``--quick``.

A reduced result must never pass for a real one: a cut run's config gets ``run.reduced``
(what was cut, e.g. ``SGD_LAB_QUICK=1: run.iterations 60 -> 20``), which its run directory
keeps in ``config.toml`` and ``summary.json`` (a sweep's ``results.csv`` too), and which
changes the config's hash, so a sweep never reuses a reduced run for a full one; each
command it changes prints one line saying so. The library itself (``load_config``,
``run_sweep``) is never reduced: only the command line reads the variable, and the
notebooks choose their own small parameters from it (:func:`sim.analysis.setup_notebook`).
Any value but ``1`` leaves everything as configured.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

VARIABLE = "SGD_LAB_QUICK"
ITERATIONS = 20  # updates: enough for a loss curve, a few checkpoints, a sweep's table
SEEDS = 2  # the fewest that still give a mean and a confidence interval
# The commands the variable changes, and how (their one line on stderr).
COMMANDS = {
    "run": f"the run stops after at most {ITERATIONS} updates",
    "real": f"each run stops after at most {ITERATIONS} updates",
    "sweep": f"each run stops after at most {ITERATIONS} updates, at most {SEEDS} seeds",
    "calibrate": "as with --quick (rough profiles)",
    "validate": "as with --quick",
    "bench": "as with --quick",
}


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(VARIABLE) == "1"


def banner(command: str) -> str | None:
    """The line a reduced ``command`` prints first, or None for a command it leaves alone."""
    what = COMMANDS.get(command)
    if what is None:
        return None
    return (f"{VARIABLE}=1: reduced form for testing ({what}); the results are not the "
            f"experiment's, and each cut run says so under \"reduced\" in its summary.json")


def cuts(iterations: int, eval_every: int) -> dict[str, tuple[int, int]]:
    """What the quick form changes in a run of ``iterations`` updates that evaluates every
    ``eval_every``: dotted key -> (configured, reduced); empty when the run is short
    already."""
    if iterations <= ITERATIONS:
        return {}
    found = {"run.iterations": (iterations, ITERATIONS)}
    if eval_every > ITERATIONS // 2:  # a curve of two points at least
        found["run.eval_every"] = (eval_every, ITERATIONS // 2)
    return found


def reduce_config(data: dict[str, Any], iterations: int, eval_every: int) -> dict[str, Any]:
    """A copy of config ``data`` (whose resolved run has ``iterations`` and ``eval_every``)
    in the quick form, with ``run.reduced`` saying what was cut; ``data`` itself when
    nothing needs cutting."""
    changed = cuts(iterations, eval_every)
    if not changed:
        return data
    data = copy.deepcopy(data)
    run = data.setdefault("run", {})
    for key, (_, value) in changed.items():
        run[key.removeprefix("run.")] = value
    run["reduced"] = f"{VARIABLE}=1: " + ", ".join(
        f"{key} {old} -> {new}" for key, (old, new) in changed.items())
    return data


def reduce_seeds(seeds: list[int]) -> list[int]:
    """The first :data:`SEEDS` of a sweep's seeds."""
    return seeds[:SEEDS]
