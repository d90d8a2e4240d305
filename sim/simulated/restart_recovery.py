"""Restart recovery in a simulation: the synchronous strategies under ``[faults]`` and
``[checkpoint]`` (the rules' ``recovery = "restart"``).

The strategy runs fault-free; :class:`~sim.faults.timeline.RestartTimeline` follows its
updates and inserts the checkpoint, restart and recomputation gaps; at the end the
recorded times, the trace and the activity breakdown are moved to wall time.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import simpy

from sim.faults.checkpoints import checkpoint_plan
from sim.faults.failures import FailureClock, at_updates, random_ranks
from sim.faults.timeline import RestartTimeline, TimeMap
from sim.trace import WORKERS


class RestartRecovery:
    """Checkpoint-restart of a synchronous job: rank 0 writes the checkpoint (each shard its
    part, with parameter servers) and every rank reads it back after a failure."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        config, servers = ctx.config, (len(ctx.server.hosts) if ctx.server else 0)
        faults = config.faults
        ranks = random_ranks(faults, ctx.n, servers)
        clock = FailureClock(faults, ranks, config.run.seed)
        # failures of the job as a whole: the ranks' failure processes superposed (for
        # exponential ones exactly a Poisson process of rate ranks / mtbf)
        self.job_mtbf_s = faults.mtbf_s / len(ranks) if ranks else None
        self.timeline = RestartTimeline(clock, faults.restart_s,
                                        checkpoint_plan(ctx, max(servers, 1)),
                                        at_updates(faults))
        self.limit_s = math.inf
        self.reached: simpy.Event | None = None
        self.armed = 0  # the newest check of the limit
        ctx.recorder.on_step = self._step

    def _step(self, step: int, worker: int, last: bool) -> None:
        offset = self.timeline.offset_s
        self.timeline.step_end(float(self.ctx.env.now), step, last)
        if self.reached is not None and self.timeline.offset_s != offset:
            self._arm()  # the gaps just inserted bring the limit closer

    def limit(self, limit_s: float) -> simpy.Event:
        """Fires once the run's wall time (failures and checkpoints included) reaches
        ``limit_s``."""
        self.limit_s = limit_s
        self.reached = self.ctx.env.event()
        self._arm()
        return self.reached

    def _arm(self) -> None:
        """Check again when the limit would be reached if no gap came first (wall time
        grows at least as fast as fault-free time), or at the next failure, whose gap
        may cross it; a later gap re-arms (only the newest check counts)."""
        env, timeline, reached = self.ctx.env, self.timeline, self.reached
        if reached is None or reached.triggered:
            return
        left = self.limit_s - timeline.wall_now(float(env.now))
        if left <= 0:
            reached.succeed()
            return
        failure = timeline.failures.peek()
        if failure is not None:
            left = min(left, failure.at_s - timeline.offset_s - env.now)
        self.armed += 1
        armed = self.armed
        env.timeout(left).callbacks.append(lambda _: self._arm() if armed == self.armed
                                           else None)

    def finish(self) -> dict[str, Any]:
        """Move the recorder to wall time; the summary's fault keys."""
        recorder, timeline = self.ctx.recorder, self.timeline
        end = float(self.ctx.env.now)
        timeline.wall_now(end)  # the failures up to a stop by the time limit
        self.map = timeline.mapper()
        recorder.retime(self.map)
        # stopped by the time limit inside a gap: the run ends at the limit
        self.wall_end = max(float(self.map(end)),
                            min(float(self.map(end, after=True)), self.limit_s))
        for kind, start, stop in self.spans():
            recorder.add_time(kind, stop - start)
        recorder.clock = lambda: self.wall_end
        return {"recovery": "restart", "job_mtbf_s": self.job_mtbf_s, "fault_free_s": end,
                "restart_delay_s": self.timeline.restart_s,
                **timeline.summary(recorder.iteration, self.wall_end, self.spans())}

    def trace(self, trace: dict[str, Any]) -> dict[str, Any]:
        """``trace`` in wall time, with every worker's checkpoint, restart and
        recomputation slices."""
        return retime_trace(trace, self.map, self.spans(), self.ctx.n)

    def spans(self) -> list[tuple[str, float, float]]:
        """The gaps in wall time, up to the run's end."""
        return [(kind, a, min(b, self.wall_end)) for kind, a, b in self.map.spans()
                if a < self.wall_end]


def retime_trace(trace: dict[str, Any], to_wall: TimeMap,
                 gaps: list[tuple[str, float, float]], workers: int) -> dict[str, Any]:
    """Chrome trace events moved through ``to_wall`` (a slice that crosses a gap is cut
    in two around it), plus each of ``gaps`` (kind, wall start, end) as a slice on every
    worker's thread. (Vectorised: a long run's trace has millions of events.)"""
    events = trace["traceEvents"]
    timed = [e for e in events if "ts" in e]
    starts = np.array([e["ts"] for e in timed], float) * 1e-6
    ends = starts + np.array([e.get("dur", 0.0) if e.get("ph") == "X" else 0.0
                              for e in timed], float) * 1e-6
    slices = np.array([e.get("ph") == "X" for e in timed], bool)
    # points move as what ended there (before a gap at their time); slices begin after
    moved_starts = np.where(slices, to_wall(starts, after=True), to_wall(starts)) * 1e6
    moved_ends = to_wall(ends) * 1e6
    crossed = slices & (np.searchsorted(to_wall.at, ends, "left")
                        > np.searchsorted(to_wall.at, starts, "right"))
    out = [e for e in events if "ts" not in e]
    for i, event in enumerate(timed):
        if crossed[i]:
            out += [{**event, "ts": a * 1e6, "dur": (b - a) * 1e6}
                    for a, b in to_wall.pieces(float(starts[i]), float(ends[i]))]
        elif slices[i]:
            out.append({**event, "ts": float(moved_starts[i]),
                        "dur": float(moved_ends[i] - moved_starts[i])})
        else:
            out.append({**event, "ts": float(moved_starts[i])})
    for kind, a, b in gaps:
        out += [{"ph": "X", "name": kind, "cat": kind, "pid": WORKERS, "tid": w,
                 "ts": a * 1e6, "dur": (b - a) * 1e6} for w in range(workers)]
    return {**trace, "traceEvents": out}
