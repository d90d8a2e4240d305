"""Parameter-server strategies on real ranks: ``bsp-ps``, ``backup``, ``asp``, ``ssp``.

Ranks 0..N-1 are the workers, rank N the server, as in the simulator (servers after the
workers). Every message is one float64 array: an 8-value header (64 bytes, the simulator's
pull-request size) followed by the payload (:mod:`sim.real.executors.ps_wire`); messages
between two ranks arrive in the order they were sent. They go over MPI
(:mod:`sim.real.executors.ps_mpi`), or over gRPC with ``cluster.transport = "grpc"``
(:mod:`sim.real.executors.ps_grpc`): a *link* moves them, the program here is the same for
both. A worker loops: pull (request, then the parameters, with the clock gap the server
admitted it at), gradient, push; it reads its :class:`~sim.training.store.ParameterCache`
instead of pulling while the rules say it is fresh (SSP). What the server does is the
strategy's rules (:mod:`sim.training.rules`) on a :class:`~sim.training.store.
ParameterStore`, the same as the simulated servers': a push is applied, accumulated for a
synchronous step or dropped as stale; a pull is answered at once or held (the SSP clock
bound, the step barrier). When a step closes without some workers (backup), they finish
and push, and their stale gradients are dropped on arrival; if the rules cancel late
workers (``strategy.late_gradients = "cancel"``, MPI only) they are sent a cancel instead
and drop their gradient, as the simulator interrupts them.

:class:`ServerProtocol` is that server without messages (pulls and pushes in, replies
out), so a test can drive it with the simulator's own sequence of pushes and pulls;
:func:`serve_loop` moves its messages over the run's link. Once ``run.iterations`` updates
are applied, the server answers every pull with STOP.

A worker's time: posting a send and packing the push (header, gradient copy; over gRPC
also turning arrays into bytes and back) is ``overhead``, blocking until a message is sent
or the reply has come is ``wire`` (or ``wait`` while the server held the pull), the batch
is ``data``, the kernel ``compute``; what lies between is the loop's ``overhead``. The
server's time (receiving: ``wire``, unpacking a gRPC request's bytes: ``overhead``,
applying or accumulating a push: ``update``, replying: ``overhead``) goes to the
summary's ``server_breakdown``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim import kernels as K
from sim.kernels import NonFiniteError
from sim.real.executors.assemble import RankLog
from sim.real.executors.context import RankContext
from sim.real.executors.elastic_rank import WorkerMonitor, worker_plan
from sim.real.executors.ps_grpc import GrpcServerLink, GrpcWorkerLink, exchange_ports
from sim.real.executors.ps_mpi import MpiServerLink, MpiWorkerLink
from sim.real.executors.ps_wire import (
    CANCEL,
    HEADER,
    PARAMS,
    PULL,
    PUSH,
    STOP,
    WARM,
    Received,
    ServerLink,
    WorkerLink,
)
from sim.real.executors.ps_wire import TAG as TAG  # the message layout's, re-exported
from sim.real.executors.rank_compute import RealCompute
from sim.training.rules import Rules
from sim.training.store import ParameterCache, ParameterStore
from sim.training.strategies import GRPC
from sim.training.workload import Workload


def run(ctx: RankContext) -> RankLog:
    if ctx.rank == ctx.workload.n:
        return serve(ctx)
    return work(ctx)


# ---- links: MPI or gRPC -----------------------------------------------------------------

def worker_link(ctx: RankContext, log: RankLog, servers: Sequence[int]) -> WorkerLink:
    """This worker's link to the server ranks ``servers``, over the run's transport (over
    gRPC a collective: every rank makes its link at the same point)."""
    if ctx.transport == GRPC:
        ports = exchange_ports(ctx, None)
        return GrpcWorkerLink(ctx, log, {s: ports[s] for s in servers})
    return MpiWorkerLink(ctx, log)


def server_link(ctx: RankContext, workers: int,
                monitor: WorkerMonitor | None = None) -> ServerLink:
    """This server rank's link to workers ``0 .. workers - 1`` (``monitor``: MPI only, the
    gRPC path refuses failures), over the run's transport (a collective over gRPC)."""
    if ctx.transport == GRPC:
        assert monitor is None  # the validator refused failures over gRPC (real_checks)
        link = GrpcServerLink(ctx, workers)
        exchange_ports(ctx, link.port)
        return link
    return MpiServerLink(ctx, workers, monitor)


# ---- the worker -----------------------------------------------------------------------

def log_reply(log: RankLog, w: int, asked: float, got: float, header: np.ndarray) -> None:
    """Worker ``w``'s time from asking (``asked``) to the reply's coming (``got``): ``wire``,
    but ``wait`` while the server held the pull (the reply ``header``'s arrival and grant
    times, s)."""
    arrival, grant = header[4], header[5]
    log.span(w, "wire", asked, min(arrival, got))
    # held by the server (step barrier, clock bound): waiting; else serving it: wire
    log.span(w, "wait" if header[7] else "wire", arrival, min(grant, got))
    log.span(w, "wire", max(grant, asked), got)


def work(ctx: RankContext) -> RankLog:
    w, server = ctx.rank, ctx.workload.n
    size = ctx.workload.params.size
    worker = ctx.workload.workers[w]
    inbox, outbox = np.zeros(HEADER + size), np.zeros(HEADER + size)
    request = np.zeros(HEADER)
    cache = ParameterCache(ctx.rules, inbox[HEADER:])  # pulls land there
    params = cache.params
    log = RankLog(ctx.rank)
    link = worker_link(ctx, log, [server])
    ctx.warm_kernels(ctx.workload.params)
    outbox[0], outbox[1] = WARM, w  # warm-up: a full-size round trip with the server
    link.warm_up([(server, outbox)], [inbox])
    ctx.start_clock()
    compute = RealCompute(ctx.workload, w, ctx.t0)
    cancellable = ctx.rules.cancels_late
    plan = worker_plan(ctx)  # None unless this worker is to fail
    pushed_s = 0.0  # when its last push was sent: work after it dies with it

    while True:
        if not cache.fresh:
            request[:] = 0
            request[0], request[1] = PULL, w
            asked = link.ask([(server, request)], [inbox])
            replies = link.collect()
            if inbox[0] == STOP:
                log.span(w, "wire", asked, replies.got_s)
                break
            log_reply(log, w, asked, replies.got_s, inbox[:HEADER])
            log.span(w, "overhead", replies.got_s, replies.unpacked_s)
            cache.pulled(int(inbox[2]), None if np.isnan(inbox[6]) else int(inbox[6]))
        if plan is not None:  # the updates this worker knows of: the last pull's
            plan.check(cache.version, ctx.now(), log, ctx.now() - pushed_s)
        version = cache.version
        loss, dropped = compute.gradient(
            params, (lambda v=version: link.cancelled(v)) if cancellable else None)
        dropped = dropped or (cancellable and link.cancelled(version))
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
        link.send([(server, outbox)])
        writing = pushed_s = ctx.now()
        if cache.pushed(worker.grad):  # read-my-writes: an SGD step on the worker's cache
            log.span(w, "update", writing, ctx.now())
    link.close()
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


def start_reply(ctx: RankContext, log: RankLog, rank: int, link: ServerLink, r: Reply,
                message: np.ndarray, version: int) -> float:
    """A server's reply ``r`` begins: the one still in flight to its worker is waited out
    (``wire`` on ``rank``), then ``message``'s header is written (kind, worker, version,
    arrival and grant times, held). Returns when the packing began (``overhead`` from it)."""
    began = ctx.now()
    if link.ready(r.worker):
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


def serve_loop(ctx: RankContext, protocol: ServerProtocol, link: ServerLink,
               inbox: np.ndarray, take: Callable[[Received], None],
               reply: Callable[[Reply], None]) -> None:
    """A server rank's main loop, over either link: receive a message into ``inbox`` (idle
    until it comes: ``wire``; unpacking it: ``overhead``), ``take`` it (the program's: the
    protocol's pull or push), answer every pull the rules now let go (``reply``), until
    every worker has been told STOP or is dead."""
    log, me = protocol.log, ctx.rank

    def answer() -> None:
        for r in protocol.replies():
            reply(r)

    while not protocol.over:
        began = ctx.now()
        got = link.receive(inbox, answer)
        if got is None:  # every worker stopped or died while the server waited
            log.span(me, "wire", began, ctx.now())
            break
        log.span(me, "wire", began, got.arrived_s)  # idle until a message arrives
        log.span(me, "overhead", got.arrived_s, got.unpacked_s)
        take(got)
        answer()
        ctx.heartbeat.beat()


def serve(ctx: RankContext) -> RankLog:
    """The server rank: receive, apply the rules, reply, until every worker has stopped."""
    protocol = ServerProtocol(ctx.rules, ctx.workload)
    n, size = protocol.n, protocol.store.params.size
    inbox = np.zeros(HEADER + size)
    replies = [np.zeros(HEADER + size) for _ in range(n)]
    log = protocol.log
    monitor = WorkerMonitor.of(ctx, protocol)  # None unless workers may die
    link = server_link(ctx, n, monitor)

    def reply(r: Reply) -> None:
        message = replies[r.worker]
        began = start_reply(ctx, log, n, link, r, message, protocol.store.version)
        message[6] = np.nan if r.gap is None else r.gap
        count = HEADER
        if r.kind == PARAMS:
            message[2] = protocol.store.read(message[HEADER:])
            count += size
        link.reply(r.worker, message[:count])
        log.messages += 1
        log.span(n, "overhead", began, ctx.now())

    def cancel(w: int, step: int) -> None:
        if w in protocol.dead:
            return
        note = np.zeros(HEADER)
        note[0], note[1], note[2] = CANCEL, w, step
        if link.note(w, note):
            log.messages += 1

    def take(got: Received) -> None:
        kind, w, now = inbox[0], int(inbox[1]), got.arrived_s
        if kind == PULL:
            protocol.on_pull(w, now)
        elif kind == PUSH:
            cancels = protocol.on_push(w, inbox[HEADER:], int(inbox[2]), float(inbox[3]),
                                       now)
            log.span(n, "update", got.unpacked_s, ctx.now())  # the store applies or accumulates it
            for worker, step in cancels:
                cancel(worker, step)

    link.warm_up(inbox, replies)  # a full-size round trip with every worker
    K.copy(protocol.store.total, protocol.store.params)  # first touch, off the clock
    ctx.start_clock()
    serve_loop(ctx, protocol, link, inbox, take, reply)
    link.close(protocol.dead)
    if monitor is not None:
        log.extra.update(monitor.summary())
    log.extra.update(ctx.rules.summary(protocol.store))
    return log
