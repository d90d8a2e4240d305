"""``run.engine = "steady"``: the fast path for a timing-only bsp plan, with the event
engine's results.

The event engine (:class:`~sim.simulated.strategies.model_parallel.ModelParallelBSP`) runs
every rank of replicas x stages x shards as a SimPy process and every tensor allreduce flow
by flow: a 384-rank plan took 35 million events (issue 46), nearly all of them the tensor
groups' rounds. Where the validator admits ``steady`` (:func:`sim.training.validator.
_steady_refusals`: bsp, constant compute, no stragglers, slowdowns, faults or checkpoints,
CPU-free messages, a non-blocking star, and every tensor group alone on its host's link)
the shards of a stage are alike in everything they do:

- each shard computes the same FLOPs in the same order (the plan's :class:`~sim.training.
  parallel_plan.ShardLayer` s of a stage are equal), so they reach each tensor allreduce at
  the same instant, and the group's meeting waits for nobody;
- a tensor group is one host's ranks (``cluster.ranks_per_host = parallel.tensor``) and its
  allreduce runs on that host's link, which nothing else uses (neighbouring stages and
  replicas sit on other hosts: their messages cross the fabric), so every allreduce of a
  size takes the time it takes alone (:mod:`sim.network.two_tier`: the host link and the
  fabric share no link);
- shard k's pipeline messages and data-parallel allreduce use only shard k's NIC ports, and
  on a star no two ports share a link, so shard k's traffic runs exactly as shard 0's.

So :class:`SteadyBSP` runs the event engine's own rank code (the same ``rank_loop``, mail,
meetings, data-parallel allreduce on the live flow network, step closing and summary) for
shard 0 of every replica only, with each tensor allreduce a timeout of its duration alone
(measured once per size, in a probe simulation of the same cluster, by the strategy's own
allreduce), and writes shard 0's times for the other shards. Results (summary.json,
metrics.csv, trace.json: the shard-0 ranks' spans) equal the event engine's to rounding:
tests/simulated/test_steady_state.py checks 1e-6 relative on sim_time_s and every activity.
``events`` is what this engine processed.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from sim.simulated.stages import BubbleTally, StageWork
from sim.simulated.strategies.model_parallel import ModelParallelBSP
from sim.training.stage_schedule import Op


class ShardsAlike(BubbleTally):
    """A bubble tally whose shard-0 passes stand for every shard's."""

    def passed(self, step: int, replica: int, shard: int, start: float, end: float) -> None:
        for k in range(self.shape[1]):
            super().passed(step, replica, k, start, end)


class SteadyBSP(ModelParallelBSP):
    """bsp on a plan, shard 0 of each replica simulated, the other shards copied (module
    docstring)."""

    def start(self) -> None:
        self.setup_replicas()
        self.replays = False  # every data-parallel allreduce on the live network
        self.build_ranks()
        plan = self.plan
        self.bubble = ShardsAlike(plan.replicas, plan.tensor, plan.pipeline)
        self.alone: dict[tuple[int, int], float] = {}  # (stage, bytes) -> allreduce alone, s
        self.probe = AloneProbe(self.ctx.config)
        self.timed = [place.rank for place in plan.ranks if place.shard == 0]
        if self.ctx.numerics:
            raise AssertionError("the validator admits steady only timing only")
        self.loops = [self.ctx.env.process(self.rank_loop(r)) for r in self.timed]

    # ---- what stands for the other shards ---------------------------------------------

    def draw(self, rank: int, work: StageWork, step: int) -> float:
        seconds = super().draw(rank, work, step)
        t = self.plan.tensor
        self.step_compute[step][rank:rank + t] = seconds  # its shards draw the same
        return seconds

    def group_updated(self, step: int) -> None:
        """Shard 0's data group of a stage has updated: so have its other shards'."""
        for _ in range(self.plan.tensor):
            super().group_updated(step)

    def tensor_allreduce(self, rank: int, step: int, op: Op, position: int,
                         nbytes: int) -> Generator[simpy.Event, Any, None]:
        """The tensor group's allreduce of ``nbytes``: its time alone, as the event engine's
        would take it (the shards arrive together; the host link is theirs)."""
        env = self.ctx.env
        stage = self.plan.ranks[rank].stage
        seconds = self.alone.get((stage, nbytes))
        if seconds is None:
            seconds = self.alone[(stage, nbytes)] = self.probe.allreduce_s(
                self.tensor_groups[rank].ranks, nbytes)
        start = env.now
        yield env.timeout(seconds)
        self.ctx.recorder.add_span(rank, "wire", start, env.now)
        self.tensor_s[rank] += env.now - start

    def summary_extra(self) -> dict[str, Any]:
        """The event engine's keys, with each shard-0 rank's times written for its shards."""
        t = self.plan.tensor
        recorder = self.ctx.recorder
        for rank in self.timed:
            for k in range(1, t):
                recorder.copy_time(rank, rank + k)
            self.mail.spent_s[rank + 1:rank + t] = self.mail.spent_s[rank]
            self.tensor_s[rank + 1:rank + t] = self.tensor_s[rank]
        return super().summary_extra()


class AloneProbe:
    """Allreduces timed alone on ``config``'s cluster: the event engine's own allreduce (its
    CPU part and its wire) in a fresh simulation of the same cluster, one after another with
    nothing else running (built on first use)."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.sim: Any = None

    def allreduce_s(self, group: tuple[int, ...], nbytes: int) -> float:
        """Seconds of an allreduce of ``nbytes`` among ``group`` (ranks of the plan)."""
        from sim.simulated.engine import build_simulation  # the engine builds on this module

        if self.sim is None:
            events = self.config.model_copy(update={"run": self.config.run.model_copy(
                update={"engine": "events"})})
            self.sim = build_simulation(events)
            self.sim.strategy.setup_replicas()
        env, ctx, strategy = self.sim
        start = env.now
        env.run(env.process(strategy.allreduce(
            nbytes, group=strategy._group(group, np.asarray(ctx.placed)))))
        return float(env.now - start)
