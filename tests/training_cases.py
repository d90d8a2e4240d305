"""Shared pieces of the training tests: small configs, running them, reading what they record."""

from __future__ import annotations

import csv
import io
from typing import Any

import numpy as np

from sim.config import Config
from sim.simulated.engine import build_simulation
from sim.training.validator import validate

# A network that costs nothing measurable: no latency or overhead and 1 EB/s links, so
# simulated time is compute time (to ~1e-14 s a message).
FREE_NETWORK = {
    "cluster.network": "analytical",
    "cluster.fabric": {"base": "ib-hdr", "latency_s": 0.0, "overhead_s": 0.0,
                       "bandwidth_Bps": 1e18},
}

# Small and fast: a 16-feature Gaussian mixture, 4 workers, 40 updates, one final eval.
BASE = {
    "cluster.workers": 4,
    "workload.features": 16,
    "workload.samples": 1024,
    "workload.batch": 8,
    "run.iterations": 40,
    "run.eval_every": 1000,
}

# workload keys for each model on a data set it accepts
MODELS = {
    "logreg": {"workload.model": "logreg"},
    "softmax": {"workload.model": "softmax", "workload.classes": 3},
    "mlp": {"workload.model": "mlp", "workload.classes": 3, "workload.hidden": [8]},
    "sparse-logreg": {"workload.model": "sparse-logreg", "workload.dataset": "sparse-powerlaw",
                      "workload.features": 100, "workload.nnz_per_row": 8},
}


def make(*layers: dict[str, Any], **keys: Any) -> Config:
    """A validated config: BASE, then each dict of dotted keys, then ``keys`` (``__`` = ``.``).

    ``make(MODELS["mlp"], strategy__kind="asp")``.
    """
    flat = dict(BASE)
    for layer in layers:
        flat.update(layer)
    flat.update({k.replace("__", "."): v for k, v in keys.items()})
    nested: dict[str, Any] = {}
    for dotted, value in flat.items():
        section, key = dotted.split(".")
        nested.setdefault(section, {})[key] = value
    return validate(nested)


def train(config: Config) -> tuple[Any, Any]:
    """Run ``config`` to the end; (context, strategy), to read parameters and workers."""
    env, ctx, strategy = build_simulation(config)
    strategy.start()
    env.run(until=ctx.done)
    return ctx, strategy


def rows(metrics_csv: str, kind: str = "update") -> list[dict[str, Any]]:
    """The metrics rows of ``kind`` (update or eval), numbers parsed, blanks as None."""
    def parse(value: str) -> Any:
        if value == "":
            return None
        return float(value) if any(c in value for c in ".en") else int(value)

    table = csv.DictReader(io.StringIO(metrics_csv))
    return [{k: (v if k == "kind" else parse(v)) for k, v in row.items()}
            for row in table if row["kind"] == kind]


def update_table(ctx: Any) -> list[tuple]:
    """The recorder's update rows (kind, time_s, iteration, worker, clock, version_read,
    staleness, clock_gap, loss, accuracy), straight from memory."""
    return [row for row in ctx.recorder.rows if row[0] == "update"]


def count_pushes(ctx: Any) -> list[float]:
    """Record the bytes of every push to the parameter servers from now on."""
    pushed: list[float] = []
    push = ctx.server.push

    def counting(host: int, nbytes: float, keys=(0.0, 1.0)):
        pushed.append(nbytes)
        return push(host, nbytes, keys)

    ctx.server.push = counting
    return pushed


def harmonic(n: int) -> float:
    return float(np.sum(1.0 / np.arange(1, n + 1))) if n else 0.0
