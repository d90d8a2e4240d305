"""``bsp`` with every replica split over ranks ([parallel]: pipeline stages, tensor shards,
microbatches), on real MPI ranks.

The job has D x p x t ranks placed by the plan (:func:`sim.training.parallel_plan.build_plan`:
rank r is (replica, stage, shard)). Every step, each rank runs its stage's passes in the
schedule's order (``Stage.ops``: GPipe or 1F1B) with its
:class:`~sim.training.stage_numerics.ShardRunner`:

- F(k): stage 0 takes microbatch k's rows of its replica's batch (worker ``replica``'s batch
  stream, the very batches bsp's worker ``replica`` draws, so the losses compare); the other
  stages wait for the activation from the previous stage (:mod:`.stage_links`). The forward
  pass runs with its tensor group's sums (:mod:`.tensor_group`) and its output goes on to
  the next stage; the last stage takes the microbatch's loss and its logits' gradient.
- B(k): the last stage starts from that gradient, the others wait for it from the next
  stage; the backward pass adds into the rank's gradient and its input's gradient goes back.

After the flush, each rank sums the gradient of the parameters it holds
(:meth:`ShardRunner.held`: its part and its copies of the entries every shard holds) over
its data group (its stage and shard in every replica: ``strategy.collective`` by the run's
allreduce implementation, as bsp), takes the mean over the D replicas and steps them with
bsp's SGD kernel. A rank keeps only its held entries, packed (the runner's ``packed``
layout: its layers one after another, so a row-parallel layer's columns are contiguous and
nothing is gathered or scattered during a step); the model of record is put together
after the run from replica 0's ranks' snapshots of their held entries (copies held by
several shards must agree to the bit, or the run fails) and evaluated off the clock, as bsp's.

Numbers: with one microbatch and one shard per stage every kernel call is bsp's, and a sum
of two replicas' gradients is the same in either order, so the losses are a real bsp run's
bit for bit with D <= 2; otherwise equal up to float64 reassociation.

Divergence: a NaN or Inf makes a pass end early with NaN (its peers still get their sums and
messages) and an update raise where it lands. A rank whose update raised keeps NaN
parameters; every rank tells the others by a one-value non-blocking allreduce started after
its update and completed after the next step's passes (so it costs no synchronisation of its
own), and there every rank stops, before that step's update.

Time on a rank: gathering the batch (data; stage 0 and the last stage only), the passes'
kernels (compute, each piece named by its pass: F3, B3), the tensor group's sums (overhead
and wire), the stage messages (posting: overhead; blocked on a receive: wait until the
sender posted it, wire after), the data group's allreduce (wire before its slowest member
was ready is wait, as bsp's) and the update. :func:`combine` adds the run's figures:
``bubble_fraction``, ``stage_compute_s``, ``pipeline_p2p_s``, ``tensor_allreduce_s`` (measured)
and the plan's ``activation_bytes_per_step`` (the memory keys: every run's,
:mod:`sim.real.executors.assemble`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from sim.kernels import NonFiniteError
from sim.real.executors.assemble import RankLog, carve
from sim.real.executors.context import RankContext
from sim.real.executors.rank_clock import Waiter
from sim.real.executors.rank_collectives import make_allreduce
from sim.real.executors.split_log import DATA_PARALLEL, LINKS, OTHER, PASS, TENSOR, SplitStep
from sim.real.executors.split_log import combine as combine
from sim.real.executors.stage_links import StageLinks
from sim.real.executors.tensor_group import TensorGroup
from sim.training.parallel_plan import build_plan, rank_track
from sim.training.rules import SGD
from sim.training.stage_numerics import ShardRunner


class Agreement:
    """Whether some rank's update failed: a one-value non-blocking allreduce (logical or)
    per step on a communicator of its own, started after each update and completed later."""

    def __init__(self, comm: Any, waiter: Waiter) -> None:
        self.comm, self.waiter = comm, waiter
        self.request: Any = None
        self.mine, self.any = np.zeros(1, np.int32), np.zeros(1, np.int32)

    def start(self, failed: bool) -> None:
        from mpi4py import MPI

        self.mine[0] = int(failed)
        self.request = self.comm.Iallreduce([self.mine, MPI.INT], [self.any, MPI.INT],
                                            op=MPI.LOR)

    def failed(self) -> bool:
        """Whether the last update started failed on some rank (False if none is pending)."""
        if self.request is None:
            return False
        self.waiter.one(self.request)
        self.request = None
        return bool(self.any[0])


class SplitRank:
    """One rank of a split replica: its layers, its links to the neighbouring stages, its
    tensor group and its data group, and the parameters it holds."""

    def __init__(self, ctx: RankContext) -> None:
        config, workload, comm = ctx.config, ctx.workload, ctx.comm
        self.ctx, self.now = ctx, ctx.now
        self.plan = plan = build_plan(config)
        place = plan.ranks[ctx.rank]
        self.replica, self.stage = place.replica, plan.stages[place.stage]
        self.first, self.last = place.stage == 0, place.stage == plan.pipeline - 1
        model = workload.model
        self.shapes = model.shapes
        # the held entries, packed: the rank's parameters and gradient are vectors of its own
        # (nothing gathered or scattered a step; the allreduce and the update take them whole)
        self.runner = ShardRunner(model, plan, place.stage, place.shard, packed=True)
        self.params = workload.params[self.runner.held()]
        self.grad = np.zeros(self.params.size)
        self.sgd = SGD(self.params, config)  # steps self.params in place
        self.worker = workload.workers[place.replica]  # its replica's batch stream
        # communicators: created by every rank in the same order (Split is collective)
        tensor_comm = comm.Split(place.replica * plan.pipeline + place.stage, place.shard)
        data_comm = comm.Split(place.stage * plan.tensor + place.shard, place.replica)
        algorithm = config.strategy.collective
        self.tensor = TensorGroup(tensor_comm, self.stage, plan.itemsize, ctx.impl, algorithm,
                                  ctx.waiter)
        self.reduce = make_allreduce(ctx.impl, data_comm, algorithm, self.params.size,
                                     ctx.waiter)
        self.links = StageLinks(comm.Dup(), plan, ctx.rank, self.shapes[self.stage.first][1],
                                self.shapes[self.stage.last][0], ctx.waiter, ctx.now)
        self.agreement = Agreement(comm.Dup(), ctx.waiter)
        self.passes: dict[str, Callable[[int, Any, SplitStep], None]] = {
            "F": self.forward, "B": self.backward}
        self.lost: set[int] = set()  # this step's microbatches whose forward hit a NaN
        self.deltas: dict[int, np.ndarray] = {}  # last stage: the logits' gradients
        self.kernel_s: list[float] = []  # seconds of pass kernels per step

    # -- one step -------------------------------------------------------------------------

    def draw(self, rec: SplitStep) -> Any:
        """The replica's next batch (X, y), for the stages that read it (None elsewhere:
        the batch stream is the same on every rank of the replica, drawn where used)."""
        if not (self.first or self.last):
            return None
        began = self.now()
        batch = self.worker.next_batch()
        rec.add(OTHER, [("data", began, self.now())])
        return batch

    def step(self, rec: SplitStep, batch: Any) -> None:
        """The stage's passes in the schedule's order, then its sends completed."""
        self.links.post()
        self.lost.clear()
        for op in self.stage.ops:
            self.passes[op.kind](op.microbatch, batch, rec)
        self.links.finish()
        if rec.loss is not None:  # the replica's batch: the mean of its microbatches' losses
            rec.loss /= self.plan.microbatches
        parts, rec.sent, rec.received = self.links.take()
        rec.add(LINKS, parts)
        self.kernel_s.append(sum(p[3] - p[2] for p in rec.parts if p[0] == PASS))

    def rows(self, microbatch: int) -> slice:
        rows = self.plan.microbatch_rows
        return slice(microbatch * rows, (microbatch + 1) * rows)

    def nan(self, width: int) -> np.ndarray:
        return np.full((self.plan.microbatch_rows, width), math.nan)

    def forward(self, microbatch: int, batch: Any, rec: SplitStep) -> None:
        x = batch[0][self.rows(microbatch)] if self.first else self.links.activation(microbatch)
        began = self.now()
        out, ok = self.tensor.run(self.runner.forward(self.params, microbatch, x), "forward",
                                  lambda: self.nan(self.shapes[self.stage.last][0]))
        if not ok:
            self.lost.add(microbatch)
        if self.last:  # the microbatches' losses in order, as one process sums them
            rec.loss = (rec.loss or 0.0) + self.loss(microbatch, out, batch[1])
        self.timed_pass(rec, f"F{microbatch}", began)
        if not self.last:
            self.links.send_activation(microbatch, out)

    def loss(self, microbatch: int, logits: np.ndarray, labels: np.ndarray) -> float:
        """The microbatch's loss (its rows' mean); its logits' gradient is kept for its
        backward (NaN after a NaN)."""
        try:
            loss, delta = self.runner.loss(microbatch, logits, labels[self.rows(microbatch)])
        except NonFiniteError:
            loss, delta = math.nan, self.nan(logits.shape[1])
        self.deltas[microbatch] = delta
        return loss

    def backward(self, microbatch: int, batch: Any, rec: SplitStep) -> None:
        delta = self.deltas.pop(microbatch) if self.last else self.links.gradient(microbatch)
        began = self.now()
        width = self.shapes[self.stage.first][1]

        def fallback() -> np.ndarray | None:
            return self.nan(width) if not self.first else None

        if microbatch in self.lost:  # nothing stashed to go back through
            out, ok = self.tensor.lost("backward", fallback), False
        else:
            out, ok = self.tensor.run(self.runner.backward(self.params, self.grad, microbatch,
                                                           delta), "backward", fallback)
        if not ok:  # the step's gradient is lost: every later microbatch's sum raises too
            self.grad[:] = math.nan
        self.timed_pass(rec, f"B{microbatch}", began)
        if not self.first:
            self.links.send_gradient(microbatch, out)

    def timed_pass(self, rec: SplitStep, label: str, began: float) -> None:
        """Log the pass that ran from ``began`` to now: its kernels (compute, named by the
        pass) around its tensor group's sums."""
        ended = self.now()
        sums = self.tensor.take(self.ctx.t0)
        rec.passes.append((label, began, ended))
        pieces = carve(("compute", began, ended), sums)
        rec.add(PASS, [p for p in pieces if p[0] == "compute"], label)
        rec.add(TENSOR, [p for p in pieces if p[0] != "compute"])

    # -- after the flush ------------------------------------------------------------------

    def update(self, rec: SplitStep) -> bool:
        """Sum the held entries' gradient over the data group, take the mean and step them;
        False if a NaN or Inf made it raise (the held parameters are NaN then)."""
        ctx = self.ctx
        summed = self.grad
        rec.ready = self.now()
        self.reduce(summed)
        rec.add(DATA_PARALLEL, self.reduce.take(ctx.t0))
        began = self.now()
        try:
            self.sgd.step(ctx.rules.mean_of_sum(summed, ctx.workload.n), ctx.rules.lr(0))
        except NonFiniteError:
            self.params[:] = math.nan
            return False
        rec.updated = self.now()
        rec.add(OTHER, [("update", began, rec.updated)])
        return True

    def warm_up(self) -> None:
        """One step on fixed rows (the first batch of the replica's shard), outside its batch
        stream and the clock, then the data group's allreduce and the agreement once: code
        paths, connections and buffers are warm when the clock starts. Nothing is kept but
        the gradient's scratch values."""
        data, worker = self.ctx.workload.data, self.worker
        rows = worker.shard[:worker.batch]
        self.step(SplitStep(0), (data.X_train[rows], data.y_train[rows]))
        self.deltas.clear()
        self.reduce(np.zeros(self.params.size))
        self.agreement.start(False)
        self.agreement.failed()
        self.reduce.take(self.ctx.t0)
        self.kernel_s.clear()

    @property
    def messages(self) -> int:
        return self.links.messages + self.tensor.messages + self.reduce.messages


def run(ctx: RankContext) -> RankLog:
    """This rank's part of the run: ``run.iterations`` steps (fewer after a NaN), its log
    holding a :class:`SplitStep` per update applied (:func:`combine` reads them)."""
    rank = SplitRank(ctx)
    log = RankLog(ctx.rank)
    holds_record = rank.replica == 0  # replica 0's ranks snapshot the model of record
    if holds_record:
        log.reserve(rank.params.size, ctx.rules, ctx.config.run.iterations)
    rank.warm_up()
    ctx.start_clock()
    if holds_record:
        log.snapshot(rank.params, ctx.rules, 0)
    for update in range(1, ctx.config.run.iterations + 1):
        rec = SplitStep(update)
        rank.step(rec, rank.draw(rec))
        began = ctx.now()
        stop = rank.agreement.failed()  # the last update failed somewhere: stop here
        rec.add(OTHER, [("overhead", began, ctx.now())])
        if stop:
            break
        ok = rank.update(rec)
        rank.agreement.start(not ok)
        if not ok:
            log.diverged = True
            continue
        log.steps.append(rec)
        if holds_record:
            log.snapshot(rank.params, ctx.rules, len(log.steps))
        ctx.heartbeat.beat()
    rank.agreement.failed()
    log.kernel_s, log.messages = rank.kernel_s, rank.messages
    log.track = rank_track(rank.plan.ranks[ctx.rank])
    return log

