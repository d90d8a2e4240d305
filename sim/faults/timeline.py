"""Checkpoint-restart of the synchronous strategies as a map from fault-free to wall time.

A synchronous run's numbers do not depend on when things happen: a run that fails,
restarts from its last checkpoint and recomputes the lost steps on the same batches ends
with exactly the parameters of an uninterrupted run (the real executor checks this bit for
bit). So the simulation runs fault-free, and this timeline inserts *gaps* into its time:

* ``checkpoint``: after update k, training waits for the write (blocking) or for the
  snapshot (background, which also first waits for the previous write to end);
* a failure at wall time W, work time u_F (fault-free time plus checkpoint waits so far):
  ``restart`` (the restart delay, then reading the last checkpoint usable at u_F: its write
  ended before u_F) and ``recompute`` (u_F minus the work time at which training resumed
  from that checkpoint: the lost work, replayed as it first ran). A failure during the
  restart or the recomputation starts the recovery again (Daly 2006's model), the attempt
  it cut short counted as ``restart``. A failure during a checkpoint's wait splits it.

Everything after a gap moves by its length; a span that crosses one is split around it.
Gaps are inserted as the fault-free run reaches them (:meth:`step_end`), so the wall time
is known while it runs (:meth:`wall_now`, for ``run.time_limit_s``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.faults.checkpoints import CheckpointPlan
from sim.faults.failures import FailureClock

GAP_KINDS = ("checkpoint", "restart", "recompute")


@dataclass(frozen=True)
class Gap:
    at_s: float  # the fault-free time it is inserted at
    length_s: float
    kind: str  # one of GAP_KINDS


@dataclass(frozen=True)
class Saved:
    """A checkpoint: after update ``step``; training went on from its state at work time
    ``resume_s``; usable by failures from work time ``durable_s`` on."""

    step: int
    resume_s: float
    durable_s: float


class RestartTimeline:
    """The gaps of a synchronous run under ``failures`` (wall times) and ``plan``."""

    def __init__(self, failures: FailureClock, restart_s: float, plan: CheckpointPlan,
                 at_updates: dict[int, list[int]] | None = None) -> None:
        self.failures, self.restart_s, self.plan = failures, restart_s, plan
        self.at_updates = at_updates or {}  # update -> ranks that fail right after it
        self.gaps: list[Gap] = []
        self.offset_s = 0.0  # wall minus fault-free time, so far
        self.paused_s = 0.0  # work minus fault-free time: checkpoint waits so far
        self.saved: list[Saved] = []
        self.last_begun_s = 0.0  # work time the last checkpoint began
        self.failed = 0
        self.lost_s = 0.0  # work lost to failures (recomputed), s
        self.losses: list[float | None] = []  # each failure's (None: while restarting)

    # ---- as the fault-free run goes ---------------------------------------------------

    def wall_now(self, t: float) -> float:
        """Wall time of fault-free time ``t`` (not before the last :meth:`step_end`),
        taking the failures up to it into account."""
        self._fail_until(t)
        return t + self.offset_s

    def step_end(self, t: float, step: int, last: bool) -> None:
        """Update ``step`` was applied at fault-free time ``t`` (``last``: the run's last,
        which no checkpoint follows)."""
        self._fail_until(t)
        for _ in self.at_updates.get(step, ()):
            self._recover(t + self.offset_s, t)
        work = t + self.paused_s
        if not last and self.plan.enabled and self.plan.due(step, work - self.last_begun_s):
            self._checkpoint(t, step)

    def _fail_until(self, t: float) -> None:
        while (f := self.failures.peek()) is not None and f.at_s <= t + self.offset_s:
            self.failures.pop()
            self._recover(f.at_s, f.at_s - self.offset_s)

    def _checkpoint(self, t: float, step: int) -> None:
        work = t + self.paused_s
        self.last_begun_s = work
        remaining, durable = self.plan.timing(work, self.saved[-1].durable_s if self.saved
                                              else 0.0)
        while (f := self.failures.peek()) is not None and \
                f.at_s < t + self.offset_s + remaining:
            self.failures.pop()
            part = f.at_s - (t + self.offset_s)
            self._gap(t, part, "checkpoint", pause=True)
            remaining -= part
            self._recover(f.at_s, t)
        self._gap(t, remaining, "checkpoint", pause=True)
        self.saved.append(Saved(step, t + self.paused_s, durable))

    def _recover(self, wall_s: float, t: float) -> None:
        """A failure at wall time ``wall_s``, fault-free time ``t``: restart (again, if
        another failure cuts it short), read the last usable checkpoint, recompute.

        Each failure's lost work (:attr:`losses`) is the work since the checkpoint that
        it undoes: the fault-free work since training resumed from it, or, for a failure
        during the recomputation, the part recomputed so far; a failure while restarting
        or reading loses none."""
        work = t + self.paused_s
        usable = [s for s in self.saved if s.durable_s <= work]
        lost = work - (usable[-1].resume_s if usable else 0.0)
        restart = self.restart_s + (self.plan.read_s if usable else 0.0)
        self._failed(lost)
        start = wall_s
        while (f := self.failures.peek()) is not None and f.at_s < start + restart + lost:
            self.failures.pop()
            into = f.at_s - start
            self._gap(t, min(into, restart), "restart")
            self._gap(t, into - restart, "recompute")
            self._failed(max(0.0, into - restart) if into > restart else None)
            start = f.at_s
        self._gap(t, restart, "restart")
        self._gap(t, lost, "recompute")

    def _failed(self, lost: float | None) -> None:
        self.failed += 1
        self.losses.append(lost)
        self.lost_s += lost or 0.0

    def _gap(self, t: float, length: float, kind: str, pause: bool = False) -> None:
        if length <= 0:
            return
        self.gaps.append(Gap(t, length, kind))
        self.offset_s += length
        if pause:
            self.paused_s += length

    # ---- afterwards: moving what the run recorded ------------------------------------

    def mapper(self) -> TimeMap:
        return TimeMap(self.gaps)

    def summary(self, iterations: int, wall_end_s: float,
                spans: Sequence[tuple[str, float, float]]) -> dict[str, Any]:
        """The run's fault figures (summary.json keys); ``spans``: the gaps in wall time
        up to the run's end."""
        spent = {kind: sum(b - a for k, a, b in spans if k == kind) for kind in GAP_KINDS}
        plan = self.plan
        return {"failures": self.failed, "checkpoints": len(self.saved),
                "checkpoint_write_s": plan.write_s if plan.enabled else None,
                "checkpoint_read_s": plan.read_s if plan.enabled else None,
                "lost_work_s": self.lost_s, "checkpoint_time_s": spent["checkpoint"],
                "restart_time_s": spent["restart"],
                "goodput_updates_per_s": iterations / wall_end_s if wall_end_s > 0 else None}


class TimeMap:
    """Fault-free time -> wall time through ``gaps`` (in insertion order, which is time
    order). A point at a gap's time is before it (``after=False``: what ended there) or
    after it (``after=True``: what began there)."""

    def __init__(self, gaps: Sequence[Gap]) -> None:
        self.gaps = list(gaps)
        self.at = np.array([g.at_s for g in gaps], float)
        lengths = np.array([g.length_s for g in gaps], float)
        self.before = np.concatenate([[0.0], np.cumsum(lengths)])  # total of gaps [0, i)

    def __call__(self, t: Any, after: bool = False) -> Any:
        side = "right" if after else "left"
        return t + self.before[np.searchsorted(self.at, t, side=side)]

    def cuts(self, start: float, end: float) -> list[float]:
        """The gap times strictly inside (start, end), each once."""
        lo, hi = int(np.searchsorted(self.at, start, "right")), int(
            np.searchsorted(self.at, end, "left"))
        return sorted(set(self.at[lo:hi].tolist())) if hi > lo else []

    def pieces(self, start: float, end: float) -> list[tuple[float, float]]:
        """[start, end) in wall time, split around the gaps inside it."""
        edges = [start, *self.cuts(start, end), end]
        return [(float(self(a, after=True)), float(self(b))) for a, b in
                zip(edges[:-1], edges[1:], strict=True)]

    def spans(self) -> list[tuple[str, float, float]]:
        """Every gap as (kind, wall start, wall end)."""
        return [(g.kind, float(g.at_s + self.before[i]), float(g.at_s + self.before[i + 1]))
                for i, g in enumerate(self.gaps)]
