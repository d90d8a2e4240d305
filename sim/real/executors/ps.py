"""Parameter-server strategies on real ranks: ``bsp-ps``, ``backup``, ``asp``, ``ssp``.

Ranks 0..N-1 are the workers, rank N the server, as in the simulator (servers after the
workers). Every message is one float64 array: an 8-value header (64 bytes, the simulator's
pull-request size) followed by the payload, all on one tag, so messages between two ranks
arrive in the order they were sent. A worker loops: pull (request, then the parameters,
with the clock gap the server admitted it at), gradient, push; it reads its
:class:`~sim.training.store.ParameterCache` instead of pulling while the rules say it is
fresh (SSP). What the server does is the strategy's rules (:mod:`sim.training.rules`) on a
:class:`~sim.training.store.ParameterStore`, the same as the simulated servers': a push is
applied, accumulated for a synchronous step or dropped as stale; a pull is answered at
once or held (the SSP clock bound, the step barrier). When a step closes without some
workers (backup), they finish and push, and their stale gradients are dropped on arrival;
if the rules cancel late workers (``strategy.late_gradients = "cancel"``) they are sent a
cancel instead and drop their gradient, as the simulator interrupts them.

:class:`ServerProtocol` is that server without MPI (pulls and pushes in, replies out), so
a test can drive it with the simulator's own sequence of pushes and pulls; :func:`serve`
moves its messages over MPI. Once ``run.iterations`` updates are applied, the server
answers every pull with STOP.

A worker's time: posting a send and packing the push (header, gradient copy) is
``overhead``, blocking until a message is sent or the reply has come is ``wire`` (or
``wait`` while the server held the pull), the batch is ``data``, the kernel ``compute``;
what lies between is the loop's ``overhead``. The server's time (receiving: ``wire``,
applying or accumulating a push: ``update``, replying: ``overhead``) goes to the summary's
``server_breakdown``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sim import kernels as K
from sim.kernels import NonFiniteError
from sim.real.executors.assemble import RankLog
from sim.real.executors.context import RankContext
from sim.real.executors.elastic_rank import WorkerMonitor, worker_plan
from sim.real.executors.rank_compute import RealCompute
from sim.training.rules import Rules
from sim.training.store import ParameterCache, ParameterStore
from sim.training.workload import Workload

HEADER = 8  # type, worker, version, loss, arrival_s, grant_s, clock_gap (NaN: none), held
PULL, PARAMS, PUSH, STOP, CANCEL, WARM = 1.0, 2.0, 3.0, 4.0, 5.0, 6.0
TAG = 77


def run(ctx: RankContext) -> RankLog:
    if ctx.rank == ctx.workload.n:
        return serve(ctx)
    return work(ctx)


# ---- the worker -----------------------------------------------------------------------

def work(ctx: RankContext) -> RankLog:
    from mpi4py import MPI

    comm, w, server = ctx.comm, ctx.rank, ctx.workload.n
    size = ctx.workload.params.size
    worker = ctx.workload.workers[w]
    inbox, outbox = np.zeros(HEADER + size), np.zeros(HEADER + size)
    request, note = np.zeros(HEADER), np.zeros(HEADER)
    cache = ParameterCache(ctx.rules, inbox[HEADER:])  # pulls land there
    params = cache.params
    ctx.warm_kernels(ctx.workload.params)
    outbox[0], outbox[1] = WARM, w  # warm-up: a full-size round trip with the server
    ctx.waiter.one(comm.Isend([outbox, MPI.DOUBLE], dest=server, tag=TAG))
    ctx.waiter.one(comm.Irecv([inbox, MPI.DOUBLE], source=server, tag=TAG))
    ctx.start_clock()
    compute = RealCompute(ctx.workload, w, ctx.t0)
    cancellable = ctx.rules.cancels_late
    log = RankLog(ctx.rank)
    plan = worker_plan(ctx)  # None unless this worker is to fail
    pushed_s = 0.0  # when its last push was sent: work after it dies with it

    def send(message: np.ndarray) -> None:
        """Post (overhead), then block until MPI has the message (wire)."""
        began = ctx.now()
        sent = comm.Isend([message, MPI.DOUBLE], dest=server, tag=TAG)
        posted = ctx.now()
        log.span(w, "overhead", began, posted)
        ctx.waiter.one(sent)
        log.span(w, "wire", posted, ctx.now())
        log.messages += 1

    def cancelled(version: float) -> bool:
        """Whether the server cancelled step ``version`` (older cancels are dropped)."""
        while comm.Iprobe(source=server, tag=TAG):
            comm.Recv([note, MPI.DOUBLE], source=server, tag=TAG)
            if note[0] == CANCEL and note[2] == version:
                return True
        return False

    while True:
        if not cache.fresh:
            request[:] = 0
            request[0], request[1] = PULL, w
            send(request)
            asked = ctx.now()
            while True:  # the answer; a cancel of an earlier step may come first
                ctx.waiter.one(comm.Irecv([inbox, MPI.DOUBLE], source=server, tag=TAG))
                if inbox[0] != CANCEL:
                    break
            got = ctx.now()
            if inbox[0] == STOP:
                log.span(w, "wire", asked, got)
                break
            arrival, grant = inbox[4], inbox[5]
            log.span(w, "wire", asked, min(arrival, got))
            # held by the server (step barrier, clock bound): waiting; else serving it: wire
            log.span(w, "wait" if inbox[7] else "wire", arrival, min(grant, got))
            log.span(w, "wire", max(grant, asked), got)
            cache.pulled(int(inbox[2]), None if np.isnan(inbox[6]) else int(inbox[6]))
        if plan is not None:  # the updates this worker knows of: the last pull's
            plan.check(cache.version, ctx.now(), log, ctx.now() - pushed_s)
        version = cache.version
        loss, dropped = compute.gradient(
            params, (lambda v=version: cancelled(v)) if cancellable else None)
        dropped = dropped or (cancellable and cancelled(version))
        for kind, start, end in compute.parts():
            log.span(w, kind, start, end)
        ctx.heartbeat.beat()
        if dropped:
            continue
        packing = ctx.now()
        outbox[:HEADER] = 0
        outbox[0], outbox[1], outbox[2], outbox[3] = PUSH, w, version, loss
        try:
            K.copy(outbox[HEADER:], worker.grad)  # codec "none": the message is the gradient
        except NonFiniteError:  # copied anyway: the server sees the NaNs and stops the run
            pass
        log.span(w, "overhead", packing, ctx.now())
        send(outbox)
        writing = pushed_s = ctx.now()
        if cache.pushed(worker.grad):  # read-my-writes: an SGD step on the worker's cache
            log.span(w, "update", writing, ctx.now())
    log.kernel_s = compute.kernel_s
    return log


# ---- the server -----------------------------------------------------------------------

@dataclass
class Reply:
    """A pull answered: PARAMS (with the parameters) or STOP."""

    worker: int
    kind: float
    arrival_s: float  # when the pull arrived
    held: bool  # whether it could not be answered on arrival
    gap: int | None = None  # PARAMS: the clock gap the pull was admitted at


def start_reply(ctx: RankContext, log: RankLog, rank: int, sending: list[Any], r: Reply,
                message: np.ndarray, version: int) -> float:
    """A server's reply ``r`` begins: the one still in flight to its worker is waited out
    (``wire`` on ``rank``), then ``message``'s header is written (kind, worker, version,
    arrival and grant times, held). Returns when the packing began (``overhead`` from it)."""
    if sending[r.worker] is not None:
        began = ctx.now()
        ctx.waiter.one(sending[r.worker])
        log.span(rank, "wire", began, ctx.now())
    began = ctx.now()
    message[:HEADER] = 0
    message[0], message[1], message[2] = r.kind, r.worker, version
    message[4], message[5], message[7] = r.arrival_s, ctx.now(), r.held
    return began


class ServerProtocol:
    """The server rank without MPI: the parameters of record under the strategy's rules,
    the pulls it cannot answer yet, and its log."""

    def __init__(self, rules: Rules, workload: Workload,
                 store: ParameterStore | None = None) -> None:
        self.rules, self.n = rules, workload.n
        self.iterations = workload.config.run.iterations
        self.store = store if store is not None else \
            ParameterStore(rules, workload.params.copy())
        self.pending: dict[int, float] = {}  # worker -> arrival time of its pull
        self.held: set[int] = set()  # workers whose pull could not be answered on arrival
        self.stopped: set[int] = set()
        self.dead: set[int] = set()  # workers found dead (elastic recovery)
        self.finished = False
        self.log = RankLog(self.n)
        self.log.reserve(self.model_of_record.size, rules, self.iterations)
        self.log.snapshot(self.model_of_record, rules, 0)

    @property
    def model_of_record(self) -> np.ndarray:
        """What the server snapshots at evaluation points: the store's parameters."""
        return self.store.params

    def on_pull(self, worker: int, now: float) -> None:
        self.pending[worker] = now

    def on_push(self, worker: int, grad: np.ndarray, version_read: int, loss: float,
                now: float) -> list[tuple[int, int]]:
        """Apply the rules to a push; the (worker, step) cancels to send if a step closed
        without some workers."""
        if self.finished:
            return []
        step = self.store.version
        try:
            update = self.store.push(worker, grad, version_read, loss)
        except NonFiniteError:
            self.log.diverged = self.finished = True
            return []
        if update is None:
            return []
        self._applied(update, now)
        if update.worker >= 0 or not self.rules.leaves_workers_out:  # nobody left out
            return []
        return [(w, step) for w in range(self.n) if w not in self.store.last_step]

    def _applied(self, update: Any, now: float) -> None:
        self.log.record(now, update, self.model_of_record, self.rules, self.store.version)
        self.finished = self.store.version >= self.iterations

    @property
    def over(self) -> bool:
        """Every worker has been sent STOP or is dead."""
        return len(self.stopped | self.dead) >= self.n

    def drop(self, worker: int, now: float) -> None:
        """``worker`` died: the rules count the others only (its pull is forgotten); a
        synchronous step it held up closes with the gradients that have arrived."""
        self.dead.add(worker)
        self.pending.pop(worker, None)
        self.held.discard(worker)
        self.store.drop(worker)
        step_full = getattr(self.rules, "step_full", None)
        if self.finished or step_full is None or not self.store.arrived or \
                not step_full(self.store):
            return
        try:
            self._applied(self.rules.close(self.store), now)
        except NonFiniteError:
            self.log.diverged = self.finished = True

    def replies(self) -> list[Reply]:
        """Every held pull that may be answered now, in worker order."""
        out = []
        for w in sorted(self.pending):
            if self.finished:
                out.append(Reply(w, STOP, self.pending[w], w in self.held))
                self.stopped.add(w)
            elif self.store.may_pull(w):
                gap = self.store.admit(w)
                out.append(Reply(w, PARAMS, self.pending[w], w in self.held, gap))
            else:
                self.held.add(w)
                continue
            del self.pending[w]
            self.held.discard(w)
        return out


def serve(ctx: RankContext) -> RankLog:
    """The server rank: receive, apply the rules, reply, until every worker has stopped."""
    from mpi4py import MPI

    protocol = ServerProtocol(ctx.rules, ctx.workload)
    n, size, comm, status = protocol.n, protocol.store.params.size, ctx.comm, MPI.Status()
    inbox = np.zeros(HEADER + size)
    replies = [np.zeros(HEADER + size) for _ in range(n)]
    sending: list[Any] = [None] * n  # the reply in flight to each worker
    notes: list[tuple[int, np.ndarray, Any]] = []  # cancels in flight
    log = protocol.log
    monitor = WorkerMonitor.of(ctx, protocol)  # None unless workers may die

    def reply(r: Reply) -> None:
        message = replies[r.worker]
        began = start_reply(ctx, log, n, sending, r, message, protocol.store.version)
        message[6] = np.nan if r.gap is None else r.gap
        count = HEADER
        if r.kind == PARAMS:
            message[2] = protocol.store.read(message[HEADER:])
            count += size
        sending[r.worker] = comm.Isend([message[:count], MPI.DOUBLE], dest=r.worker, tag=TAG)
        log.messages += 1
        log.span(n, "overhead", began, ctx.now())

    def cancel(w: int, step: int) -> None:
        if w in protocol.dead:
            return
        notes[:] = [(v, m, r) for v, m, r in notes if not r.Test()]
        note = np.zeros(HEADER)
        note[0], note[1], note[2] = CANCEL, w, step
        notes.append((w, note, comm.Isend([note, MPI.DOUBLE], dest=w, tag=TAG)))
        log.messages += 1

    for _ in range(n):  # warm-up: a full-size round trip with every worker
        ctx.waiter.one(comm.Irecv([inbox, MPI.DOUBLE], source=MPI.ANY_SOURCE, tag=TAG), status)
        w = status.Get_source()
        ctx.waiter.one(comm.Isend([replies[w], MPI.DOUBLE], dest=w, tag=TAG))
    K.copy(protocol.store.total, protocol.store.params)  # first touch, off the clock
    ctx.start_clock()
    while not protocol.over:
        began = ctx.now()
        request = comm.Irecv([inbox, MPI.DOUBLE], source=MPI.ANY_SOURCE, tag=TAG)
        if monitor is None:
            ctx.waiter.one(request, status)
        elif not monitor.receive(request, status,
                                 lambda: [reply(r) for r in protocol.replies()]):
            # every worker stopped or died while the server waited
            log.span(n, "wire", began, ctx.now())
            break
        now = ctx.now()
        log.span(n, "wire", began, now)  # idle until a message arrives
        kind, w = inbox[0], int(inbox[1])
        if kind == PULL:
            protocol.on_pull(w, now)
        elif kind == PUSH:
            cancels = protocol.on_push(w, inbox[HEADER:], int(inbox[2]), float(inbox[3]),
                                       now)
            log.span(n, "update", now, ctx.now())  # the store applies or accumulates it
            for worker, step in cancels:
                cancel(worker, step)
        for r in protocol.replies():
            reply(r)
        ctx.heartbeat.beat()
    live = [w for w in range(n) if w not in protocol.dead]  # a dead one receives nothing
    ctx.waiter.all([sending[w] for w in live if sending[w] is not None] +
                   [r for w, _, r in notes if w not in protocol.dead])
    if monitor is not None:
        log.extra.update(monitor.summary())
    log.extra.update(ctx.rules.summary(protocol.store))
    return log
