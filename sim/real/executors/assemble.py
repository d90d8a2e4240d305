"""What ranks log during a real run, and rank 0 turning all logs into the run's files.

Every rank logs spans (worker, compute/comm/wait, start, end), the updates it applied and
snapshots of the model of record at evaluation points, all in seconds since the common
start. After training, rank 0 gathers the logs and *replays* them, in time order, through
the simulator's own :class:`sim.record.Recorder`, its clock reading the replayed time. So
summary.json, metrics.csv and trace.json are computed by the same code as for a simulated
run; the evaluations (held-out loss and accuracy of each snapshot) run after training, off
the clock.
"""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.config import dump_config
from sim.real.executors.compute import median_kernel_s
from sim.record import Recorder, UpdateRecord
from sim.training.rules import Rules
from sim.workloads.workload import Workload

Span = tuple[int, str, float, float]  # worker, kind, start_s, end_s


@dataclass
class RankLog:
    rank: int
    spans: list[Span] = field(default_factory=list)
    updates: list[tuple[float, UpdateRecord]] = field(default_factory=list)  # (time_s, ...)
    snapshots: dict[int, np.ndarray] = field(default_factory=dict)  # iteration -> params
    kernel_s: list[float] = field(default_factory=list)
    messages: int = 0
    diverged: bool = False
    steps: list[tuple] = field(default_factory=list)  # strategy-specific, for its combine()

    def span(self, worker: int, kind: str, start: float, end: float) -> None:
        if end > start:
            self.spans.append((worker, kind, start, end))

    def record(self, time_s: float, update: UpdateRecord, params: np.ndarray,
               rules: Rules, iteration: int) -> None:
        """``update`` applied at ``time_s``: the ``iteration``-th; ``params`` is snapshotted
        if the rules evaluate the model of record there."""
        self.updates.append((time_s, update))
        self.snapshot(params, rules, iteration)

    def snapshot(self, params: np.ndarray, rules: Rules, iteration: int) -> None:
        """Keep a copy of ``params`` if the model of record is evaluated after ``iteration``."""
        if iteration == 0 or rules.evaluates_after(iteration):
            self.snapshots[iteration] = params.copy()


def assemble(workload: Workload, rules: Rules, logs: list[RankLog], wall_s: float,
             extra: dict[str, Any]) -> dict[str, str]:
    """The run directory's files (name -> text) from every rank's log."""
    config = workload.config
    run = config.run
    now = [0.0]  # the replayed time (s)
    rec = Recorder(lambda: now[0], workload.n, run.iterations, rules.evaluates_after,
                   run.target_loss)
    snapshots: dict[int, np.ndarray] = {}
    for log in logs:
        snapshots.update(log.snapshots)
    data, model = workload.data, workload.model

    def evaluate() -> tuple[float, float]:
        params = snapshots.get(rec.iteration)
        if params is None or not np.isfinite(params).all():
            return math.nan, math.nan
        return model.evaluate(params, data.X_test, data.y_test)

    rec.evaluate = evaluate
    rec.evaluate_now()  # at time 0, the initial parameters
    updates = sorted((u for log in logs for u in log.updates), key=lambda u: u[0])
    for time_s, update in updates:
        now[0] = float(time_s)
        rec.record(update)
    end = now[0]
    for worker, kind, start, stop in sorted((s for log in logs for s in log.spans),
                                            key=lambda s: s[2]):
        if start < end:  # the simulator stops recording when the last update is applied
            rec.add_span(worker, kind, start, min(stop, end))
    if any(log.diverged for log in logs):
        rec.diverged = True
        rec.final = (math.nan, math.nan)
    kernel = [k for log in logs for k in log.kernel_s]
    summary = rec.summary(run.seed, wall_s, sum(log.messages for log in logs),
                          strategy=config.strategy.kind, fabric=extra.get("net"),
                          workers_n=workload.n, stragglers=workload.compute.stragglers,
                          compute_time_s=median_kernel_s(kernel), kind="real",
                          machine=platform.node(), cpus=os.cpu_count(), **extra)
    return {"config.toml": dump_config(config),
            "summary.json": json.dumps(summary, indent=2) + "\n",
            "metrics.csv": rec.metrics_csv(),
            "trace.json": json.dumps(rec.trace())}
