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


class Replica:
    """The parameters every rank holds, stepped identically after each allreduce, and the
    rank's log of its steps (compute start, compute end, comm end, update end, loss)."""

    def __init__(self, ctx: RankContext) -> None:
        self.ctx, self.params = ctx, ctx.parts.params.copy()
        momentum = ctx.config.workload.momentum
        self.velocity = np.zeros_like(self.params) if momentum > 0 else None
        self.log, self.steps = RankLog(ctx.rank), []

    def snapshot(self, iteration: int) -> None:
        if self.ctx.rank == 0 and (iteration == 0 or wants_snapshot(iteration, self.ctx.config)):
            self.log.snapshots[iteration] = self.params.copy()

    def step(self, summed: np.ndarray, times: tuple[float, float, float], loss: float) -> bool:
        """Apply the mean of the summed gradients; False once a NaN/Inf stops the run."""
        workload = self.ctx.config.workload
        try:
            K.scale(1.0 / self.ctx.parts.n, summed)
            K.sgd_update(self.params, summed, self.velocity, workload.lr, workload.momentum,
                         workload.weight_decay)
        except NonFiniteError:  # every rank holds the same NaNs: all stop at this step
            self.log.diverged = True
            return False
        self.steps.append((*times, self.ctx.now(), loss))
        self.snapshot(len(self.steps))
        self.ctx.heartbeat.beat()
        return True


def run(ctx: RankContext) -> RankLog:
    if ctx.config.strategy.pipelining != "none":
        from sim.real import bsp_pipelined

        return bsp_pipelined.run(ctx)
    comm, parts, rank, config = ctx.comm, ctx.parts, ctx.rank, ctx.config
    worker = parts.workers[rank]
    replica = Replica(ctx)
    allreduce = make_allreduce(ctx.impl, comm, config.strategy.collective, replica.params.size,
                               ctx.waiter)
    ctx.warm_kernels(replica.params)
    allreduce(np.zeros_like(replica.params))  # warm-up: connections and MPI buffers
    ctx.start_clock()
    compute = RealCompute(parts, rank, ctx.t0)
    replica.snapshot(0)
    for _ in range(config.run.iterations):
        start = ctx.now()
        loss, _ = compute.gradient(replica.params)
        computed = ctx.now()
        allreduce(worker.grad)  # codec "none": the message is the gradient, summed in place
        if not replica.step(worker.grad, (start, computed, ctx.now()), loss):
            break
    log = replica.log
    log.kernel_s, log.messages, log.steps = compute.kernel_s, allreduce.messages, replica.steps
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
