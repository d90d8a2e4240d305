"""Data parallelism over an allreduce: ``bsp`` and ``local-sgd``.

Both keep one replica per worker in principle; in ``bsp`` the replicas never differ, so one
array stands for all of them.

The network decides *when* an allreduce ends, the kernels *what* it yields: the collective
runs on the simulated network at the message size (timing only) and the sum is taken here,
in rank order, with :func:`sim.kernels.sum_into`. Moving the real vectors through the
schedule would give the same sum up to rounding at O(p^2) small kernel calls per step.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from sim import kernels as K
from sim.network.collectives import get_collective
from sim.network.runner import run_alone
from sim.training.messages import Message
from sim.training.pipeline import AllreduceChannel
from sim.training.rules import SGD
from sim.training.strategies.base import Strategy
from sim.training.strategies.pipelined import PipelinedStrategy


class AllreduceMixin:
    """Time one allreduce per step through the configured collective, in simulated time."""

    def _setup_collective(self) -> None:
        self.collective = get_collective(self.ctx.config.strategy.collective)
        self.hosts = np.array([w.host for w in self.ctx.workers])
        self.elapsed_s: dict[int, float] = {}  # message bytes -> simulated allreduce time

    def allreduce_time(self, nbytes: int) -> Generator[simpy.Event, Any, float]:
        """Wait while every worker allreduces ``nbytes``; returns the time taken (s).

        Nothing else ever uses the network in these strategies and one allreduce ends before
        the next starts, so each starts on an idle network and takes the same time as the
        last one of its size: simulate the first, replay its duration afterwards.
        """
        if nbytes not in self.elapsed_s:
            self.elapsed_s[nbytes] = yield from self.collective.run(
                self.ctx.network, p=self.ctx.n, nbytes=nbytes, hosts=self.hosts)
        else:
            yield self.ctx.env.timeout(self.elapsed_s[nbytes])
        return self.elapsed_s[nbytes]

    def record_comm(self, start: float) -> None:
        for w in self.ctx.workers:
            self.ctx.recorder.add_span(w.index, "wire", start, self.ctx.env.now)


class BSP(AllreduceMixin, PipelinedStrategy):
    """Synchronous SGD: every step averages all workers' gradients with an allreduce.

    Steps run through :mod:`sim.training.pipeline`: with ``strategy.pipelining = "none"``
    each step is compute, then one allreduce of the whole gradient; ``wfbp`` and ``bucket``
    overlap per-layer (or per-bucket) allreduces with backprop.
    """

    name = "bsp"

    def start(self) -> None:
        self._setup_collective()
        ctx = self.ctx
        self.sgd = SGD(ctx.params.copy(), ctx.config.workload)
        self.total = np.zeros(ctx.params.size)  # the sum, then the mean, of the gradients
        self.decoded = np.zeros(ctx.params.size)
        self.compressed_bytes: int | None = None
        self.start_pipeline(AllreduceChannel(ctx.env, ctx.config.strategy.priority,
                                             self.reduce))

    def model_of_record(self) -> np.ndarray:
        return self.sgd.params

    def message_bytes(self, msg: Message) -> int:
        return self.compressed_bytes if self.compressed_bytes is not None else msg.nbytes

    def reduce(self, step: int, msg: Message) -> Generator[simpy.Event, Any, None]:
        yield from self.allreduce_time(self.message_bytes(msg))

    def compute_gradients(self) -> None:
        super().compute_gradients()
        nbytes = self.sum_gradients()
        if self.ctx.config.strategy.compression != "none":
            self.compressed_bytes = nbytes

    def apply_step(self, step: int) -> float:
        rules = self.ctx.rules
        self.sgd.step(rules.mean_of_sum(self.total, self.ctx.n), rules.lr(0))
        return float(np.mean(self.losses))

    def alone_s(self, msg: Message) -> float:
        nbytes = self.message_bytes(msg)
        if nbytes not in self.elapsed_s:
            self.elapsed_s[nbytes], _ = run_alone(
                self.collective, p=self.ctx.n, nbytes=nbytes, fabric=self.ctx.network.fabric,
                **self.ctx.network_options)
        return self.elapsed_s[nbytes]

    def sum_gradients(self) -> int:
        """Sum the workers' gradients as received (decoded) into :attr:`total`, in rank order
        (what the allreduce computes). Returns the bytes of one worker's message (the
        largest, if compressed sizes differ)."""
        sizes = []
        for i, w in enumerate(self.ctx.workers):
            message, nbytes = w.codec.encode(w.grad)
            w.codec.decode(message, self.decoded if i else self.total)
            if i:
                K.sum_into(self.total, self.decoded)
            sizes.append(nbytes)
        return max(sizes)


class LocalSGD(AllreduceMixin, Strategy):
    """Each worker takes H local SGD steps on its own replica; then the replicas are averaged.

    An update is one local step of every worker, recorded when the slowest has taken it.
    """

    name = "local-sgd"

    def start(self) -> None:
        self._setup_collective()
        ctx = self.ctx
        self.sgd = [SGD(ctx.params.copy(), ctx.config.workload) for _ in ctx.workers]
        self.replicas = [sgd.params for sgd in self.sgd]
        self.average = ctx.params.copy()
        ctx.env.process(self.run())

    def model_of_record(self) -> np.ndarray:
        return self.ctx.rules.average(self.replicas, self.average)

    def local_step(self, i: int) -> float:
        w = self.ctx.workers[i]
        loss = w.gradient(self.replicas[i])
        self.sgd[i].step(w.grad, self.ctx.rules.lr(0))
        return loss

    def run(self) -> Generator[simpy.Event, Any, None]:
        ctx, rec, env = self.ctx, self.ctx.recorder, self.ctx.env
        period = ctx.config.strategy.local_steps
        step = 0
        while not rec.finished:
            start = env.now
            # each worker runs its H steps back to back; float: env.now starts as the int 0
            busy_until = np.full(ctx.n, start, dtype=np.float64)
            for h in range(period):
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
                if rec.finished and h < period - 1:
                    return  # mid-period: the workers ahead are busy with their next step
            for w in ctx.workers:  # the period is over: the fast wait for the slowest
                rec.add_span(w.index, "wait", busy_until[w.index], env.now)
            if rec.finished:
                return
            comm_start = env.now
            yield from self.allreduce_time(self.average.nbytes)
            self.record_comm(comm_start)
            mean = self.model_of_record()
            for replica in self.replicas:  # every worker ends with the mean, same bits
                K.copy(replica, mean)
