"""Parameter-server strategies on real ranks: ``bsp-ps``, ``backup``, ``asp``, ``ssp``.

Ranks 0..N-1 are the workers, rank N the server, as in the simulator (servers after the
workers). Every message is one float64 array: an 8-value header (64 bytes, the simulator's
pull-request size) followed by the payload, all on one tag, so messages between two ranks
arrive in the order they were sent. A worker loops: pull (request, then the parameters),
gradient, push. The server answers a pull at once or holds it, and applies gradients with
the update rules of :mod:`sim.training.strategies.ps_async` and ``ps_sync``:

* ``asp``: every gradient, lr / N, staleness = updates between read and write;
* ``ssp``: as asp, but a pull waits while the worker's clock is more than ``staleness``
  ahead of the slowest worker's (the server keeps the clock table);
* ``bsp-ps`` / ``backup``: a step closes after N (N - b) gradients of that step; their mean,
  summed in worker order, is one SGD step; workers still computing are sent a cancel (they
  drop their gradient, as the simulator interrupts them) and late pushes are dropped; a
  worker that pushed waits (its next pull is held) until the step closes.

Once ``run.iterations`` updates are applied, the server answers every pull with STOP.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim import kernels as K
from sim.kernels import NonFiniteError
from sim.real.assemble import RankLog, wants_snapshot
from sim.real.parts import RealCompute
from sim.real.strategies import RankContext

HEADER = 8  # type, worker, version, loss, arrival_s, grant_s, clock_gap, held
PULL, PARAMS, PUSH, STOP, CANCEL, WARM = 1.0, 2.0, 3.0, 4.0, 5.0, 6.0
TAG = 77


def run(ctx: RankContext) -> RankLog:
    if ctx.rank == ctx.parts.n:
        return Server(ctx).serve()
    return work(ctx)


def step_lr(ctx: RankContext, staleness: int) -> float:
    """lr, divided by the staleness when ``strategy.staleness_lr`` (as Strategy.step_lr)."""
    lr = ctx.config.workload.lr
    return lr / staleness if ctx.config.strategy.staleness_lr and staleness > 1 else lr


# ---- the worker -----------------------------------------------------------------------

def work(ctx: RankContext) -> RankLog:
    from mpi4py import MPI

    comm, w, server = ctx.comm, ctx.rank, ctx.parts.n
    size = ctx.parts.params.size
    worker = ctx.parts.workers[w]
    inbox, outbox = np.zeros(HEADER + size), np.zeros(HEADER + size)
    request, note = np.zeros(HEADER), np.zeros(HEADER)
    params = inbox[HEADER:]
    ctx.warm_kernels(ctx.parts.params)
    outbox[0], outbox[1] = WARM, w  # warm-up: a full-size round trip with the server
    ctx.waiter.one(comm.Isend([outbox, MPI.DOUBLE], dest=server, tag=TAG))
    ctx.waiter.one(comm.Irecv([inbox, MPI.DOUBLE], source=server, tag=TAG))
    ctx.start_clock()
    compute = RealCompute(ctx.parts, w, ctx.t0)
    cancellable = ctx.config.strategy.kind == "backup"  # only backup steps leave workers out
    log = RankLog(ctx.rank)

    def send(message: np.ndarray) -> None:
        ctx.waiter.one(comm.Isend([message, MPI.DOUBLE], dest=server, tag=TAG))
        log.messages += 1

    def cancelled(version: float) -> bool:
        """Whether the server cancelled step ``version`` (older cancels are dropped)."""
        while comm.Iprobe(source=server, tag=TAG):
            comm.Recv([note, MPI.DOUBLE], source=server, tag=TAG)
            if note[0] == CANCEL and note[2] == version:
                return True
        return False

    while True:
        asked = ctx.now()
        request[:] = 0
        request[0], request[1] = PULL, w
        send(request)
        while True:  # the answer; a cancel of an earlier step may come first
            ctx.waiter.one(comm.Irecv([inbox, MPI.DOUBLE], source=server, tag=TAG))
            if inbox[0] != CANCEL:
                break
        got = ctx.now()
        if inbox[0] == STOP:
            log.span(w, "comm", asked, got)
            break
        arrival, grant, version = inbox[4], inbox[5], inbox[2]
        log.span(w, "comm", asked, min(arrival, got))
        # held by the server (step barrier, clock bound): waiting; else serving it: comm
        log.span(w, "wait" if inbox[7] else "comm", arrival, grant)
        log.span(w, "comm", max(grant, asked), got)
        start = ctx.now()
        loss, dropped = compute.gradient(
            params, (lambda v=version: cancelled(v)) if cancellable else None)
        dropped = dropped or (cancellable and cancelled(version))
        log.span(w, "compute", start, ctx.now())
        ctx.heartbeat.beat()
        if dropped:
            continue
        outbox[:HEADER] = 0
        outbox[0], outbox[1], outbox[2], outbox[3] = PUSH, w, version, loss
        K.copy(outbox[HEADER:], worker.grad)  # codec "none": the message is the gradient
        pushed = ctx.now()
        send(outbox)
        log.span(w, "comm", pushed, ctx.now())
    log.kernel_s = compute.kernel_s
    return log


# ---- the server -----------------------------------------------------------------------

class Server:
    """Holds the parameters of record, the clock table, and the pulls it cannot answer yet."""

    def __init__(self, ctx: RankContext) -> None:
        self.ctx, self.n = ctx, ctx.parts.n
        config = ctx.config
        self.kind, self.bound = config.strategy.kind, config.strategy.staleness
        self.needed = self.n - (config.strategy.backup if self.kind == "backup" else 0)
        self.params = ctx.parts.params.copy()
        self.velocity = np.zeros_like(self.params) if config.workload.momentum > 0 else None
        size = self.params.size
        self.inbox = np.zeros(HEADER + size)
        self.replies = [np.zeros(HEADER + size) for _ in range(self.n)]
        self.sending: list[Any] = [None] * self.n  # the reply in flight to each worker
        self.notes: list[tuple[np.ndarray, Any]] = []  # cancels in flight
        self.clocks = np.zeros(self.n, np.int64)  # updates each worker has contributed
        self.gaps: list[int | None] = [None] * self.n
        self.pending: dict[int, float] = {}  # worker -> arrival time of its pull
        self.held: set[int] = set()  # workers whose pull could not be answered on arrival
        self.stopped: set[int] = set()
        self.arrived: dict[int, tuple[np.ndarray, float]] = {}  # sync: this step's gradients
        synchronous = self.kind in ("bsp-ps", "backup")
        self.grads = [np.zeros(size) for _ in range(self.n)] if synchronous else []
        self.total = np.zeros(size)
        self.version = 0
        self.finished = False
        self.log = RankLog(ctx.rank)
        self.log.snapshots[0] = self.params.copy()

    # -- the loop --

    def serve(self) -> RankLog:
        from mpi4py import MPI

        ctx, status = self.ctx, MPI.Status()
        for _ in range(self.n):  # warm-up: a full-size round trip with every worker
            ctx.waiter.one(ctx.comm.Irecv([self.inbox, MPI.DOUBLE], source=MPI.ANY_SOURCE,
                                          tag=TAG), status)
            w = status.Get_source()
            ctx.waiter.one(ctx.comm.Isend([self.replies[w], MPI.DOUBLE], dest=w, tag=TAG))
        self.total[:] = self.params
        ctx.start_clock()
        while len(self.stopped) < self.n:
            ctx.waiter.one(ctx.comm.Irecv([self.inbox, MPI.DOUBLE], source=MPI.ANY_SOURCE,
                                          tag=TAG), status)
            now = ctx.now()
            kind, w = self.inbox[0], int(self.inbox[1])
            if kind == PULL:
                self.pending[w] = now
            elif kind == PUSH and not self.finished:
                self.on_push(w, self.inbox)
            self.answer()
            ctx.heartbeat.beat()
        ctx.waiter.all([r for r in self.sending if r is not None] + [r for _, r in self.notes])
        return self.log

    def answer(self) -> None:
        """Answer every held pull that may go now, in worker order."""
        for w in sorted(self.pending):
            if self.finished:
                self.reply(w, STOP)
                self.stopped.add(w)
            elif self.ready(w):
                self.gaps[w] = int(self.clocks[w] - self.clocks.min()) \
                    if self.kind == "ssp" else None
                self.reply(w, PARAMS)
            else:
                self.held.add(w)
                continue
            del self.pending[w]
            self.held.discard(w)

    def ready(self, w: int) -> bool:
        if self.kind == "ssp":
            return self.clocks[w] - self.clocks.min() <= self.bound
        if self.kind in ("bsp-ps", "backup"):
            return w not in self.arrived  # else: wait for the step to close
        return True

    def reply(self, w: int, kind: float) -> None:
        from mpi4py import MPI

        if self.sending[w] is not None:
            self.ctx.waiter.one(self.sending[w])
        message = self.replies[w]
        message[:HEADER] = 0
        message[0], message[1], message[2] = kind, w, self.version
        message[4], message[5] = self.pending[w], self.ctx.now()
        message[7] = w in self.held
        count = HEADER
        if kind == PARAMS:
            K.copy(message[HEADER:], self.params)
            count += self.params.size
        self.sending[w] = self.ctx.comm.Isend([message[:count], MPI.DOUBLE], dest=w, tag=TAG)
        self.log.messages += 1

    def cancel(self, w: int, version: int) -> None:
        from mpi4py import MPI

        self.notes = [(m, r) for m, r in self.notes if not r.Test()]
        note = np.zeros(HEADER)
        note[0], note[1], note[2] = CANCEL, w, version
        self.notes.append((note, self.ctx.comm.Isend([note, MPI.DOUBLE], dest=w, tag=TAG)))
        self.log.messages += 1

    # -- updates --

    def on_push(self, w: int, message: np.ndarray) -> None:
        version_read, loss, grad = int(message[2]), float(message[3]), message[HEADER:]
        if self.kind in ("asp", "ssp"):
            staleness = self.version - version_read
            if self.apply(grad, step_lr(self.ctx, staleness) / self.n):
                self.clocks[w] += 1
                self.record(w, int(self.clocks[w]), version_read, staleness, loss,
                            self.ctx.parts.workers[w].batch, self.gaps[w])
            return
        if version_read != self.version:
            return  # a late gradient of a closed step: dropped on arrival
        K.copy(self.grads[w], grad)
        self.arrived[w] = (self.grads[w], loss)
        if len(self.arrived) == self.needed:
            self.close_step()

    def close_step(self) -> None:
        step, accepted = self.version, sorted(self.arrived)  # worker order: fixed rounding
        self.total[:] = 0
        for i in accepted:
            K.sum_into(self.total, self.arrived[i][0])
        K.scale(1.0 / len(accepted), self.total)
        if self.apply(self.total, step_lr(self.ctx, 0)):
            self.clocks[accepted] += 1
            loss = float(np.mean([self.arrived[i][1] for i in accepted]))
            self.record(-1, self.version, step, 0, loss,
                        len(accepted) * self.ctx.parts.workers[0].batch, None)
        for w in range(self.n):  # the workers still computing this step drop it
            if w not in self.arrived:
                self.cancel(w, step)
        self.arrived = {}

    def apply(self, grad: np.ndarray, lr: float) -> bool:
        """One SGD step; False (and the run stops, diverged) if it gave a NaN or Inf."""
        workload = self.ctx.config.workload
        try:
            K.sgd_update(self.params, grad, self.velocity, lr, workload.momentum,
                         workload.weight_decay)
        except NonFiniteError:
            self.log.diverged = self.finished = True
            return False
        self.version += 1
        return True

    def record(self, worker: int, clock: int, version_read: int, staleness: int, loss: float,
               samples: int, gap: int | None) -> None:
        self.log.updates.append((self.ctx.now(), worker, clock, version_read, staleness, gap,
                                 loss, samples))
        if wants_snapshot(self.version, self.ctx.config):
            self.log.snapshots[self.version] = self.params.copy()
        if self.version >= self.ctx.config.run.iterations:
            self.finished = True
