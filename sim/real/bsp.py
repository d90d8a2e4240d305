"""``bsp`` on real ranks: every step, a gradient on each rank, one allreduce, one SGD step.

Mirrors :class:`sim.training.strategies.allreduce.BSP`: each rank is worker ``rank``; the
allreduce sums the gradients (the simulator's schedule for ``strategy.collective`` over
point-to-point messages, or MPI's), every rank scales by 1/N and applies the same update,
so the replicas stay equal. Rank 0 snapshots the parameters at evaluation points. The
allreduce is also the barrier: a rank's wait is the time from the end of its gradient to the
end of the slowest rank's (found after the run, on the common clock), the rest is comm.
"""

from __future__ import annotations

import numpy as np

from sim import kernels as K
from sim.kernels import NonFiniteError
from sim.real.assemble import RankLog, wants_snapshot
from sim.real.collective import make_allreduce
from sim.real.parts import Parts, RealCompute
from sim.real.strategies import RankContext


def run(ctx: RankContext) -> RankLog:
    if ctx.config.strategy.pipelining != "none":
        from sim.real import bsp_pipelined

        return bsp_pipelined.run(ctx)
    comm, parts, rank = ctx.comm, ctx.parts, ctx.rank
    config, worker = ctx.config, parts.workers[rank]
    workload = config.workload
    params = parts.params.copy()
    velocity = np.zeros_like(params) if workload.momentum > 0 else None
    allreduce = make_allreduce(ctx.impl, comm, config.strategy.collective, params.size,
                               ctx.waiter)
    ctx.warm_kernels(params)
    allreduce(np.zeros_like(params))  # warm-up: connections and MPI buffers
    ctx.start_clock()
    compute = RealCompute(parts, rank, ctx.t0)
    log = RankLog(rank)
    if rank == 0:
        log.snapshots[0] = params.copy()
    steps = []  # compute start, compute end, comm end, update end, loss
    for step in range(config.run.iterations):
        start = ctx.now()
        loss, _ = compute.gradient(params)
        computed = ctx.now()
        allreduce(worker.grad)  # codec "none": the message is the gradient, summed in place
        reduced = ctx.now()
        try:
            K.scale(1.0 / parts.n, worker.grad)
            K.sgd_update(params, worker.grad, velocity, workload.lr, workload.momentum,
                         workload.weight_decay)
        except NonFiniteError:  # every rank holds the same NaNs: all stop at this step
            log.diverged = True
            break
        steps.append((start, computed, reduced, ctx.now(), loss))
        if rank == 0 and wants_snapshot(step + 1, config):
            log.snapshots[step + 1] = params.copy()
        ctx.heartbeat.beat()
    log.kernel_s, log.messages, log.steps = compute.kernel_s, allreduce.messages, steps
    return log


def combine(logs: list[RankLog], parts: Parts) -> None:
    """Turn every rank's steps into spans and rank 0's log into the run's updates."""
    steps = [log.steps for log in logs]
    n_steps = min(len(s) for s in steps)
    for k in range(n_steps):
        joined = max(s[k][1] for s in steps)  # the slowest rank's gradient is done
        for rank, s in enumerate(steps):
            start, computed, reduced, updated, _ = s[k]
            log = logs[rank]
            log.span(rank, "compute", start, computed)
            log.span(rank, "wait", computed, joined)
            log.span(rank, "comm", max(joined, computed), reduced)
            log.span(rank, "compute", reduced, updated)  # the local SGD step
        loss = float(np.mean([s[k][4] for s in steps]))
        logs[0].updates.append((steps[0][k][3], -1, k + 1, k, 0, None, loss,
                                parts.n * parts.workers[0].batch))
