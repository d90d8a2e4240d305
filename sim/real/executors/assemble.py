"""What ranks log during a real run, and rank 0 turning all logs into the run's files.

Every rank logs spans (worker, one of :data:`sim.recorder.KINDS`, start, end), the updates it
applied and snapshots of the model of record at evaluation points, all in seconds since the
common start. A worker's spans are laid end to end from the start: a span is clipped to
begin where the previous one ended, and a gap between two timed spans is the per-step
loop's Python code, logged as ``overhead`` (and summed in ``loop_s``). Only worker ranks'
spans reach the summary's breakdown; a server rank's time by activity goes to
``server_breakdown``. After training, rank 0 gathers the logs and *replays* them, in time
order, through the simulator's own :class:`sim.recorder.Recorder`, its clock reading the
replayed time. So summary.json, metrics.csv and trace.json are computed by the same code as
for a simulated run, with the same memory keys (:mod:`sim.training.rank_memory`); the
evaluations (held-out loss and accuracy of each snapshot) run after training, off the clock.
"""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from sim.config import dump_config
from sim.real.executors.rank_compute import median_kernel_s
from sim.recorder import Recorder, UpdateRecord
from sim.trace import Facts
from sim.training.rank_memory import memory_summary
from sim.training.rules import Rules
from sim.training.strategies import row_of
from sim.training.workload import Workload

Span = tuple[int, str, float, float]  # worker, kind, start_s, end_s
Part = tuple[str, float, float]  # kind, start_s, end_s (of one rank, before laying out)
# a part with a label: what the trace names its slice instead of its kind (a pass: "F3")
LabelledPart = tuple[str, float, float, str]
LOOP = "overhead"  # what a gap between timed spans is: the framework's per-step loop
RESERVE_BYTES = 256 * 2**20  # the most RankLog.reserve sets aside for snapshots


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
    extra: dict[str, Any] = field(default_factory=dict)  # the strategy's own summary keys
    cursor: float = 0.0  # where the last span ended
    loop_s: float = 0.0  # gaps between timed spans (logged as overhead)
    labels: dict[int, str] = field(default_factory=dict)  # span index -> its trace name
    track: str = ""  # the trace's name for this rank's track ("": "worker R")
    # messages for the trace's arrows: (sender rank, index of the span whose output it was,
    # receiver rank, index of the span that took it up), ranks as positions in the logs
    handoffs: list[tuple[int, int, int, int]] = field(default_factory=list)
    # arrays written before the clock starts, which snapshots copy into (:meth:`reserve`);
    # not a field: the unused ones are neither recorded nor sent
    _spare: ClassVar[tuple[np.ndarray, ...]] = ()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_spare"}

    def reserve(self, size: int, rules: Rules, iterations: int) -> None:
        """Arrays for the snapshots of a ``size``-entry model over ``iterations`` updates,
        allocated and written now, before the clock: a fresh array of a megabyte first
        touched inside a timed step costs 0.6-1 ms of page faults on this VM at every
        evaluation (measured in the real deep-MLP runs), which is the lab's record keeping,
        not training. At most RESERVE_BYTES."""
        count = 1 + sum(rules.evaluates_after(i) for i in range(1, iterations + 1))
        count = min(count, RESERVE_BYTES // max(1, size * 8))
        self._spare = [np.ones(size) for _ in range(count)]

    def span(self, worker: int, kind: str, start: float, end: float, label: str = "") -> None:
        """``worker`` spent [start, end) on ``kind``; spans must come in time order: one is
        clipped to begin where the last ended, and a gap before it is logged as loop
        overhead. A ``label`` names the span on the trace (and keeps it apart from its
        neighbours)."""
        start = max(start, self.cursor)
        if end <= start:
            return
        if start > self.cursor:
            self.loop_s += start - self.cursor
            self._add(worker, LOOP, self.cursor, start)
        self._add(worker, kind, start, end, label)
        self.cursor = end

    def spans_of(self, worker: int, parts: list[Part] | list[LabelledPart]) -> None:
        """Log ``parts`` (possibly unordered, possibly labelled) in order of their start."""
        for kind, start, end, *label in sorted(parts, key=lambda p: p[1]):
            self.span(worker, kind, start, end, *label)

    def _add(self, worker: int, kind: str, start: float, end: float, label: str = "") -> None:
        last = self.spans[-1] if self.spans else None
        if (last is not None and last[1] == kind and last[0] == worker and last[3] == start
                and not label and len(self.spans) - 1 not in self.labels):
            self.spans[-1] = (worker, kind, last[2], end)  # one span, not two adjacent ones
        else:
            self.spans.append((worker, kind, start, end))
            if label:
                self.labels[len(self.spans) - 1] = label

    def record(self, time_s: float, update: UpdateRecord, params: np.ndarray,
               rules: Rules, iteration: int) -> None:
        """``update`` applied at ``time_s``: the ``iteration``-th; ``params`` is snapshotted
        if the rules evaluate the model of record there."""
        self.updates.append((time_s, update))
        self.snapshot(params, rules, iteration)

    def snapshot(self, params: np.ndarray, rules: Rules, iteration: int) -> None:
        """Keep a copy of ``params`` if the model of record is evaluated after ``iteration``."""
        if iteration == 0 or rules.evaluates_after(iteration):
            if self._spare and self._spare[-1].shape == params.shape:
                kept = self._spare.pop()
                kept[...] = params
            else:
                kept = params.copy()
            self.snapshots[iteration] = kept


def carve(background: Part, parts: list[Part]) -> list[Part]:
    """``parts`` over a ``background`` span that they interrupt (messages posted and tested
    between the layers of a backward pass): the background fills the time between them."""
    kind, start, end = background
    out: list[Part] = []
    cursor = start
    for part in sorted(parts, key=lambda p: p[1]):
        if part[2] <= start or part[1] >= end:
            out.append(part)
            continue
        if part[1] > cursor:
            out.append((kind, cursor, part[1]))
        out.append(part)
        cursor = max(cursor, part[2])
    if end > cursor:
        out.append((kind, cursor, end))
    return out


def assemble(workload: Workload, rules: Rules, logs: list[RankLog], wall_s: float,
             extra: dict[str, Any]) -> dict[str, str]:
    """The run directory's files (name -> text) from every rank's log. The worker ranks
    (each replica's ranks, as the strategy's row counts them; the servers come after) each
    get their track and their row of the summary's ``workers``."""
    config = workload.config
    run = config.run
    now = [0.0]  # the replayed time (s)
    worker_ranks = row_of(config).worker_ranks(config)
    rec = Recorder(lambda: now[0], worker_ranks, run.iterations, rules.evaluates_after,
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
    server: dict[str, float] = {}
    spans = sorted(((*span, log.labels.get(i, ""), (r, i)) for r, log in enumerate(logs)
                    for i, span in enumerate(log.spans)), key=lambda s: s[2])
    handoffs = [h for log in logs for h in log.handoffs]
    ends = {(r, i) for h in handoffs for r, i in (h[:2], h[2:])}
    numbers: dict[tuple[int, int], int | None] = {}  # (rank, span index) -> the recorder's
    for worker, kind, start, stop, label, key in spans:
        if start >= end:  # the simulator stops recording when the last update is applied
            continue
        if worker < worker_ranks:
            number = rec.add_span(worker, kind, start, min(stop, end),
                                  facts=Facts(label=label) if label else None)
            if key in ends:
                numbers[key] = number
        else:  # a server rank: not a worker, kept apart
            server[kind] = server.get(kind, 0.0) + min(stop, end) - start
    for sender, sent_at, receiver, taken_at in handoffs:
        a, b = numbers.get((sender, sent_at)), numbers.get((receiver, taken_at))
        if a is not None and b is not None:  # (both replayed: an arrow between them)
            rec.notes.handoff(a, b)
    if server:
        extra = {**extra, "server_breakdown": server}
    workers = [log for log in logs if log.rank < worker_ranks]
    tracks = {log.rank: log.track for log in workers if log.track}
    extra = {**extra, "loop_s": float(np.mean([log.loop_s for log in workers])),
             **memory_summary(config, workload.compute.device.memory_bytes)}
    for log in logs:
        extra.update(log.extra)
    if any(log.diverged for log in logs):
        rec.diverged = True
        rec.final = (math.nan, math.nan)
    kernel = [k for log in logs for k in log.kernel_s]
    summary = rec.summary(run.seed, wall_s, sum(log.messages for log in logs),
                          reduced=run.reduced,
                          strategy=config.strategy.kind, fabric=extra.get("net"),
                          workers_n=workload.n, stragglers=workload.compute.stragglers,
                          slowdowns=workload.compute.slowdown_windows,
                          compute_time_s=median_kernel_s(kernel), kind="real", clock="wall",
                          machine=platform.node(), cpus=os.cpu_count(), **extra)
    return {"config.toml": dump_config(config),
            "summary.json": json.dumps(summary, indent=2) + "\n",
            "metrics.csv": rec.metrics_csv(),
            "trace.json": json.dumps(rec.trace(
                worker_name=lambda w: tracks.get(w, f"worker {w}")))}
