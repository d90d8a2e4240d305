"""Restart recovery in a simulation: the synchronous strategies under ``[faults]`` and
``[checkpoint]`` (the rules' ``recovery = "restart"``).

The strategy runs fault-free; :class:`~sim.faults.timeline.RestartTimeline` follows its
updates and inserts the checkpoint, restart and recomputation gaps; at the end the
recorded times, the trace and the activity breakdown are moved to wall time.
"""

from __future__ import annotations

import copy
from collections.abc import Generator
from typing import Any

import simpy

from sim.faults.checkpoints import checkpoint_plan
from sim.faults.failures import FailureClock, random_ranks
from sim.faults.timeline import RestartTimeline, TimeMap
from sim.trace import WORKERS


class RestartRecovery:
    """Checkpoint-restart of a synchronous job: rank 0 writes the checkpoint (each shard its
    part, with parameter servers) and every rank reads it back after a failure."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        config, servers = ctx.config, (len(ctx.server.hosts) if ctx.server else 0)
        faults = config.faults
        clock = FailureClock(faults, random_ranks(faults, ctx.n, servers), config.run.seed)
        at_updates: dict[int, list[int]] = {}
        for failure in faults.failures:
            if failure.at_update is not None:
                at_updates.setdefault(failure.at_update, []).append(failure.rank)
        self.timeline = RestartTimeline(clock, faults.restart_s,
                                        checkpoint_plan(ctx, max(servers, 1)), at_updates)
        ctx.recorder.on_step = self._step

    def _step(self, step: int, worker: int, last: bool) -> None:
        self.timeline.step_end(float(self.ctx.env.now), step, last)

    def limit(self, limit_s: float) -> simpy.Event:
        """Fires once the run's wall time (failures and checkpoints included) reaches
        ``limit_s``: at the first moment of fault-free time whose wall time does."""
        return self.ctx.env.process(self._watch(limit_s))

    def _watch(self, limit_s: float) -> Generator[simpy.Event, Any, None]:
        env = self.ctx.env
        while (left := limit_s - self.timeline.wall_now(float(env.now))) > 0:
            yield env.timeout(left)  # wall time grows at least as fast: never past it

    def finish(self) -> dict[str, Any]:
        """Move the recorder to wall time; the summary's fault keys."""
        recorder, timeline = self.ctx.recorder, self.timeline
        end = float(self.ctx.env.now)
        timeline.wall_now(end)  # the failures up to a stop by the time limit
        self.map = timeline.mapper()
        recorder.retime(self.map)
        for kind, start, stop in self.map.spans():
            recorder.add_time(kind, stop - start)
        wall_end = float(self.map(end))
        recorder.clock = lambda: wall_end
        return {"recovery": "restart", **timeline.summary(recorder.iteration, wall_end)}

    def trace(self, trace: dict[str, Any]) -> dict[str, Any]:
        """``trace`` in wall time, with every worker's checkpoint, restart and
        recomputation slices."""
        return retime_trace(trace, self.map, self.ctx.n)


def retime_trace(trace: dict[str, Any], to_wall: TimeMap, workers: int) -> dict[str, Any]:
    """Chrome trace events moved through ``to_wall`` (a slice that crosses a gap is cut
    in two around it), plus each gap as a slice on every worker's thread."""
    events = []
    for event in trace["traceEvents"]:
        if "ts" not in event:
            events.append(event)
            continue
        start = event["ts"] * 1e-6
        if event.get("ph") != "X":
            events.append({**event, "ts": float(to_wall(start)) * 1e6})
            continue
        for a, b in to_wall.pieces(start, start + event.get("dur", 0.0) * 1e-6):
            events.append({**copy.copy(event), "ts": a * 1e6, "dur": (b - a) * 1e6})
    for kind, a, b in to_wall.spans():
        events += [{"ph": "X", "name": kind, "cat": kind, "pid": WORKERS, "tid": w,
                    "ts": a * 1e6, "dur": (b - a) * 1e6} for w in range(workers)]
    return {**trace, "traceEvents": events}
