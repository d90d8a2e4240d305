"""Synchronous training through parameter servers: ``bsp-ps`` and ``backup``.

Each step every worker pulls the parameters, computes a gradient and pushes it; the
server sums the gradients it accepts in worker order, applies their mean once, and the
next step begins. With b backup workers (Chen et al. 2016, "Revisiting distributed
synchronous SGD") the step closes as soon as N - b gradients have arrived: the workers
still computing are cancelled and the late gradients are dropped on arrival.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from sim import kernels as K
from sim.training.strategies.base import Strategy
from sim.training.worker import Worker, compute


class BSPPS(Strategy):
    """Synchronous SGD through sharded parameter servers: push, barrier, pull."""

    name = "bsp-ps"
    uses_servers = True

    def start(self) -> None:
        ctx = self.ctx
        self.replicas = [np.zeros(ctx.model.size) for _ in ctx.workers]
        self.decoded = np.zeros(ctx.model.size)
        self.total = np.zeros(ctx.model.size)
        ctx.env.process(self.run())

    def model_of_record(self) -> np.ndarray:
        return self.ctx.server.params

    @property
    def needed(self) -> int:
        """Gradients that close a step."""
        return self.ctx.n

    def run(self) -> Generator[simpy.Event, Any, None]:
        ctx, env, rec = self.ctx, self.ctx.env, self.ctx.recorder
        while not rec.finished:
            self.arrived: dict[int, tuple[Any, float]] = {}
            self.closed = env.event()
            step = ctx.server.version
            rounds = [env.process(self.worker_step(w, step)) for w in ctx.workers]
            yield self.closed
            for process in rounds:
                if process.is_alive:
                    process.interrupt("step closed")
            self.apply(step)

    def worker_step(self, w: Worker, step: int) -> Generator[simpy.Event, Any, None]:
        ctx, rec = self.ctx, self.ctx.recorder
        try:
            with rec.span(w.index, "comm"):
                yield from ctx.server.pull(w.host, self.replicas[w.index])
            loss = w.gradient(self.replicas[w.index])
            yield from compute(ctx, w)
            message, nbytes = w.codec.encode(w.grad)
            with rec.span(w.index, "comm"):
                yield ctx.server.push(w.host, nbytes)
            if self.closed.triggered:
                return  # another gradient arrived first at this instant and closed the step
            self.arrived[w.index] = (message, loss)
            if len(self.arrived) == self.needed:
                self.closed.succeed()
            with rec.span(w.index, "wait"):
                yield self.closed
        except simpy.Interrupt:
            pass  # the step closed without this worker: its work is dropped

    def apply(self, step: int) -> None:
        ctx = self.ctx
        accepted = sorted(self.arrived)  # sum in worker order: reproducible rounding
        self.total[:] = 0
        for i in accepted:
            ctx.workers[i].codec.decode(self.arrived[i][0], self.decoded)
            K.sum_into(self.total, self.decoded)
            ctx.workers[i].clock += 1
        K.scale(1.0 / len(accepted), self.total)
        ctx.server.apply(self.total, self.step_lr(0))
        loss = float(np.mean([self.arrived[i][1] for i in accepted]))
        ctx.recorder.update(-1, ctx.server.version, step, 0, loss,
                            len(accepted) * ctx.workers[0].batch)


class Backup(BSPPS):
    """Synchronous SGD with b backup workers: each step uses the first N - b gradients."""

    name = "backup"

    @property
    def needed(self) -> int:
        return self.ctx.n - self.ctx.config.strategy.backup
