"""Parameter-server strategies for a model with embedding tables (wide-deep,
``embeddings.placement = "ps"``) on real ranks: sparse pulls and pushes to S server shards.

Ranks 0..N-1 are the workers, ranks N..N+S-1 the server shards (``cluster.servers``), as in
the simulator. Shard s holds the table rows the shard map gives it (``embeddings.sharding``,
:class:`~sim.real.executors.table_shards.ShardLayout`) with their optimizer state, and its
equal key range of the dense part (the MLP), as
:class:`~sim.training.embedding_traffic.EmbeddingTraffic` counts them.

A worker starts from the initial parameters (every rank builds them, as every simulated
worker starts with them) and loops, as the simulated bsp-ps does: its gradient (sparse:
the touched rows of each table, and the dense part); a push, to each shard, of the
(id, row gradient) pairs of the rows it holds and its part of the dense gradient; then a
pull for its next batch, which sends each shard the global ids (int64) of that batch's
distinct rows it holds and gets back exactly those rows and the shard's dense part. The
pull after the last update is answered STOP, with the rows too (the final parameters).
Every message is one float64 array: the 64-byte header of :mod:`sim.real.executors.ps`
(type, worker, version, loss, arrival and grant times, the number of ids of a push, held)
then the payload, so a pull request is the 64 + 8 x ids bytes EmbeddingTraffic counts, and
a reply (or a push) carries exactly the row and dense bytes it counts after its header.
They go over the run's link (:mod:`sim.real.executors.ps_wire`): MPI, or gRPC with
``cluster.transport = "grpc"``, where a worker's calls to the shards go out together and
each shard runs a gRPC server (:mod:`sim.real.executors.ps_grpc`). The
run's ``pull_bytes_per_step`` and ``push_bytes_per_step`` are those sizes, summed over
what the workers really sent and received, ``unique_ids_per_step`` the ids asked for,
``shard_load_max_over_mean`` the rows each shard really served (``cache_hit_rate`` is 0:
real runs keep no cache).

A shard follows the strategy's rules (:mod:`sim.training.rules`) as the one-server program
does (:class:`~sim.real.executors.ps.ServerProtocol`: versions, clocks, the step barrier,
which pulls may be answered), on a :class:`~sim.training.store.ParameterStore` that keeps
that bookkeeping only (no parameters); the numbers are sparse. When the rules close a
synchronous step, the shard steps the union of the rows the step's pushes carry by their
mean (summed in worker order, then scaled, as :meth:`sim.training.rules.Rules.mean`: the
simulated servers' flat mean, whose untouched rows add exact zeros) and its dense range by
the mean dense gradient; when they apply one push (asp), that push at the rules' rate.
The tables are stepped by their row optimizer (:class:`~sim.training.row_optimizer.
TableOptimizer`), the dense range by the strategy's SGD, so bsp-ps gives the simulated
run's losses bit for bit. Once a shard has answered a worker STOP, the worker says BYE to
the shards that still answered it (asynchronous shards may finish one push apart).

Time on a worker: the batch is ``data``, packing and unpacking messages (over gRPC also
turning them into bytes and back) ``overhead``, blocking on them ``wire`` (``wait`` while
a shard held the pull at the step barrier), the gradient ``compute``. A shard's
(receiving: ``wire``; unpacking a gRPC request: ``overhead``; accumulating or stepping:
``update``; replying: ``overhead``) goes to ``server_breakdown``, summed over the shards.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.kernels import NonFiniteError
from sim.real.executors.assemble import RankLog
from sim.real.executors.context import RankContext
from sim.real.executors.ps import (
    HEADER,
    PULL,
    PUSH,
    STOP,
    WARM,
    Reply,
    ServerProtocol,
    serve_loop,
    server_link,
    start_reply,
    worker_link,
)
from sim.real.executors.ps_wire import Received
from sim.real.executors.rank_compute import RealCompute
from sim.real.executors.table_shards import ShardLayout, step_mean_rows
from sim.training.embedding_shards import load_max_over_mean
from sim.training.rules import SGD, Rules
from sim.training.store import ParameterStore
from sim.training.workload import Workload

BYE = 7.0  # a worker that was told STOP by another shard: it sends nothing more
HEADER_BYTES = HEADER * 8
_NOTHING = np.zeros(0)  # what the bookkeeping store is pushed: the numbers are the shard's


def layout_of(workload: Workload) -> ShardLayout:
    """The run's shards: the config's server shards, the dense part split among them."""
    config = workload.config
    return ShardLayout(workload.model, config.cluster.servers, config.embeddings.sharding,
                       split_dense=True)


def run(ctx: RankContext) -> RankLog:
    if ctx.rank >= ctx.workload.n:
        return serve(ctx)
    return work(ctx)


def _buffers(layout: ShardLayout, batch: int) -> tuple[int, int]:
    """(most ids, most row values) of one batch's message to a shard."""
    rows = layout.max_rows(batch)
    return rows, rows * int(layout.dims.max())


# ---- the worker -----------------------------------------------------------------------

class SparseCompute(RealCompute):
    """:class:`RealCompute` with the model's sparse gradient (per table the touched rows)
    written into ``grad``, a full-size vector of which only those rows and the dense part
    are read."""

    def __init__(self, workload: Workload, index: int, t0: float) -> None:
        super().__init__(workload, index, t0)
        self.grad = np.zeros(workload.model.size)

    def gradient(self, params: np.ndarray,
                 cancelled: Callable[[], bool] | None = None) -> tuple[float, bool]:
        worker, model = self.worker, self.worker.model
        begin = time.perf_counter()
        X, y = worker.next_batch()
        start = time.perf_counter()
        try:
            grad = model.sparse_loss_grad(params, X, y)
            for table, part in zip(model.tables, grad.tables, strict=True):
                table.view(self.grad)[part.rows] = part.grads
            self.grad[model.dense_start:] = grad.dense
            loss = grad.loss
        except NonFiniteError:  # the shards see the NaNs and stop the run
            self.grad.fill(math.nan)
            loss = math.nan
        dropped = self.pad(start, cancelled)
        self.times = (begin - self.t0, start - self.t0, time.perf_counter() - self.t0)
        return loss, dropped


def _pushes(layout: ShardLayout, outbox: list[np.ndarray], ids: list[np.ndarray],
            grad: np.ndarray, versions: np.ndarray, loss: float, w: int,
            n: int) -> list[tuple[int, np.ndarray]]:
    """Worker ``w``'s push to each shard (rank n + s): the header, the rows' ids, their
    gradient values and the shard's dense range, packed into its outbox."""
    parcels = []
    for s, message in enumerate(outbox):
        k = len(ids[s])
        message[:HEADER] = 0
        message[0], message[1], message[2], message[3], message[6] = PUSH, w, versions[s], \
            loss, k
        message[HEADER:HEADER + k].view(np.int64)[:] = ids[s]
        at = HEADER + k + layout.read(grad, ids[s], message[HEADER + k:])
        lo, hi = layout.dense[s]
        message[at:at + hi - lo] = grad[lo:hi]
        parcels.append((n + s, message[:at + hi - lo]))
    return parcels


def _pulls(outbox: list[np.ndarray], ids: list[np.ndarray], w: int,
           n: int) -> list[tuple[int, np.ndarray]]:
    """Worker ``w``'s pull request to each shard (rank n + s): the ids of the rows it wants."""
    parcels = []
    for s, message in enumerate(outbox):
        k = len(ids[s])
        message[:HEADER] = 0
        message[0], message[1] = PULL, w
        message[HEADER:HEADER + k].view(np.int64)[:] = ids[s]
        parcels.append((n + s, message[:HEADER + k]))
    return parcels


def _read_replies(layout: ShardLayout, inbox: list[np.ndarray], ids: list[np.ndarray],
                  replica: np.ndarray) -> None:
    """Each shard's reply into the worker's replica: the pulled rows, then the dense range."""
    for s, message in enumerate(inbox):
        at = HEADER + layout.values(ids[s])
        layout.write(replica, ids[s], message[HEADER:at])
        lo, hi = layout.dense[s]
        replica[lo:hi] = message[at:at + hi - lo]


def work(ctx: RankContext) -> RankLog:
    w, workload = ctx.rank, ctx.workload
    n, model, worker = workload.n, workload.model, workload.workers[ctx.rank]
    layout = layout_of(workload)
    shards = range(layout.shards)
    most_ids, most_values = _buffers(layout, worker.batch)
    dense = [hi - lo for lo, hi in layout.dense]
    outbox = [np.zeros(HEADER + most_ids + most_values + d) for d in dense]
    inbox = [np.zeros(HEADER + most_values + d) for d in dense]
    # the parameters the worker reads: the initial ones (every rank builds them, as every
    # simulated worker starts with them), then the rows of each pull and the dense part
    replica = workload.params.copy()
    log = RankLog(w)
    link = worker_link(ctx, log, [n + s for s in shards])
    ctx.warm_kernels(workload.params)
    for s in shards:  # warm-up: a full-size round trip with every shard
        outbox[s][0], outbox[s][1] = WARM, w
    link.warm_up([(n + s, outbox[s]) for s in shards], inbox)
    ctx.start_clock()
    compute = SparseCompute(workload, w, ctx.t0)
    pulls = pushes = unique = 0
    pull_bytes = push_bytes = 0.0
    versions = np.zeros(layout.shards)  # the version each shard's rows were read at
    ids: list[np.ndarray] | None = None  # per shard, the rows of the batch (global ids)

    while True:
        loss, _ = compute.gradient(replica)
        for kind, start, end in compute.parts():
            log.span(w, kind, start, end)
        ctx.heartbeat.beat()
        packing = ctx.now()
        if ids is None:  # the first batch, read without a pull
            ids = layout.split(model.touched(worker.last_batch[0]))
        parcels = _pushes(layout, outbox, ids, compute.grad, versions, loss, w, n)
        for _, message in parcels:
            push_bytes += 8 * message.size - HEADER_BYTES
        log.span(w, "overhead", packing, ctx.now())
        link.send(parcels)  # posting (serialising) is overhead, blocking wire
        pushes += 1

        # the pull for the next batch: the rows it touches, from the shards that hold them
        began = ctx.now()
        X, _ = worker.peek_batch()
        touched = model.touched(X)
        drawn = ctx.now()
        log.span(w, "data", began, drawn)
        ids = layout.split(touched)
        parcels = _pulls(outbox, ids, w, n)
        log.span(w, "overhead", drawn, ctx.now())
        asked = link.ask(parcels, inbox)
        replies_in = link.collect()
        got = replies_in.got_s
        got_bytes = sum(8 * count - HEADER_BYTES for count in replies_in.counts)
        log.messages += layout.shards  # the replies (the requests are the link's)
        replies = np.array([box[:HEADER] for box in inbox])
        held = replies[:, 7] > 0
        if held.any():  # the step barrier: waiting, from the first held arrival to the last grant
            arrival, grant = float(replies[held, 4].min()), float(replies[held, 5].max())
            log.span(w, "wire", asked, min(arrival, got))
            log.span(w, "wait", arrival, min(grant, got))
        log.span(w, "wire", asked, got)
        if got_bytes:  # a reply with rows (the last ones, with STOP, too)
            pulls += 1
            unique += sum(len(t) for t in touched)
            pull_bytes += sum(HEADER_BYTES + 8 * len(i) for i in ids) + got_bytes
        stopped = replies[:, 0] == STOP
        if stopped.any():
            bye = np.zeros(HEADER)
            bye[0], bye[1] = BYE, w
            # they answered: tell them it is over (after the last update: not on the clock)
            link.send([(n + int(s), bye) for s in np.flatnonzero(~stopped)])
            break
        _read_replies(layout, inbox, ids, replica)
        versions = replies[:, 2].copy()
        log.span(w, "overhead", got, ctx.now())
    link.close()
    log.kernel_s = compute.kernel_s
    log.steps = [("traffic", pulls, pushes, unique, pull_bytes, push_bytes)]
    return log


# ---- a server shard -------------------------------------------------------------------

@dataclass
class RowPush:
    """One worker's push to a shard: the global ids of its rows, their gradients laid end
    to end, its part of the dense gradient (copies)."""

    ids: np.ndarray
    values: np.ndarray
    dense: np.ndarray


class ShardProtocol(ServerProtocol):
    """Server shard ``shard`` without MPI: the rules' bookkeeping (the base class's, on a
    store without parameters) and the shard's own rows and dense range, stepped sparsely."""

    def __init__(self, rules: Rules, workload: Workload, layout: ShardLayout,
                 shard: int) -> None:
        self.layout, self.shard = layout, shard
        self.params = layout.own(workload.params, shard)  # NaN outside its part
        self.sgd = SGD(self.params, workload.config)
        self.dense = layout.dense[shard]
        self.total = np.zeros_like(self.params)  # a step's mean, at its rows
        self.dense_total = np.zeros(self.dense[1] - self.dense[0])
        self.grads: dict[int, RowPush] = {}  # pushes of the step in progress
        self.wanted: dict[int, np.ndarray] = {}  # ids of each worker's pull in progress
        self.served = 0  # rows sent in answers to pulls
        super().__init__(rules, workload, ParameterStore(rules, _NOTHING))
        self.log.rank = workload.n + shard
        for w in range(self.n):  # every worker starts with the initial parameters: read
            self.store.admit(w)  # at version 0, as a first pull would have

    @property
    def model_of_record(self) -> np.ndarray:
        return self.params

    def on_pull_rows(self, worker: int, ids: np.ndarray, now: float) -> None:
        self.wanted[worker] = ids.copy()
        self.on_pull(worker, now)

    def on_push(self, worker: int, grad: Any, version_read: int, loss: float,
                now: float) -> list[tuple[int, int]]:
        """A :class:`RowPush` under the rules: kept for the step, applied or dropped."""
        if self.finished:
            return []
        self.grads[worker] = grad
        try:
            update = self.store.push(worker, _NOTHING, version_read, loss)
            if update is None:  # kept for the step, or dropped as stale
                if worker not in self.store.arrived:
                    del self.grads[worker]
                return []
            used = [update.worker] if update.worker >= 0 else self.store.last_step
            self.step([self.grads.pop(w) for w in used], self.rules.lr(update.staleness))
        except NonFiniteError:
            self.log.diverged = self.finished = True
            return []
        self._applied(update, now)
        return []

    def step(self, pushes: list[RowPush], lr: float) -> None:
        """Step the rows ``pushes`` carry, and the dense range, by their mean (summed in
        the order given, then scaled: :meth:`Rules.mean`'s arithmetic)."""
        layout = self.layout
        step_mean_rows(layout, self.sgd, self.total,
                       [[(b, rows, push.values[where].reshape(len(rows), -1))
                         for b, rows, where in layout.blocks_in(push.ids)]
                        for push in pushes], lr)
        lo, hi = self.dense
        self.sgd.step(self.rules.mean([p.dense for p in pushes], self.dense_total), lr,
                      slice(lo, hi))

    def answer(self, r: Reply, message: np.ndarray) -> int:
        """Fill ``message`` after its header with the rows ``r.worker`` asked for and the
        dense range; the values written."""
        ids = self.wanted.pop(r.worker)
        self.served += len(ids)
        at = self.layout.read(self.params, ids, message)
        lo, hi = self.dense
        message[at:at + hi - lo] = self.params[lo:hi]
        return at + hi - lo

    def bye(self, worker: int) -> None:
        """``worker`` was told STOP by another shard: it sends nothing more."""
        self.pending.pop(worker, None)
        self.wanted.pop(worker, None)
        self.held.discard(worker)
        self.stopped.add(worker)


def serve(ctx: RankContext) -> RankLog:
    """A server shard: receive, apply the rules, reply, until every worker has stopped."""
    workload = ctx.workload
    layout = layout_of(workload)
    n, shard = workload.n, ctx.rank - workload.n
    protocol = ShardProtocol(ctx.rules, workload, layout, shard)
    most_ids, most_values = _buffers(layout, workload.config.workload.batch)
    width = protocol.dense[1] - protocol.dense[0]
    inbox = np.zeros(HEADER + most_ids + most_values + width)
    replies = [np.zeros(HEADER + most_values + width) for _ in range(n)]
    log = protocol.log
    me = ctx.rank
    link = server_link(ctx, n)

    def reply(r: Reply) -> None:
        message = replies[r.worker]
        began = start_reply(ctx, log, me, link, r, message, protocol.store.version)
        count = HEADER
        if r.worker in protocol.wanted:  # the rows asked for (with STOP: the final ones)
            count += protocol.answer(r, message[HEADER:])
        link.reply(r.worker, message[:count])
        log.messages += 1
        log.span(me, "overhead", began, ctx.now())

    def take(got: Received) -> None:
        kind, w, count, now = inbox[0], int(inbox[1]), got.count, got.arrived_s
        if kind == PULL:
            protocol.on_pull_rows(w, inbox[HEADER:count].view(np.int64), now)
        elif kind == PUSH:
            k = int(inbox[6])
            ids = inbox[HEADER:HEADER + k].view(np.int64).copy()
            values = inbox[HEADER + k:count - width].copy()
            protocol.on_push(w, RowPush(ids, values, inbox[count - width:count].copy()),
                             int(inbox[2]), float(inbox[3]), now)
            log.span(me, "update", got.unpacked_s, ctx.now())
        elif kind == BYE:
            protocol.bye(w)

    link.warm_up(inbox, replies)  # a full-size round trip with every worker
    ctx.start_clock()
    serve_loop(ctx, protocol, link, inbox, take, reply)
    link.close(set())
    log.steps = [("served", protocol.served)]
    if shard == 0:
        log.extra.update(ctx.rules.summary(protocol.store))
    return log


def combine(logs: list[RankLog], workload: Workload) -> None:
    """The first shard's updates stand for the step (every shard closes it); the model of
    record at each evaluation is put together from every shard's part; the traffic keys
    are the workers' measured sums and the shards' rows served."""
    n = workload.n
    workers, shards = logs[:n], logs[n:]
    layout = layout_of(workload)
    first = shards[0]
    for iteration in list(first.snapshots):
        parts = [s.snapshots.get(iteration) for s in shards]
        if any(p is None for p in parts):
            del first.snapshots[iteration]
            continue
        first.snapshots[iteration] = layout.merge(parts)  # type: ignore[arg-type]
    for other in shards[1:]:
        other.snapshots, other.updates = {}, []
    counts = np.array([log.steps[0][1:] for log in workers], float).sum(axis=0)
    pulls, pushes, unique, pulled, pushed = counts
    served = np.array([log.steps[0][1] for log in shards], float)
    first.extra.update({
        "unique_ids_per_step": unique / max(1.0, pulls),
        "pull_bytes_per_step": pulled / max(1.0, pulls),
        "push_bytes_per_step": pushed / max(1.0, pushes),
        "shard_load_max_over_mean": load_max_over_mean(served),
        "cache_hit_rate": 0.0,  # real runs keep no cache (embeddings.cache_rows = 0)
    })
