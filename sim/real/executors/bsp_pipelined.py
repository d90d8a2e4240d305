"""``bsp`` with layer-wise pipelining on real ranks: wait-free backprop or DDP-style buckets.

Mirrors :class:`sim.simulated.strategies.allreduce.BSP` with ``strategy.pipelining`` set, and
the model in :mod:`sim.simulated.backprop_overlap`: the gradient leaves in the same messages
(``plan_messages``); a message is allreduced (non-blocking) once backward has produced all
its layers; one message is on the wire at a time, in the order they became ready; the
communication is progressed between layers while backward goes on. Every rank produces
the messages in the same (backward) order, so the ranks agree on the order of their
collectives. Priority ordering is not run for real: it would need the ranks to agree on
which ready message goes next (P3 and ByteScheduler use a coordinator for that).
"""

from __future__ import annotations

import math
import time

import numpy as np

from sim.kernels import NonFiniteError
from sim.real.executors import bsp
from sim.real.executors.assemble import RankLog, carve
from sim.real.executors.context import RankContext
from sim.real.executors.rank_collectives import Allreduce, make_allreduce
from sim.real.executors.rank_compute import RealCompute
from sim.real.executors.replica import Replica
from sim.training.messages import LayerCosts, message_slice, plan_messages

combine = bsp.combine  # the steps are logged as plain bsp's


class Channel:
    """Ready messages go out one at a time, first ready first (the simulator's channel)."""

    def __init__(self, reducers: list[Allreduce], slices: list[slice], grad: np.ndarray):
        self.reducers, self.slices, self.grad = reducers, slices, grad
        self.ready: list[int] = []
        self.busy: int | None = None
        self.done = 0

    def progress(self) -> bool:
        """Finish the message on the wire if it is done, start the next ready one."""
        if self.busy is not None and self.reducers[self.busy].test():
            self.busy, self.done = None, self.done + 1
        if self.busy is None and self.ready:
            self.busy = self.ready.pop(0)
            self.reducers[self.busy].start(self.grad[self.slices[self.busy]])
        return False  # for sleep_until: never cut the modelled compute short

    def finish(self) -> None:
        while self.done < len(self.slices):
            if self.busy is not None:
                self.reducers[self.busy].wait()
                self.busy, self.done = None, self.done + 1
            self.progress()


def run(ctx: RankContext) -> RankLog:
    comm, workload, rank, config = ctx.comm, ctx.workload, ctx.rank, ctx.config
    worker, strategy = workload.workers[rank], config.strategy
    model = worker.model
    replica = Replica(ctx)
    messages = plan_messages(LayerCosts.from_model(model).grad_bytes, strategy.pipelining,
                             strategy.bucket_bytes)
    first_layer = {msg.lo: m for m, msg in enumerate(messages)}
    slices = [message_slice(msg, model) for msg in messages]
    reducers = [make_allreduce(ctx.impl, comm, strategy.collective, sl.stop - sl.start,
                               ctx.waiter) for sl in slices]
    ctx.warm_kernels(replica.params)
    for reducer, sl in zip(reducers, slices, strict=True):  # warm-up: every message size
        reducer(np.zeros(sl.stop - sl.start))
        reducer.parts.clear()
    ctx.start_clock()
    compute = RealCompute(workload, rank, ctx.t0)
    replica.snapshot(0)
    for _ in range(config.run.iterations):
        begin = ctx.now()
        channel = Channel(reducers, slices, worker.grad)
        loss, gathered = _backward(worker, model, replica.params, first_layer, channel,
                                   compute)
        computed = ctx.now()
        channel.finish()
        # backward is compute, except the messages posted and tested between its layers
        parts = carve(("compute", gathered - ctx.t0, computed),
                      [p for r in reducers for p in r.take(ctx.t0)])
        if not replica.step(worker.grad, [("data", begin, gathered - ctx.t0), *parts],
                            computed, loss):
            break
    log = replica.log
    log.kernel_s, log.steps = compute.kernel_s, replica.steps
    log.messages = sum(r.messages for r in reducers)
    return log


def _backward(worker, model, params, first_layer, channel: Channel,
              compute: RealCompute) -> tuple[float, float]:
    """Forward, then backward layer by layer, handing each finished message to the channel;
    then the rest of the modelled compute time (noise, stragglers), progressing the channel.
    (loss, perf_counter when the batch was gathered)."""
    X, y = worker.next_batch()
    started = time.perf_counter()
    loss = math.nan
    try:
        for step_loss, layer in model.backward_layers(params, X, y, worker.grad):
            loss = step_loss
            if layer in first_layer:
                channel.ready.append(first_layer[layer])
            channel.progress()
    except NonFiniteError:
        worker.grad.fill(math.nan)
    compute.pad(started, channel.progress)
    return loss, started
