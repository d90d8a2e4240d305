"""``bsp`` on real ranks: every step, a gradient on each rank, one allreduce, one SGD step.

Follows :class:`sim.training.rules.BSP`, as the simulator does: each rank is worker
``rank``; the allreduce sums the gradients (the simulator's schedule for
``strategy.collective`` over point-to-point messages, or MPI's), every rank takes the mean
and applies the same update (:class:`~sim.real.executors.replica.Replica`), so the replicas
stay equal. ``strategy.pipelining`` runs :mod:`sim.real.executors.bsp_pipelined` instead.
Rank 0 snapshots the parameters at evaluation points. A step's time goes to data (the
batch), compute (the kernel), overhead (posting messages, summing what arrived) and wire
(blocked on a round), update (the SGD step). The allreduce is also the barrier: blocked
time before the slowest rank's gradient is done (found after the run, on the common clock)
is wait, not wire.
"""

from __future__ import annotations

import numpy as np

from sim.real.executors.assemble import Part, RankLog
from sim.real.executors.context import RankContext
from sim.real.executors.rank_collectives import make_allreduce
from sim.real.executors.rank_compute import RealCompute
from sim.real.executors.replica import Replica
from sim.real.executors.restart_rank import RestartRecovery
from sim.recorder import UpdateRecord
from sim.training.workload import Workload


def run(ctx: RankContext) -> RankLog:
    comm, workload, rank, config = ctx.comm, ctx.workload, ctx.rank, ctx.config
    worker = workload.workers[rank]
    replica = Replica(ctx)
    recovery = RestartRecovery(ctx, replica)
    done = recovery.resume()  # updates a checkpoint holds (0: from the start)
    allreduce = make_allreduce(ctx.impl, comm, config.strategy.collective, replica.params.size,
                               ctx.waiter)
    ctx.warm_kernels(replica.params)
    allreduce(np.zeros_like(replica.params))  # warm-up: connections and MPI buffers
    ctx.start_clock()
    recovery.started()
    compute = RealCompute(workload, rank, ctx.t0)
    recovery.attach(compute, allreduce)
    replica.snapshot(done)
    allreduce.parts.clear()  # the warm-up's
    iterations = config.run.iterations
    for update in range(done + 1, iterations + 1):
        loss, _ = compute.gradient(replica.params)
        computed = ctx.now()
        allreduce(worker.grad)  # codec "none": the message is the gradient, summed in place
        if not replica.step(worker.grad, recovery.parts(compute.parts() +
                                                        allreduce.take(ctx.t0)),
                            computed, loss):
            break
        recovery.after(update, update == iterations)
    log = recovery.finish(replica.log)
    log.steps = replica.steps
    return log


def combine(logs: list[RankLog], workload: Workload) -> None:
    """Turn every rank's steps into spans and rank 0's log into the run's updates."""
    steps = [log.steps for log in logs]
    n_steps = min(len(s) for s in steps)
    for k in range(n_steps):
        joined = max(s[k][1] for s in steps)  # the slowest rank's gradient is done
        for rank, s in enumerate(steps):
            logs[rank].spans_of(rank, waiting_for(s[k][0], joined))
        loss = float(np.mean([s[k][3] for s in steps]))
        logs[0].updates.append((steps[0][k][2], UpdateRecord(
            -1, k + 1, k, 0, loss, workload.n * workload.config.workload.batch)))


def waiting_for(parts: list[Part], joined: float) -> list[Part]:
    """``parts`` with the wire time before ``joined`` (the slowest rank's gradient is done)
    turned into wait: no message of the step could arrive before then."""
    out: list[Part] = []
    for kind, start, end in parts:
        if kind == "wire" and start < joined:
            out.append(("wait", start, min(end, joined)))
            if end > joined:
                out.append(("wire", joined, end))
        else:
            out.append((kind, start, end))
    return out
