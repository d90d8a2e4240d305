"""``bsp`` with a model's embedding tables split over the workers (wide-deep,
``embeddings.placement = "alltoall"``, DLRM's model parallelism, Naumov et al. 2019) on
real ranks: the pooled embeddings and their gradients cross by ``MPI_Alltoallv``.

Rank r is worker r and the owner of the table rows the shard map gives it with shards =
workers (``embeddings.sharding``: hashed or ranged rows, or whole tables; a
:class:`~sim.real.executors.table_shards.ShardLayout` with the dense part on every rank).
It holds only those rows (the rest of its copy is NaN) with their optimizer state, and the
whole MLP, as the simulator's :class:`~sim.simulated.strategies.table_exchange.AllToAll`
places them. A step:

1. ``data``: every worker's next batch. Rank r trains on its own batch and looks up its
   rows for everyone's: the ids are read from the data set every rank holds (the
   simulator does not charge an exchange of ids either).
2. ``compute``: for each worker i, the partial pooled sums of i's bags over the rows r
   holds (a row-sharded table: every rank sends a partial sum of every field; a whole
   table: its owner sends the pooled vectors), and the wide part's partial sum likewise.
3. ``wire``: the forward ``Alltoallv``: rank j sends rank i ``batch x`` (the columns j
   holds) values, :meth:`~sim.training.embedding_shards.ShardMap.alltoall_bytes`.
4. ``compute``: rank i adds the parts in owner order (divided by the bag size for mean
   pooling), runs the MLP on its batch (:meth:`WideDeep.head_loss_grad`) and gets the
   gradients of the pooled vectors and of the wide logits.
5. ``wire``: the backward ``Alltoallv`` (the transpose): each owner receives every
   worker's gradients of the columns it holds.
6. ``compute``: each owner's row gradients for every worker's batch (the model's own
   embedding-bag backward and wide gradient, on the gradients received), its rows only.
7. ``wire``: the dense gradient's allreduce (``strategy.collective``, as ``bsp`` does).
8. ``update``: the owned rows stepped by the mean of the workers' row gradients (summed in
   worker order, then scaled: the simulated allreduce's mean, zeros at untouched rows add
   nothing) with the tables' row optimizer, and the MLP by the mean dense gradient.

So the numbers are the simulated bsp's (any placement gives the replicated numbers): with
one id per bag and a one-rank wide part the pooled sums are the same bits; otherwise a
partial sum adds in another order (rounding, ~1e-16 relative). The summary's traffic keys
are measured: ``pull_bytes_per_step`` the pooled values a rank received from the others,
``push_bytes_per_step`` the gradients it sent back plus its dense gradient,
``unique_ids_per_step`` its batch's distinct rows, ``shard_load_max_over_mean`` the ids
each owner looked up. Blocked time in a collective before the slowest rank entered it is
``wait`` (found after the run on the common clock), as in bsp.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim import kernels as K
from sim.kernels import NonFiniteError
from sim.real.executors.assemble import Part, RankLog
from sim.real.executors.bsp import waiting_for
from sim.real.executors.context import RankContext
from sim.real.executors.rank_collectives import make_allreduce
from sim.real.executors.table_shards import RowGrads, ShardLayout, step_mean_rows
from sim.recorder import UpdateRecord
from sim.training.embedding_shards import load_max_over_mean
from sim.training.rules import SGD
from sim.training.workload import Workload

VALUE_BYTES = 8  # float64
# a step's collectives, in order: their wire spans are kept apart until combine()
FORWARD, BACKWARD = "wire:forward", "wire:backward"
COLLECTIVES = {FORWARD: 0, BACKWARD: 1, "wire": 2}  # "wire": the allreduce's


def layout_of(workload: Workload) -> ShardLayout:
    """The tables over the workers (shards = workers), the MLP on every rank."""
    return ShardLayout(workload.model, workload.n, workload.config.embeddings.sharding,
                       split_dense=False)


class Owner:
    """What rank ``rank`` holds and how its blocks of pooled columns are laid out."""

    def __init__(self, layout: ShardLayout, rank: int) -> None:
        self.layout, self.rank, self.n = layout, rank, layout.shards
        # columns[j][t]: the columns of table t that rank j sends (0 or the table's dim)
        self.columns = np.array([[layout.map.columns(t)[j] for t in range(len(layout.tables))]
                                 for j in range(self.n)], np.int64)
        self.width = self.columns.sum(axis=1)  # a block's columns, per sending rank
        self.offsets = np.concatenate([np.zeros((self.n, 1), np.int64),
                                       np.cumsum(self.columns, axis=1)], axis=1)
        # the owner of each row of the embedding tables, laid end to end (WideDeep.bags)
        self.block_owner = np.concatenate(layout.owner[1:])

    def owned(self, table: int, ids: np.ndarray) -> np.ndarray:
        """Whether each of ``ids`` (rows of ``table``, any shape) is this rank's."""
        return self.layout.owner[table][ids] == self.rank

    def partial(self, params: np.ndarray, X, out: np.ndarray) -> int:
        """The partial pooled sums of batch ``X`` over this rank's rows into ``out``
        (len(X), width): wide first, then each field; the ids looked up. Every field at once,
        over the block of embedding tables (:meth:`WideDeep.bags`): each bag sums its own ids
        in order, as a field's lookup would."""
        model, layout, r = self.layout.model, self.layout, self.rank
        n, d = len(X), model.dim
        at = self.at(0)
        looked = 0
        if at is not None:  # the wide part: its crossed ids, and the bias
            view = layout.tables[0].view(params)
            ids = X.wide
            mine = self.owned(0, ids)
            values = np.zeros(ids.shape)
            values[mine] = view[ids[mine], 0]
            out[:, at] = values.sum(axis=1)[:, None]
            looked += int(mine.sum())
            if self.owned(0, np.array([model.cross_buckets]))[0]:
                out[:, at] += view[model.cross_buckets, 0]
                looked += len(ids)
        bags = model.bags(X)
        mine = self.block_owner[bags] == r
        values = np.zeros((*bags.shape, d))
        values[mine] = model.block(params)[bags[mine]]
        pooled = values.sum(axis=1).reshape(n, model.fields, d)
        for t in range(1, len(layout.tables)):
            at = self.at(t)
            if at is not None:
                out[:, at] = pooled[:, t - 1, :]
        return looked + int(mine.sum())

    def at(self, table: int) -> slice | None:
        """Where table ``table``'s columns lie in this rank's block (None: it has none)."""
        cols = int(self.columns[self.rank, table])
        start = int(self.offsets[self.rank, table])
        return slice(start, start + cols) if cols else None

    def pooled(self, blocks: list[np.ndarray], X) -> tuple[np.ndarray, np.ndarray]:
        """(the MLP's input, the wide logits) of this rank's batch ``X`` from every owner's
        block (owner order)."""
        model, layout = self.layout.model, self.layout
        n, d = len(X), model.dim
        x = np.empty((n, model.fields * d + model.dense_features))
        wide = None
        for t in range(len(layout.tables)):
            total = None
            for j, block in enumerate(blocks):
                cols = int(self.columns[j, t])
                if not cols:
                    continue
                part = block[:, int(self.offsets[j, t]):int(self.offsets[j, t]) + cols]
                total = part.copy() if total is None else total + part
            assert total is not None
            if t == 0:
                wide = total[:, 0]
            else:
                x[:, (t - 1) * d:t * d] = total / model.ids_per_field if model.mean else total
        x[:, model.fields * d:] = X.dense
        assert wide is not None
        return x, wide

    def gradient_block(self, j: int, dz: np.ndarray, delta: np.ndarray,
                       out: np.ndarray) -> None:
        """The gradients of owner ``j``'s columns (this rank's batch) into ``out``."""
        d = self.layout.model.dim
        for t in range(len(self.layout.tables)):
            cols = int(self.columns[j, t])
            if cols:
                at = slice(int(self.offsets[j, t]), int(self.offsets[j, t]) + cols)
                out[:, at] = dz[:, None] if t == 0 else delta[:, (t - 1) * d:t * d]

    def row_grads(self, X, block: np.ndarray) -> RowGrads:
        """This rank's rows' gradients for worker batch ``X`` whose gradient block (this
        rank's columns) is ``block``, as rows of the layout's blocks: the model's own
        backward (every field at once, :meth:`WideDeep.bags`), kept at owned rows."""
        model, layout, r = self.layout.model, self.layout, self.rank
        n, d = len(X), model.dim
        out: RowGrads = []
        at = self.at(0)
        if at is not None:
            part = model.wide_grad(X.wide, np.ascontiguousarray(block[:, at.start]))
            mine = self.owned(0, part.rows)
            if mine.any():
                b, start = layout.block_of(0)
                out.append((b, part.rows[mine] + start, part.grads[mine]))
        grad_out = np.zeros((n, model.fields, d))
        for t in range(1, len(layout.tables)):
            at = self.at(t)
            if at is not None:
                grad_out[:, t - 1, :] = block[:, at]
        bags = model.bags(X)
        rows, inverse = np.unique(bags, return_inverse=True)
        grads = K.embedding_bag_backward(bags, grad_out.reshape(-1, d), model.mean,
                                         inverse.astype(np.int64), len(rows))
        mine = self.block_owner[rows] == r
        if mine.any():  # the model's block of embedding tables, in the layout's blocks
            b, start = layout.block_of(1)
            out.append((b, rows[mine].astype(np.int64) + start, grads[mine]))
        return out

class Blocks:
    """The all-to-all's buffers of one rank. Forward, this rank sends every rank i a block
    (batch, width[rank]) of its columns and receives from every owner j a block
    (batch, width[j]); backward is the transpose, into the same buffers."""

    def __init__(self, comm: Any, width: np.ndarray, rank: int, batch: int) -> None:
        n = len(width)
        self.comm, self.batch = comm, batch
        self.send = np.zeros(n * batch * int(width[rank]))
        self.recv = np.zeros(batch * int(width.sum()))
        self.send_counts = np.full(n, batch * int(width[rank]))
        self.recv_counts = batch * width
        self.send_displs = np.arange(n) * batch * int(width[rank])
        self.recv_displs = np.concatenate([[0], np.cumsum(self.recv_counts)[:-1]])
        # what one direction moves between ranks (bytes): the blocks from other owners
        self.off_rank_bytes = float((self.recv_counts * (np.arange(n) != rank)).sum()) \
            * VALUE_BYTES

    def _exchange(self, send: tuple, recv: tuple) -> None:
        from mpi4py import MPI

        self.comm.Alltoallv([send[0], send[1:], MPI.DOUBLE], [recv[0], recv[1:], MPI.DOUBLE])

    def forward(self) -> None:
        self._exchange((self.send, self.send_counts, self.send_displs),
                       (self.recv, self.recv_counts, self.recv_displs))

    def backward(self) -> None:
        self._exchange((self.recv, self.recv_counts, self.recv_displs),
                       (self.send, self.send_counts, self.send_displs))

    def sent(self, i: int) -> np.ndarray:
        """The block for (forward) or from (backward) rank ``i``: (batch, own width)."""
        start = self.send_displs[i]
        return self.send[start:start + self.send_counts[i]].reshape(self.batch, -1)

    def received(self) -> list[np.ndarray]:
        """Every owner's block, (batch, its width), in owner order."""
        return [self.recv[d:d + c].reshape(self.batch, -1)
                for d, c in zip(self.recv_displs, self.recv_counts, strict=True)]


def run(ctx: RankContext) -> RankLog:

    comm, workload, rank, config = ctx.comm, ctx.workload, ctx.rank, ctx.config
    n, model, rules = workload.n, workload.model, ctx.rules
    layout = layout_of(workload)
    owner = Owner(layout, rank)
    sgd = SGD(layout.own(workload.params, rank), config)
    params = sgd.params
    total = np.zeros_like(params)  # the rows' mean, at the step's rows
    dense = slice(model.dense_start, model.size)
    dense_grad = np.zeros(model.size - model.dense_start)
    allreduce = make_allreduce(ctx.impl, comm, config.strategy.collective, dense_grad.size,
                               ctx.waiter)
    batch = config.workload.batch
    blocks_of = Blocks(comm, owner.width, rank, batch)
    _warm_up(ctx, blocks_of, allreduce, dense_grad)
    log = RankLog(rank)
    log.reserve(params.size, rules, config.run.iterations)  # every rank snapshots its rows
    log.snapshot(params, rules, 0)
    ctx.start_clock()
    allreduce.parts.clear()
    steps: list[tuple] = []
    looked = 0
    trained = []  # this rank's batches: their distinct rows are counted after the run
    pulled = pushed = 0.0

    for update in range(1, config.run.iterations + 1):
        parts: list[Part] = []
        began = ctx.now()
        batches = [w.next_batch() for w in workload.workers]  # every worker's next batch
        X, y = batches[rank]
        drawn = ctx.now()
        parts.append(("data", began, drawn))
        for i, (Xi, _) in enumerate(batches):
            looked += owner.partial(params, Xi, blocks_of.sent(i))
        entered = [ctx.now()]
        parts.append(("compute", drawn, entered[0]))
        blocks_of.forward()
        done = ctx.now()
        parts.append((FORWARD, entered[0], done))
        blocks = blocks_of.received()
        pulled += blocks_of.off_rank_bytes
        x, wide = owner.pooled(blocks, X)
        loss, dz, delta = _head(model, params, x, wide, y, dense_grad)
        trained.append(X)
        for j in range(n):  # backward: the gradients of owner j's columns, into the
            owner.gradient_block(j, dz, delta, blocks[j])  # forward's receive buffer
        entered.append(ctx.now())
        parts.append(("compute", done, entered[1]))
        blocks_of.backward()
        done = ctx.now()
        parts.append((BACKWARD, entered[1], done))
        pushed += blocks_of.off_rank_bytes + dense_grad.nbytes
        grads = [owner.row_grads(Xi, blocks_of.sent(i)) for i, (Xi, _) in enumerate(batches)]
        entered.append(ctx.now())
        parts.append(("compute", done, entered[2]))
        allreduce(dense_grad)  # the sum, in place
        reduced = ctx.now()
        parts += allreduce.take(ctx.t0)
        try:
            lr = rules.lr(0)
            # the dense part first: every rank holds the same (NaN) sum, so all stop together
            sgd.step(rules.mean_of_sum(dense_grad, n), lr, dense)
            step_mean_rows(layout, sgd, total, grads, lr)
        except NonFiniteError:
            log.diverged = True
            break
        updated = ctx.now()
        parts.append(("update", reduced, updated))
        steps.append((parts, tuple(entered), updated, loss))
        log.snapshot(params, rules, update)
        ctx.heartbeat.beat()
    log.steps = steps
    # counted off the clock: a statistic of the run, not work a rank of it would do
    log.extra["_tables"] = (sum(len(ids) for X in trained for ids in model.touched(X)),
                            looked, pulled, pushed)
    return log


def _head(model: Any, params: np.ndarray, x: np.ndarray, wide: np.ndarray, y: np.ndarray,
          dense_grad: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """The dense head's loss and the gradients at its input (dz) and at the pooled
    embeddings (delta), its own gradient written into ``dense_grad``. A non-finite one
    gives NaNs, which go on to every rank through the allreduce, so all stop together."""
    try:
        loss, dz, grad, delta = model.head_loss_grad(params, x, wide, y)
        dense_grad[:] = grad
    except NonFiniteError:
        loss, dz, delta = np.nan, np.full(len(y), np.nan), np.full(x.shape, np.nan)
        dense_grad.fill(np.nan)
    return loss, dz, delta


def _warm_up(ctx: RankContext, blocks_of: Blocks, allreduce: Any,
             dense_grad: np.ndarray) -> None:
    """The kernels, both directions of the block exchange and the allreduce, once each
    before the clock starts (their first calls set up buffers and connections)."""
    ctx.warm_kernels(ctx.workload.params)
    blocks_of.forward()
    blocks_of.backward()
    allreduce(np.zeros_like(dense_grad))


def combine(logs: list[RankLog], workload: Workload) -> None:
    """Every rank's steps into spans (blocked in a collective before the slowest rank
    entered it: wait), rank 0's log into the run's updates, the model of record at each
    evaluation put together from every rank's rows, and the traffic keys."""
    n = workload.n
    steps = [log.steps for log in logs]
    count = min(len(s) for s in steps)
    for k in range(count):
        joined = [max(s[k][1][c] for s in steps) for c in range(3)]
        for rank, s in enumerate(steps):
            parts = s[k][0]
            out: list[Part] = []
            for kind, start, end in parts:  # each collective's wire: from when all entered
                c = COLLECTIVES.get(kind)
                if c is None:
                    out.append((kind, start, end))
                else:
                    out += waiting_for([("wire", start, end)], joined[c])
            logs[rank].spans_of(rank, out)
        loss = float(np.mean([s[k][3] for s in steps]))
        logs[0].updates.append((steps[0][k][2], UpdateRecord(
            -1, k + 1, k, 0, loss, n * workload.config.workload.batch)))
    layout = layout_of(workload)
    for iteration in list(logs[0].snapshots):
        parts = [log.snapshots.get(iteration) for log in logs]
        if any(p is None for p in parts):
            del logs[0].snapshots[iteration]
            continue
        logs[0].snapshots[iteration] = layout.merge(parts)  # type: ignore[arg-type]
    for log in logs[1:]:
        log.snapshots = {}
    unique, looked, pulled, pushed = np.array([log.extra.pop("_tables") for log in logs],
                                              float).T
    per_step = max(1, count * n)
    logs[0].extra.update({
        "unique_ids_per_step": float(unique.sum()) / per_step,
        "pull_bytes_per_step": float(pulled.sum()) / per_step,
        "push_bytes_per_step": float(pushed.sum()) / per_step,
        "shard_load_max_over_mean": load_max_over_mean(looked),
        "cache_hit_rate": 0.0,
    })
