"""The parameters every bsp rank holds, stepped identically after each allreduce."""

from __future__ import annotations

import numpy as np

from sim.kernels import NonFiniteError
from sim.real.executors.assemble import Part, RankLog
from sim.real.executors.context import RankContext
from sim.training.rules import SGD


class Replica:
    """A rank's replica and its log of steps (spans, when the rank was ready to reduce,
    update end, loss); rank 0 snapshots the model of record where the rules evaluate it."""

    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx
        self.sgd = SGD(ctx.workload.params.copy(), ctx.config)
        self.log, self.steps = RankLog(ctx.rank), []
        if ctx.rank == 0:  # the rank that snapshots the model of record
            self.log.reserve(self.params.size, ctx.rules, ctx.config.run.iterations)

    @property
    def params(self) -> np.ndarray:
        return self.sgd.params

    def snapshot(self, iteration: int) -> None:
        if self.ctx.rank == 0:
            self.log.snapshot(self.params, self.ctx.rules, iteration)

    def step(self, summed: np.ndarray, parts: list[Part], ready: float, loss: float) -> bool:
        """Apply the mean of the summed gradients (timed: ``update``); False once a NaN/Inf
        stops the run. ``parts``: the step's spans so far; ``ready``: when this rank's
        gradient was done (it joined the allreduce)."""
        rules = self.ctx.rules
        began = self.ctx.now()
        try:
            self.sgd.step(rules.mean_of_sum(summed, self.ctx.workload.n), rules.lr(0))
        except NonFiniteError:  # every rank holds the same NaNs: all stop at this step
            self.log.diverged = True
            return False
        updated = self.ctx.now()
        self.steps.append(([*parts, ("update", began, updated)], ready, updated, loss))
        self.snapshot(len(self.steps))
        self.ctx.heartbeat.beat()
        return True
