"""Elastic recovery on real ranks: the parameter-server strategies that carry on without a
worker that died (the rules' ``recovery = "elastic"``: asp, ssp, backup).

The server rank finds a dead worker itself: while it waits for a message it looks, every
:data:`~sim.real.executors.fault_injection.CHECK_EVERY_S`, at the pid each live worker wrote at
start (``rankR.pid``); a process that is gone or a zombie is dead. It then drops the worker
from the store (``ParameterStore.drop``: the SSP bound and a backup step's quota count the
live workers only), forgets its pull, and answers the pulls that this frees. Nothing is
sent to a dead worker, and no collective over ``COMM_WORLD`` runs after training: each live
worker sends the server its log, the server takes a dead worker's from the work directory
(:mod:`sim.real.executors.fault_injection`), writes the run's files, and every rank leaves with
``os._exit`` (``MPI_Finalize`` with a dead rank may wait for it). The process manager must
let the others run on (``mpiexec.gforker``: :mod:`sim.real.launch.launcher`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from sim.real.executors.assemble import RankLog
from sim.real.executors.context import RankContext
from sim.real.executors.fault_injection import (
    CHECK_EVERY_S,
    FaultPlan,
    alive,
    dead_log,
    killed,
    rank_pid,
)
from sim.real.executors.rank_clock import POLL_SLEEP_S

LOG_TAG = 78  # a worker's log to the server, after training


def elastic(ctx: RankContext) -> bool:
    """Whether this run's workers may die (the spec says the launcher lets them)."""
    return ctx.spec.elastic


def worker_plan(ctx: RankContext) -> FaultPlan | None:
    """This worker's planned failures, or None if it has none."""
    if not elastic(ctx):
        return None
    plan = FaultPlan.of(ctx.config, ctx.rank, ctx.workdir, [])
    return plan if plan.kills else None


class WorkerMonitor:
    """The server's watch on its workers' processes."""

    def __init__(self, ctx: RankContext, protocol: Any) -> None:
        self.ctx, self.protocol = ctx, protocol
        self.pids = {w: rank_pid(ctx.workdir, w) for w in range(protocol.n)}
        self.next_check = time.perf_counter()
        self.found_s: dict[int, float] = {}  # worker -> when the server found it dead

    @classmethod
    def of(cls, ctx: RankContext, protocol: Any) -> WorkerMonitor | None:
        return cls(ctx, protocol) if elastic(ctx) else None

    def receive(self, request: Any, status: Any, replies: Callable[[], Any]) -> bool:
        """Complete ``request`` (a receive), dropping workers found dead meanwhile and
        calling ``replies()`` after each drop; False (the request cancelled) if every
        worker has stopped or died before a message came."""
        nap = self.ctx.waiter.mode == "sleep"
        while not request.Test(status):
            if time.perf_counter() < self.next_check:
                if nap:
                    time.sleep(POLL_SLEEP_S)
                continue
            self.next_check = time.perf_counter() + CHECK_EVERY_S
            if self.check():
                replies()
                if self.protocol.over:
                    request.Cancel()
                    request.Wait()
                    return False
        return True

    def check(self) -> bool:
        """Drop every live, unstopped worker whose process has gone; whether any was."""
        protocol, found = self.protocol, False
        for w, pid in self.pids.items():
            if w in protocol.dead or w in protocol.stopped:
                continue
            if pid is None:  # it may not have written it yet: read it again
                pid = self.pids[w] = rank_pid(self.ctx.workdir, w)
            if pid is not None and not alive(pid):
                now = self.ctx.now()
                protocol.drop(w, now)
                self.found_s[w] = now
                found = True
        return found

    def summary(self) -> dict[str, Any]:
        return {"dead_workers": sorted(self.found_s),
                "found_dead_s": {str(w): t for w, t in sorted(self.found_s.items())}}


def collect(ctx: RankContext, log: RankLog) -> list[RankLog] | None:
    """Every rank's log at the server (None on a worker, which sends its own): a dead
    worker's as it left it, with its ``restart`` time (down, from its death to the end:
    it does not come back)."""
    n = ctx.workload.n
    if ctx.rank != n:
        ctx.comm.send(log, dest=n, tag=LOG_TAG)
        return None
    dead = set(log.extra.get("dead_workers", []))
    markers = {m["rank"]: m for m in killed(ctx.workdir)}
    logs = []
    for w in range(n):
        if w not in dead:
            logs.append(ctx.comm.recv(source=w, tag=LOG_TAG))
            continue
        left = dead_log(ctx.workdir, w) or RankLog(w)
        left.span(w, "restart", float(markers.get(w, {}).get("at_s", left.cursor)), math.inf)
        logs.append(left)
    return [*logs, log]
