"""Elastic averaging SGD, asynchronous (Zhang, Choromanska and LeCun 2015).

Each worker trains its own replica x_i with local SGD steps; every tau steps it pulls
the center variable x~ from the servers, moves toward it by alpha (x_i - x~), and pushes
the same amount so that the center moves toward x_i. An update is one local step.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from sim import kernels as K
from sim.simulated.strategies.base import Strategy, block, compute, cpu, pull, push
from sim.training.rules import SGD
from sim.training.workload import Worker


class EASGD(Strategy):
    """Elastic averaging SGD: local replicas pulled toward a center variable every tau steps."""


    def start(self) -> None:
        ctx = self.ctx
        self.sgd = [SGD(ctx.params.copy(), ctx.config) for _ in ctx.workers]
        self.replicas = [sgd.params for sgd in self.sgd]
        self.restarted = [False] * ctx.n  # its replica was lost: it starts from the center
        self.start_loops()

    def rejoin_worker(self, index: int) -> None:
        self.restarted[index] = True
        super().rejoin_worker(index)

    def model_of_record(self) -> np.ndarray:
        return self.ctx.server.store.params  # the center variable

    def work(self, w: Worker) -> Generator[simpy.Event, Any, None]:
        ctx, rec, server = self.ctx, self.ctx.recorder, self.ctx.server
        strategy = ctx.config.strategy
        x, center = self.replicas[w.index], np.zeros(ctx.model.size)
        if self.restarted[w.index]:
            yield from pull(ctx, w, x)
        while not rec.finished:
            loss = w.gradient(x)
            yield from compute(ctx, w)
            if rec.finished:
                return
            self.sgd[w.index].step(w.grad, ctx.rules.lr(0))
            yield from cpu(ctx, w.index, "update", ctx.cpu.update_s(x.nbytes))
            w.clock += 1
            rec.update(w.index, w.clock, server.store.version, 0, loss, w.batch)
            if w.clock % strategy.local_steps == 0:
                yield from self.exchange(w, x, center)

    def exchange(self, w: Worker, x: np.ndarray,
                 center: np.ndarray) -> Generator[simpy.Event, Any, None]:
        """The elastic step: x -= alpha (x - center); the center gets the opposite push."""
        ctx = self.ctx
        yield from pull(ctx, w, center)
        diff = ctx.rules.elastic_difference(x, center)  # in center's buffer
        K.axpy(-1.0, diff, x)
        yield from cpu(ctx, w.index, "update", ctx.cpu.update_s(x.nbytes))
        processed = yield from push(ctx, w, diff.nbytes, ctx.cpu.update_s)
        yield from block(ctx, w.index, "wire", processed)
        ctx.rules.move_center(ctx.server.store, diff)
