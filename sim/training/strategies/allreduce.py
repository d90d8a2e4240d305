"""Data parallelism over an allreduce: ``bsp`` and ``local-sgd``.

Both keep one replica per worker in principle; in ``bsp`` the replicas never differ, so one
array stands for all of them.

The network decides *when* an allreduce ends, the kernels *what* it yields: the collective
runs on the simulated network at the message size (timing only) and the sum is taken here,
in rank order, with :func:`sim.kernels.sum_into`. Moving the real vectors through the
schedule would give the same sum up to rounding at O(p^2) small kernel calls per step.

Compressed ``bsp`` gathers instead of reducing: a sum of top-k vectors is not k-sparse and a
sum of quantised ones needs wider integers, so every worker's compressed message goes to
every worker (``strategy.allgather``: (p - 1) messages of the compressed size per worker
on the ring) and each decodes and adds the p - 1 it received, as QSGD (Alistarh et al.
2017) and SparCML (Renggli et al. 2019) exchange them.
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
from sim.training.server import transfer
from sim.training.strategies.base import Strategy, block, compute, cpu, everyone
from sim.training.strategies.pipelined import PipelinedStrategy
from sim.workloads.workload import Worker


class AllreduceMixin:
    """Time one allreduce per step through the configured collective, in simulated time:
    each rank's CPU for it (posting and copying its messages, summing what arrives), then
    its messages on the network. (An allgather, for compressed gradients, goes the same way;
    ``nbytes`` is then each rank's message.)"""

    def _setup_collective(self, name: str | None = None) -> None:
        """``name``: the collective (default ``strategy.collective``)."""
        self.collective = get_collective(name or self.ctx.config.strategy.collective)
        self.hosts = np.array([w.host for w in self.ctx.workers])
        self.elapsed_s: dict[int, float] = {}  # message bytes -> simulated allreduce time
        self.cpu_s: dict[int, float] = {}  # message bytes -> CPU of a rank, busiest path
        # CPU s of a rank after the collective, decoding and adding what it received (an
        # allgather's p - 1 messages); an allreduce's sums are in its rounds already
        self.decode_s = 0.0

    def allreduce_cpu_s(self, nbytes: int) -> float:
        """CPU seconds of one allreduce of ``nbytes`` on a rank (its busiest path, then the
        decoding)."""
        if nbytes not in self.cpu_s:
            schedule = self.collective.schedule(self.ctx.n, int(nbytes))
            self.cpu_s[nbytes] = self.ctx.cpu.collective_s(schedule, 1.0)
        return self.cpu_s[nbytes] + self.decode_s

    def allreduce(self, nbytes: int,
                  overlapped: bool = False) -> Generator[simpy.Event, Any, None]:
        """Every worker allreduces ``nbytes``: their CPU, then the wire, both recorded.

        The CPU part comes first as a lump: ring rounds alternate CPU and wire, and their
        sum is the same in either order when the ranks are alike. Ranks that share cores
        are not alike (they wait for a core, and to notice their messages): then round by
        round (:meth:`allreduce_by_rounds`).
        """
        if any(self.ctx.hosts.shared.values()):
            yield from self.allreduce_by_rounds(nbytes, overlapped)
            return
        yield from everyone(self.ctx, "overhead", self.allreduce_cpu_s(nbytes), overlapped)
        start = self.ctx.env.now
        yield from self.allreduce_time(nbytes)
        for w in self.ctx.workers:
            self.ctx.recorder.add_span(w.index, "wire", start, self.ctx.env.now, overlapped)

    def allreduce_by_rounds(self, nbytes: int,
                            overlapped: bool = False) -> Generator[simpy.Event, Any, None]:
        """Each round of the schedule: every rank posts its sends on its core, the round's
        messages cross the network, each rank notices them as it waits (spinning or
        polling, :meth:`sim.training.hosts.Hosts.wait`) and receives, and sums, them on
        its core."""
        ctx, env, costs = self.ctx, self.ctx.env, self.ctx.cpu
        schedule = self.collective.schedule(ctx.n, int(nbytes))
        ranks = range(ctx.n)

        def on_cores(seconds: np.ndarray) -> simpy.Event:
            return simpy.AllOf(env, [env.process(cpu(ctx, w, "overhead", float(seconds[w]),
                                                     overlapped)) for w in ranks])

        for r in range(schedule.n_rounds):
            rnd = schedule.round(r)
            if not len(rnd):
                continue
            sent, received = costs.round_s(rnd, schedule.n_endpoints)
            yield on_cores(sent)
            # the round's messages alone (a collective's plan would be charged whole by the
            # analytical network's closed form)
            arrived = transfer(ctx.network, self.hosts[rnd.src], self.hosts[rnd.dst],
                               rnd.count.astype(float))
            yield simpy.AllOf(env, [env.process(block(ctx, w, "wire", arrived, overlapped))
                                    for w in ranks])
            yield from self.round_handshake(rnd, overlapped)
            yield on_cores(received)
        if self.decode_s:
            yield on_cores(np.full(ctx.n, self.decode_s))

    def round_handshake(self, rnd: Any,
                        overlapped: bool) -> Generator[simpy.Event, Any, None]:
        """The round's messages beyond the eager limit finish their rendezvous (the
        slowest one; :meth:`sim.training.hosts.Hosts.handshake_s`), recorded as wire."""
        ctx = self.ctx
        handshake = ctx.hosts.slowest_handshake_s(rnd.src, rnd.dst, rnd.count)
        if handshake <= 0:
            return
        start = ctx.env.now
        yield ctx.env.timeout(handshake)
        for w in ctx.workers:
            ctx.recorder.add_span(w.index, "wire", start, ctx.env.now, overlapped)

    def allreduce_time(self, nbytes: int) -> Generator[simpy.Event, Any, float]:
        """Wait while every worker's messages of an allreduce of ``nbytes`` cross the
        network; returns the time taken (s).

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


class BSP(AllreduceMixin, PipelinedStrategy):
    """Synchronous SGD: every step averages all workers' gradients with an allreduce.

    Steps run through :mod:`sim.training.pipeline`: with ``strategy.pipelining = "none"``
    each step is compute, then one allreduce of the whole gradient; ``wfbp`` and ``bucket``
    overlap per-layer (or per-bucket) allreduces with backprop. Compressed gradients are
    allgathered (``strategy.allgather``) and each worker decodes the p - 1 it receives.
    """

    name = "bsp"

    def start(self) -> None:
        ctx = self.ctx
        strategy = ctx.config.strategy
        if strategy.compression == "none":
            self._setup_collective()
        else:
            self._setup_collective(strategy.allgather)
            self.decode_s = (ctx.n - 1) * ctx.cpu.reduce_s(ctx.workers[0].codec.decode_bytes)
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
        """The message's allreduce, then every replica's mean of the sum (a pass at the
        summing rate) and SGD step over its layers."""
        lapped, costs = self.pipe.overlapped, self.ctx.cpu
        yield from self.allreduce(self.message_bytes(msg), lapped)
        yield from everyone(self.ctx, "update",
                            costs.reduce_s(msg.nbytes) + costs.update_s(msg.nbytes), lapped)

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
        """The message's allreduce alone on an idle network, with its CPU."""
        nbytes = self.message_bytes(msg)
        if nbytes not in self.elapsed_s:
            self.elapsed_s[nbytes], _ = run_alone(
                self.collective, p=self.ctx.n, nbytes=nbytes, fabric=self.ctx.network.fabric,
                **self.ctx.network_options)
        return self.elapsed_s[nbytes] + self.allreduce_cpu_s(nbytes)

    def sum_gradients(self) -> int:
        """Sum the workers' gradients as received (decoded) into :attr:`total`, in rank order
        (what the allreduce computes, or each worker after the allgather). Returns the bytes
        of one worker's message (the largest, if compressed sizes differ)."""
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
        self.step = 0
        while not rec.finished:
            self.losses = np.zeros((period, ctx.n))  # step h's loss on each worker
            self.taken = [0] * period  # workers that took local step h of this period
            self.barrier = env.event()  # every worker took the period's last step
            yield simpy.AllOf(env, [env.process(self.local_steps(w, period))
                                    for w in ctx.workers])
            if rec.finished:
                return
            yield from self.allreduce(self.average.nbytes)
            mean = self.model_of_record()
            for replica in self.replicas:  # every worker ends with the mean, same bits
                K.copy(replica, mean)

    def local_steps(self, w: Worker, period: int) -> Generator[simpy.Event, Any, None]:
        """``w``'s H local steps (batch, gradient, SGD step on its replica), then a wait for
        the slowest worker; an update is recorded when every worker has taken step h."""
        ctx, rec = self.ctx, self.ctx.recorder
        for h in range(period):
            self.losses[h, w.index] = self.local_step(w.index)
            yield from compute(ctx, w)
            yield from cpu(ctx, w.index, "update", ctx.cpu.update_s(self.average.nbytes))
            w.clock += 1
            self.taken[h] += 1
            if self.taken[h] == ctx.n:
                self.step += 1
                rec.update(-1, self.step, self.step - 1, 0, float(np.mean(self.losses[h])),
                           ctx.n * w.batch)
            if rec.finished:
                return  # mid-period: the workers ahead are busy with their next step
        if self.taken[-1] == ctx.n:
            self.barrier.succeed()
            return
        with rec.span(w.index, "wait"):
            yield self.barrier
