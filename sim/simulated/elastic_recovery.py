"""Elastic recovery in a simulation: the parameter-server strategies that carry on after a
failure (the rules' ``recovery = "elastic"``: asp, ssp, backup, easgd).

* A worker that fails stops where it is; what it was computing or sending is lost. The
  rules count only the live workers (the SSP bound, a backup step's quota) until it
  rejoins ``faults.restart_s`` later and pulls the parameters again.
* A shard that fails serves nothing for ``faults.restart_s`` plus reading its checkpoint;
  messages to it and work for it wait (the clients retry). Its key range goes back to its
  last checkpoint usable then (the initial parameters if none): the updates since are lost.
* Each shard checkpoints its own part: blocking, the shard serves nothing while it writes;
  background, it pauses only for a snapshot copy in memory (after the previous write, if
  that is still going), and the part is usable once its write has ended.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from sim.faults.checkpoints import checkpoint_plan
from sim.faults.failures import FailureClock, at_updates, random_ranks


@dataclass
class ShardSave:
    """A checkpoint of one shard's key range."""

    version: int  # the store's version when it was taken
    taken_s: float
    durable_s: float
    params: np.ndarray | None  # the range's parameters (None: timing only)
    velocity: np.ndarray | None


class ElasticRecovery:
    """Failures and checkpoints of a parameter-server run that carries on through them."""

    def __init__(self, ctx: Any, strategy: Any) -> None:
        self.ctx, self.strategy = ctx, strategy
        self.server = ctx.server
        config = ctx.config
        self.faults, self.shards = config.faults, len(self.server.hosts)
        self.plan = checkpoint_plan(ctx, self.shards)
        self.clock = FailureClock(self.faults, random_ranks(self.faults, ctx.n, self.shards),
                                  config.run.seed)
        self.at_updates = at_updates(self.faults)
        self.saves: list[list[ShardSave]] = [[] for _ in range(self.shards)]
        self.down_until = np.zeros(ctx.n)  # a failed worker's return
        self.down_since = np.zeros(ctx.n)  # and when it failed
        self.shard_up_s = np.zeros(self.shards)  # a failed shard's return
        self.progress_s = np.zeros(ctx.n)  # when each worker last contributed an update
        self.last_begun_s = 0.0
        self.failed = self.lost_updates = 0
        self.lost_s = self.checkpoint_s = self.restart_s = 0.0
        ctx.recorder.on_step = self._step
        ctx.env.process(self._failures())

    # ---- failures ----------------------------------------------------------------------

    def _failures(self) -> Generator[simpy.Event, Any, None]:
        env = self.ctx.env
        while (f := self.clock.peek()) is not None and not self.ctx.recorder.finished:
            if f.at_s > env.now:
                yield env.timeout(f.at_s - env.now)
                continue  # an earlier failure may have joined meanwhile
            self.clock.pop()
            self.fail(f.rank)

    def fail(self, rank: int) -> None:
        """``rank`` fails now (a worker, or shard ``rank - workers``); one that is already
        down is not hit again."""
        ctx = self.ctx
        if rank < ctx.n:
            if self.down_until[rank] > ctx.env.now:
                return
            self.failed += 1
            self._fail_worker(rank)
        else:
            shard = rank - ctx.n
            if self.shard_up_s[shard] > ctx.env.now:
                return
            self.failed += 1
            self._fail_shard(shard)

    def _fail_worker(self, w: int) -> None:
        ctx = self.ctx
        now = float(ctx.env.now)
        self.lost_s += now - self.progress_s[w]
        self.down_since[w], self.down_until[w] = now, now + self.faults.restart_s
        self.server.store.drop(w)
        self.strategy.fail_worker(w)
        ctx.env.process(self._rejoin(w, now))

    def _rejoin(self, w: int, failed_s: float) -> Generator[simpy.Event, Any, None]:
        ctx = self.ctx
        yield ctx.env.timeout(self.faults.restart_s)
        ctx.recorder.add_span(w, "restart", failed_s, float(ctx.env.now))
        self.restart_s += float(ctx.env.now) - failed_s
        if ctx.recorder.finished:
            return
        self.progress_s[w] = float(ctx.env.now)
        self.server.store.rejoin(w)
        ctx.workers[w].clock = int(self.server.store.clocks[w])
        self.strategy.rejoin_worker(w)

    def _fail_shard(self, shard: int) -> None:
        """The shard restarts and reads its checkpoint; its range goes back to it."""
        ctx, store = self.ctx, self.server.store
        now = float(ctx.env.now)
        usable = [s for s in self.saves[shard] if s.durable_s <= now]
        save = usable[-1] if usable else None
        down = self.faults.restart_s + (self.plan.read_s if save else 0.0)
        self.server.take_down(shard, down)
        self.shard_up_s[shard] = now + down
        self.lost_s += now - (save.taken_s if save else 0.0)
        self.lost_updates += store.version - (save.version if save else 0)
        self.restart_s += down
        self._note(shard, "restart", now, now + down)
        if ctx.numerics:
            keys = self.server.shard_keys(shard)
            params = save.params if save else ctx.params[keys]
            store.params[keys] = params
            if store.sgd.velocity is not None:
                store.sgd.velocity[keys] = save.velocity if save and save.velocity is not None \
                    else 0.0

    def _note(self, shard: int, what: str, start: float, end: float) -> None:
        """The shard's restart or checkpoint on its trace track (at its end, when the
        shard's other work before it is known)."""
        notes = self.server.notes
        if notes is None:
            return
        self.ctx.env.timeout(end - self.ctx.env.now).callbacks.append(
            lambda _: notes.work(shard, what, start, end))

    # ---- after every update: failures at it, checkpoints ------------------------------

    def _step(self, step: int, worker: int, last: bool) -> None:
        now = float(self.ctx.env.now)
        if worker >= 0:
            self.progress_s[worker] = now
        else:  # an aggregate: every live worker's gradient went into it, or was dropped
            self.progress_s[self.server.store.alive] = now
        for rank in self.at_updates.get(step, ()):  # (not from inside the updating worker)
            self.ctx.env.timeout(0).callbacks.append(lambda _, rank=rank: self.fail(rank))
        if not last and self.plan.enabled and self.plan.due(step, now - self.last_begun_s):
            self._checkpoint(now)

    def _checkpoint(self, now: float) -> None:
        store = self.server.store
        self.last_begun_s = now
        for shard in range(self.shards):
            keys = self.server.shard_keys(shard) if self.ctx.numerics else None
            velocity = store.sgd.velocity
            saves = self.saves[shard]
            wait, durable = self.plan.timing(now, saves[-1].durable_s if saves else 0.0)
            if wait > 0:
                self.server.take_down(shard, wait)
                self._note(shard, "checkpoint", now, now + wait)
            self.checkpoint_s += wait / self.shards
            self.saves[shard].append(ShardSave(
                store.version, now, durable,
                None if keys is None else store.params[keys].copy(),
                None if keys is None or velocity is None else velocity[keys].copy()))

    # ---- results ---------------------------------------------------------------------

    def limit(self, limit_s: float) -> simpy.Event:
        return self.ctx.env.timeout(limit_s)

    def finish(self) -> dict[str, Any]:
        rec = self.ctx.recorder
        end = float(self.ctx.env.now)
        for w in np.flatnonzero(self.down_until > end):  # still restarting at the end
            rec.add_span(int(w), "restart", float(self.down_since[w]), end)
            self.restart_s += end - float(self.down_since[w])
        useful = rec.iteration - self.lost_updates
        return {"recovery": "elastic", "failures": self.failed,
                "checkpoints": min((len(s) for s in self.saves), default=0),
                "lost_work_s": float(self.lost_s), "lost_updates": self.lost_updates,
                "checkpoint_time_s": self.checkpoint_s, "restart_time_s": self.restart_s,
                "goodput_updates_per_s": useful / end if end > 0 else None}

    def trace(self, trace: dict[str, Any]) -> dict[str, Any]:
        return trace
