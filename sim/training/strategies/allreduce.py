"""Data parallelism over an allreduce: ``bsp`` and ``local-sgd``.

Both keep one replica per worker in principle; in ``bsp`` the replicas never differ, so one
array stands for all of them.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from sim import kernels as K
from sim.network.collectives import get_collective
from sim.training.strategies.base import Strategy


class AllreduceMixin:
    """Sum one vector per worker through the configured collective, in simulated time."""

    def _setup_collective(self) -> None:
        self.collective = get_collective(self.ctx.config.strategy.collective)
        self.hosts = np.array([w.host for w in self.ctx.workers])

    def allreduce(self, vectors: list[np.ndarray],
                  nbytes: int | None = None) -> Generator[simpy.Event, Any, float]:
        """Sum ``vectors`` in place (every one ends with the sum); returns the time taken.

        With ``nbytes`` (compressed messages) only the time is simulated at that size and the
        sum is taken here, in rank order.
        """
        net = self.ctx.network
        if nbytes is None:
            return (yield from self.collective.run(net, vectors, hosts=self.hosts))
        elapsed = yield from self.collective.run(net, p=len(vectors), nbytes=nbytes,
                                                 hosts=self.hosts)
        for v in vectors[1:]:
            K.sum_into(vectors[0], v)
        for v in vectors[1:]:
            K.copy(v, vectors[0])
        return elapsed

    def record_comm(self, start: float) -> None:
        for w in self.ctx.workers:
            self.ctx.recorder.add_span(w.index, "comm", start, self.ctx.env.now)


class BSP(AllreduceMixin, Strategy):
    """Synchronous SGD: every step averages all workers' gradients with an allreduce."""

    name = "bsp"

    def start(self) -> None:
        self._setup_collective()
        ctx = self.ctx
        self.params = ctx.params.copy()
        self.velocity = np.zeros_like(self.params) if ctx.config.workload.momentum > 0 else None
        self.payload = [np.zeros(ctx.model.size) for _ in ctx.workers]
        ctx.env.process(self.run())

    def model_of_record(self) -> np.ndarray:
        return self.params

    def run(self) -> Generator[simpy.Event, Any, None]:
        ctx, rec, env = self.ctx, self.ctx.recorder, self.ctx.env
        step = 0
        while not rec.finished:
            start = env.now
            losses = [w.gradient(self.params) for w in ctx.workers]
            ends = [start + ctx.compute.duration(w.index, start) for w in ctx.workers]
            yield env.timeout(max(ends) - start)
            for w, end in zip(ctx.workers, ends, strict=True):  # barrier: wait for the last
                rec.add_span(w.index, "compute", start, end)
                rec.add_span(w.index, "wait", end, env.now)
            nbytes = self.encode_all()
            comm_start = env.now
            yield from self.allreduce(self.payload, nbytes)
            self.record_comm(comm_start)
            total = self.payload[0]
            K.scale(1.0 / ctx.n, total)
            K.sgd_update(self.params, total, self.velocity, ctx.lr,
                         ctx.config.workload.momentum, ctx.config.workload.weight_decay)
            step += 1
            for w in ctx.workers:
                w.clock = step
            rec.update(-1, step, step - 1, 0, float(np.mean(losses)),
                       ctx.n * ctx.workers[0].batch)

    def encode_all(self) -> int | None:
        """Each worker's (decoded) gradient into its payload; message bytes if compressed."""
        sizes = []
        for w, out in zip(self.ctx.workers, self.payload, strict=True):
            message, nbytes = w.codec.encode(w.grad)
            w.codec.decode(message, out)
            sizes.append(nbytes)
        if self.ctx.config.strategy.compression == "none":
            return None
        return max(sizes)


class LocalSGD(AllreduceMixin, Strategy):
    """Each worker takes H local SGD steps on its own replica; then the replicas are averaged.

    An update is one local step of every worker, recorded when the slowest has taken it.
    """

    name = "local-sgd"

    def start(self) -> None:
        self._setup_collective()
        ctx = self.ctx
        self.replicas = [ctx.params.copy() for _ in ctx.workers]
        momentum = ctx.config.workload.momentum
        self.velocity = [np.zeros_like(ctx.params) if momentum > 0 else None
                         for _ in ctx.workers]
        self.average = ctx.params.copy()
        ctx.env.process(self.run())

    def model_of_record(self) -> np.ndarray:
        return K.average(self.replicas, out=self.average)

    def local_step(self, i: int) -> float:
        w, cfg = self.ctx.workers[i], self.ctx.config.workload
        loss = w.gradient(self.replicas[i])
        K.sgd_update(self.replicas[i], w.grad, self.velocity[i], cfg.lr, cfg.momentum,
                     cfg.weight_decay)
        return loss

    def run(self) -> Generator[simpy.Event, Any, None]:
        ctx, rec, env = self.ctx, self.ctx.recorder, self.ctx.env
        period = ctx.config.strategy.local_steps
        step = 0
        while not rec.finished:
            start = env.now
            busy_until = np.full(ctx.n, start)  # each worker runs its H steps back to back
            for _ in range(period):
                losses = []
                for w in ctx.workers:
                    losses.append(self.local_step(w.index))
                    end = busy_until[w.index] + ctx.compute.duration(w.index,
                                                                     busy_until[w.index])
                    rec.add_span(w.index, "compute", busy_until[w.index], end)
                    busy_until[w.index] = end
                    w.clock += 1
                yield env.timeout(busy_until.max() - env.now)
                step += 1
                rec.update(-1, step, step - 1, 0, float(np.mean(losses)),
                           ctx.n * ctx.workers[0].batch)
                if rec.finished:
                    return
            for w in ctx.workers:
                rec.add_span(w.index, "wait", busy_until[w.index], env.now)
            comm_start = env.now
            yield from self.allreduce(self.replicas)
            self.record_comm(comm_start)
            for replica in self.replicas:
                K.scale(1.0 / ctx.n, replica)
