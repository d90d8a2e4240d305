"""bsp and bsp-ps on a parallelism plan: each replica's layers split over pipeline stages
and tensor shards, its batch into microbatches (:mod:`sim.training.parallel_plan`).

Every rank of the plan is a SimPy process that runs its stage's passes in the schedule's
order (:func:`sim.training.stage_schedule.stage_ops`) each step:

- a forward pass of microbatch k waits for its activations from the same shard of the
  previous stage (a point-to-point message over the simulated network,
  :class:`~sim.simulated.stages.Mailbox`), computes its layers, and sends its output on; a
  backward pass waits for the gradient from the next stage and sends its input's gradient
  back. Stage 0 reads its microbatch itself; the last stage starts backward from its loss.
- a layer's compute takes its share of the rank's step, by FLOPs: the rank draws its step's
  seconds from the compute model for its shard's FLOPs
  (:meth:`~sim.training.compute_model.ComputeModel.part_duration`: device rate and overhead,
  or compute.time_s by FLOP share; noise, stragglers and slowdowns per rank), once per
  step when its previous step's passes end, as a bsp worker draws its gradient's, and each
  microbatch gets 1/m of it. Layers run one after another as bsp's do.
- a tensor group (the t shards of a stage of a replica) allreduces after a row-parallel
  layer's forward and a column-parallel layer's backward (the plan's TensorAllreduce list,
  per microbatch), with strategy.collective, on the live network.
- once a rank's passes of the step are done, its data group (its stage's shard in every
  replica) combines their gradients as the data-parallel strategy does: under bsp the last
  to arrive starts their allreduce of the shard's gradient, then each updates (bsp's CPU
  costs); under bsp-ps each pushes its shard's key range to the servers, the group's last
  push has the servers average and step the range, and each pulls it back (bsp-ps's
  costs). The step closes, and its update is recorded, when every data group has updated;
  a rank starts its next step once its own group has.
- a hierarchical strategy.collective (``hierarchical``, ``hierarchical-rs``) runs on each
  data and tensor group over the group's own members a host (:meth:`PlanRanks.
  group_collective`): 64 replicas of one rank on DGX-2H hosts of 16 give data groups of 16
  a host, whose slices leave on the host's 8 NICs; 8 shards a replica give data groups of
  2 a host. A tensor group inside one host runs the ring (hierarchy gains nothing there).

Numerics are the split replica's (:mod:`sim.training.stage_numerics`): once per step, at the
parameters of record, each replica's batch goes through its stages' and shards' layers
microbatch by microbatch with the C kernels, its tensor groups' partial sums added in shard
order; the replicas' gradients are then averaged in rank order, as bsp's. The numbers are
computed when the step before closes and the timing is the plan's, as bsp computes its
gradients apart from its pipeline's timing (:mod:`sim.simulated.strategies.pipelined`). With
one stage, one shard and one microbatch the run is the plain strategy's, bit for bit and
time for time (the few zero-length waits below keep SimPy's order of events at one instant
where ranks share cores); otherwise its losses are up to rounding
(tests/simulated/test_model_parallel_sim.py).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from operator import attrgetter
from typing import Any

import numpy as np
import simpy

from sim.network.collectives import Collective, configured
from sim.network.hierarchical import block_size
from sim.recorder import KINDS
from sim.simulated.stage_overlap import GroupOverlap, final_backwards, stage_messages
from sim.simulated.stages import BubbleTally, Mailbox, Meetings, StageWork, stage_works
from sim.simulated.strategies.allreduce import BSP, AllreduceMixin, Group
from sim.simulated.strategies.base import Endpoint, cpu, push, together
from sim.simulated.strategies.ps_sync import BSPPS
from sim.trace import Facts
from sim.training.messages import plan_messages
from sim.training.stage_numerics import replica_loss_grad
from sim.training.stage_schedule import Op
from sim.training.workload import Worker

# what it adds to summary.json (docs/reference/results.md; the memory keys every run of a
# dense model reports: sim.training.rank_memory)
MODEL_PARALLEL_KEYS = ("ranks", "bubble_fraction",
                       "stage_compute_s", "activation_bytes_per_step", "pipeline_p2p_s",
                       "tensor_allreduce_s", "stage_layers")

# what a message between stages carries, by the pass that sends it (for the trace)
_CARRIES = {"F": "activation", "B": "activation gradient"}


class PlanRanks(AllreduceMixin):
    """A parallelism plan's ranks, each running its stage's passes (module docstring); a
    subclass closes a stage's step (:meth:`data_parallel`) and applies the update of record
    (``apply_step``), as its data-parallel strategy does."""

    def build_ranks(self) -> None:
        """The plan's pieces: each stage's work, the groups, the messages, the tallies."""
        ctx = self.ctx
        self.plan = plan = ctx.plan
        self.works = stage_works(plan)
        batch, m = ctx.config.workload.batch, plan.microbatches
        self.shares = [ctx.compute.layer_shares(  # each stage's step over its passes
            (batch * w.forward_flops, batch * w.backward_flops), w.weight_bytes, m,
            activations=batch * w.activations,
            other=None if w.other is None else batch * w.other) for w in self.works]
        ranks = len(plan.ranks)
        self.placed = placed = np.asarray(ctx.placed[:ranks])
        self.data_groups = [self._group(plan.data_group(r), placed) for r in range(ranks)]
        self.tensor_groups = [self._group(plan.tensor_group(r), placed) for r in range(ranks)]
        self.mail = Mailbox(ctx.env, ctx.network, ctx.recorder, ctx.hosts, ctx.cpu.message,
                            placed, ranks)
        self.meetings = Meetings(ctx.env, ctx.recorder)
        self.bubble = BubbleTally(plan.replicas, plan.tensor, plan.pipeline)
        self.tensor_s = np.zeros(ranks)  # each rank's time in tensor allreduces
        on_core = ctx.cpu.charged and ctx.compute.on_host
        self.busy = ctx.hosts.run if on_core else ctx.hosts.sleep
        # for the pipelining keys bsp reports (sim.simulated.strategies.pipelined)
        self.layers = ctx.layers
        self.slowest_compute_s = 0.0
        self.worker_compute_s = np.zeros(ranks)
        self.step_compute: dict[int, np.ndarray] = {}
        self.updated: dict[int, int] = {}  # step -> data groups that have updated

    def start_ranks(self) -> None:
        """The first step's gradients, and every rank's process."""
        if self.ctx.numerics:
            self.compute_gradients()
        self.loops = [self.ctx.env.process(self.rank_loop(r))
                      for r in range(len(self.plan.ranks))]

    def _group(self, ranks: tuple[int, ...], placed: np.ndarray) -> Group:
        return Group(ranks, placed[list(ranks)], self.group_collective(ranks))

    def group_collective(self, ranks: tuple[int, ...]) -> Collective | None:
        """The collective of the plan's group ``ranks``: None (the strategy's) unless it
        groups ranks by host (``hierarchical``, ``hierarchical-rs``); then the same one
        built for the group's members a host, g, from the plan's rank-to-host map (equal
        consecutive blocks: :func:`sim.network.hierarchical.block_size`; the validator
        refuses other placements). A group on one host runs the ring inside it, one member
        a host the inter-host allreduce; the data and tensor groups each get theirs."""
        collective = self.collective
        if "ranks_per_host" not in collective.takes:
            return None
        g = block_size([self.ctx.plan.ranks[r].host for r in ranks])
        built = self.group_collectives
        if g not in built:
            config = self.ctx.config
            built[g] = configured(collective.name, lambda key: g if key ==
                                  "cluster.ranks_per_host" else attrgetter(key)(config))
        return built[g]

    # ---- one rank ---------------------------------------------------------------------

    def rank_loop(self, rank: int) -> Generator[simpy.Event, Any, None]:
        """Rank ``rank``'s steps until the run has its updates."""
        work = self.works[self.plan.ranks[rank].stage]
        step, step_s = 0, self.draw(rank, work, 0)
        while True:
            yield from self.rank_prologue(rank, work)
            forward_s, backward_s = work.pass_seconds(step_s, self.plan.microbatches,
                                                      self.shares[work.index])
            for op in work.ops:
                yield from self.run_pass(rank, work, step, op,
                                         forward_s if op.kind == "F" else backward_s)
            step_s = self.draw(rank, work, step + 1)
            yield from self.data_parallel(rank, work, step)
            if self.ctx.recorder.finished:
                return
            step += 1

    def draw(self, rank: int, work: StageWork, step: int) -> float:
        """Seconds of ``rank``'s compute in ``step`` (its shard's FLOPs for a replica's
        batch), drawn now."""
        ctx = self.ctx
        batch = ctx.config.workload.batch
        seconds = ctx.compute.part_duration(rank, ctx.env.now, batch * work.flops,
                                            work.traffic(self.plan.microbatches),
                                            batch * float(work.activations.sum()),
                                            batch * work.other_bytes,
                                            layers=self.shares[work.index])
        self.step_compute.setdefault(step, np.zeros(len(self.plan.ranks)))[rank] = seconds
        return seconds

    def rank_prologue(self, rank: int, work: StageWork) -> Generator[simpy.Event, Any, None]:
        """What bsp's worker does before its gradient (:func:`~sim.simulated.strategies.
        base.prologue`): the framework's per-step code; on stage 0 also gathering its
        replica's batch (the other stages get their input from the stage before)."""
        ctx = self.ctx
        if not ctx.cpu.charged:
            return
        yield from cpu(ctx, rank, "overhead", ctx.cpu.step_s)
        if work.index == 0:
            worker = ctx.workers[self.plan.ranks[rank].replica]
            yield from cpu(ctx, rank, "data", ctx.cpu.data_s(worker.batch_bytes, worker.batch))

    def run_pass(self, rank: int, work: StageWork, step: int, op: Op,
                 layer_s: np.ndarray) -> Generator[simpy.Event, Any, None]:
        """One pass: wait for its input (not on the stage that starts it), compute its
        layers with their tensor allreduces, send its output on (not from the stage that
        ends it)."""
        plan, c = self.plan, op.chunk
        forward = op.kind == "F"
        source = plan.prev_rank(rank, c) if forward else plan.next_rank(rank, c)
        letter = None
        if source is not None:
            letter = yield from self.mail.receive(  # what the neighbour sends this way
                rank, (step, op, rank),
                work.chunk_gradient_bytes[c] if forward else work.chunk_activation_bytes[c])
        start = self.ctx.env.now
        first, last = yield from self.compute_layers(rank, work, step, op, layer_s)
        place = plan.ranks[rank]
        self.bubble.passed(step, place.replica, place.shard, start, self.ctx.env.now)
        if letter is not None and letter.sender_span is not None and first is not None:
            self.ctx.recorder.notes.handoff(letter.sender_span, first)
        target = plan.next_rank(rank, c) if forward else plan.prev_rank(rank, c)
        if target is not None:
            nbytes = work.chunk_activation_bytes[c] if forward else work.chunk_gradient_bytes[c]
            # the letter of the pass it feeds: virtual stage u + 1 (forward) or u - 1
            u = c * plan.pipeline + plan.ranks[rank].stage + (1 if forward else -1)
            yield from self.mail.post(rank, target,
                                      (step, Op(op.kind, op.microbatch, u // plan.pipeline),
                                       target), nbytes, _CARRIES[op.kind], last)

    def compute_layers(self, rank: int, work: StageWork, step: int, op: Op,
                       layer_s: np.ndarray) -> Generator[simpy.Event, Any,
                                                         tuple[int | None, int | None]]:
        """The pass's layers (its chunk's; backward: last first), each a compute span named
        after the pass ("F3", "F3.1" for chunk 1), each followed by its tensor allreduce if
        it has one. Returns the first and last compute spans' numbers."""
        ctx, rec = self.ctx, self.ctx.recorder
        forward = op.kind == "F"
        lo, hi = work.chunks[op.chunk]
        order = range(lo, hi) if forward else range(hi - 1, lo - 1, -1)
        allreduces = work.forward_allreduces if forward else work.backward_allreduces
        first = last = None
        for i in order:
            start = ctx.env.now
            yield from self.busy(rank, layer_s[i])
            layer = work.layers[i]
            span = rec.add_span(rank, "compute", start, ctx.env.now,
                                facts=Facts(layers=(layer, layer), label=str(op)))
            first = span if first is None else first
            last = span if span is not None else last
            if not forward:
                self.layer_done(rank, work, step, op, i)
            for k, nbytes in enumerate(allreduces.get(i, ())):
                yield from self.tensor_allreduce(rank, step, op, i, nbytes, k)
        return first, last

    def layer_done(self, rank: int, work: StageWork, step: int, op: Op,
                   position: int) -> None:
        """``op``'s backward of the layer at ``position`` is done on ``rank`` (its gradient
        is whole after its chunk's last backward): nothing unless the strategy overlaps."""

    def tensor_allreduce(self, rank: int, step: int, op: Op, position: int, nbytes: int,
                         k: int = 0) -> Generator[simpy.Event, Any, None]:
        """``rank``'s tensor group allreduces ``nbytes`` after layer ``position`` of ``op``
        (its ``k``-th there: a recomputed forward's comes before the backward's)."""
        group = self.tensor_groups[rank]
        start = self.ctx.env.now
        key = ("tensor", step, op, position, group.ranks[0]) + ((k,) if k else ())
        yield from self.meetings.join(key, rank,
                                      group.ranks, lambda: self.allreduce(nbytes, group=group))
        self.tensor_s[rank] += self.ctx.env.now - start

    def data_parallel(self, rank: int, work: StageWork,
                      step: int) -> Generator[simpy.Event, Any, None]:
        """``rank``'s passes of ``step`` are done: combine its shard's gradient with its data
        group's and update (its strategy's way); :meth:`group_updated` once the group has."""
        raise NotImplementedError

    # ---- the step ---------------------------------------------------------------------

    def gradient(self, worker: Worker, params: np.ndarray) -> float:
        """The replica's batch through its split ranks, microbatch by microbatch, stage by
        stage, each tensor group's sums in shard order
        (:func:`sim.training.stage_numerics.replica_loss_grad`): the same bits as bsp's with
        one microbatch and one shard, within rounding otherwise."""
        X, y = worker.next_batch()
        return replica_loss_grad(self.ctx.model, self.plan, params, X, y, worker.grad)

    def group_updated(self, step: int) -> None:
        """A data group has updated; the last one closes the step."""
        self.updated[step] = self.updated.get(step, 0) + 1
        if self.updated[step] == self.plan.pipeline * self.plan.tensor:
            del self.updated[step]
            self.step_done(step)

    def step_done(self, step: int) -> None:
        """Every data group has updated: bsp's update of record (sim.simulated.strategies.
        pipelined.PipelinedStrategy.step_done), and the step's bubble."""
        ctx = self.ctx
        compute = self.step_compute.pop(step)
        self.slowest_compute_s += float(compute.max())
        self.worker_compute_s += compute
        self.bubble.close(step)
        loss = self.apply_step(step) if ctx.numerics else math.nan
        for w in ctx.workers:
            w.clock = step + 1
        ctx.recorder.update(-1, step + 1, step, 0, loss, ctx.n * ctx.config.workload.batch)
        if not ctx.recorder.finished and ctx.numerics:
            self.compute_gradients()

    # ---- results ----------------------------------------------------------------------

    def alone_per_step_s(self) -> float:
        """M's share of one step: the data-parallel exchange alone on an idle network."""
        raise NotImplementedError

    def summary_extra(self) -> dict[str, Any]:
        """The data-parallel strategy's pipelining keys (M: :meth:`alone_per_step_s`; the
        messages between stages and inside tensor groups are in ``pipeline_p2p_s`` and
        ``tensor_allreduce_s``), then the plan's: the bubble, each stage's compute,
        the time on point-to-point messages and tensor allreduces (its memory: the
        engine's, as every run's)."""
        ctx, plan = self.ctx, self.plan
        steps = max(1, ctx.recorder.iteration)
        T = float(ctx.env.now)
        compute = ctx.recorder.breakdown[:len(plan.ranks), KINDS.index("compute")]
        stage_of = np.array([place.stage for place in plan.ranks])
        return {**self.pipelining_summary(self.slowest_compute_s,
                                          steps * self.alone_per_step_s(), T, T, 1),
                "ranks": len(plan.ranks),
                "bubble_fraction": self.bubble.fraction,
                "stage_compute_s": [float(compute[stage_of == s].mean())
                                    for s in range(plan.pipeline)],
                "activation_bytes_per_step": plan.activation_bytes_per_step,
                "pipeline_p2p_s": float(self.mail.spent_s.mean()),
                "tensor_allreduce_s": float(self.tensor_s.mean()),
                "stage_layers": [len(plan.virtual_stage(u).layers)
                                 for u in range(plan.pipeline * plan.chunks)]}


class ModelParallelBSP(PlanRanks, BSP):
    """bsp whose replicas run a parallelism plan: a stage's data group allreduces its
    shard's gradient (module docstring)."""

    def start(self) -> None:
        self.setup_replicas()
        # with one stage and one shard the data-parallel allreduce is the only traffic, as
        # in bsp, and its duration is replayed as bsp's is; otherwise each is simulated
        self.replays = self.replays and self.ctx.plan.pipeline * self.ctx.plan.tensor == 1
        self.build_ranks()
        self.overlaps = self.group_overlaps() if self.ctx.config.parallel.dp_overlap else None
        self.start_ranks()

    def group_overlaps(self) -> dict[int, GroupOverlap]:
        """parallel.dp_overlap: each data group's messages (strategy.pipelining's) on bsp's
        channel, keyed by the group's first rank (:mod:`sim.simulated.stage_overlap`)."""
        strategy = self.ctx.config.strategy
        self.final = [final_backwards(work.ops) for work in self.works]
        overlaps = {}
        for rank, place in enumerate(self.plan.ranks):
            group = self.data_groups[rank]
            if group.ranks[0] == rank:
                work = self.works[place.stage]
                messages = stage_messages(work.weight_bytes, work.chunks, strategy.pipelining,
                                          strategy.bucket_bytes)
                overlaps[rank] = GroupOverlap(
                    self.ctx.env, group.size, messages, strategy.priority,
                    lambda msg, group=group: self.allreduce(msg.nbytes, True, group=group))
        return overlaps

    def layer_done(self, rank: int, work: StageWork, step: int, op: Op,
                   position: int) -> None:
        """With dp_overlap: the last backward of a layer makes its message ready here."""
        if self.overlaps is not None and op in self.final[work.index]:
            self.overlaps[self.data_groups[rank].ranks[0]].produced(
                self.plan.ranks[rank].replica, step, position)

    def sent_bytes(self, work: StageWork) -> int:
        """What a rank of ``work``'s stage puts on the wire for its gradient (its
        compressed size, if compressed)."""
        return work.grad_bytes if self.compressed_bytes is None else self.compressed_bytes

    def data_parallel(self, rank: int, work: StageWork,
                      step: int) -> Generator[simpy.Event, Any, None]:
        """``rank`` meets its data group: their allreduce of the shard's gradient, then each
        one's update (as bsp's step: a pass at the summing rate and the SGD step). With
        parallel.dp_overlap the allreduces ran beside the backward: it waits for the last."""
        group = self.data_groups[rank]
        costs = self.ctx.cpu
        nbytes = work.grad_bytes
        overlap = None if self.overlaps is None else self.overlaps[group.ranks[0]]
        if overlap is not None:  # its messages were allreduced beside the backward
            yield from overlap.wait(self.ctx.recorder, rank, step)

        def reduce() -> Generator[simpy.Event, Any, None]:
            if overlap is None:
                yield from self.allreduce(self.sent_bytes(work), group=group)
            yield from together(self.ctx, group.ranks, "update",
                                costs.reduce_s(nbytes) + costs.update_s(nbytes))

        yield from self.meetings.join(("data", step, group.ranks[0]), rank, group.ranks,
                                      reduce, lambda: self.group_updated(step))

    def alone_per_step_s(self) -> float:
        """The largest shard's data-parallel allreduce alone (the groups run at once); a
        hierarchical one among its data group's own ranks, where they sit."""
        largest = max(self.works, key=lambda work: work.grad_bytes)
        group = self.data_groups[self.plan.rank_of(0, largest.index, 0)]
        return self.alone_bytes_s(self.sent_bytes(largest),
                                  group if group.collective is not None else None)


class ModelParallelBSPPS(PlanRanks, BSPPS):
    """bsp-ps whose replicas run a parallelism plan: each stage's shard has its own key
    range on the servers (its layers' part of the keys, cut in t for the shards); a rank
    pushes its shard's gradient, waits for its data group's pushes (the servers then
    average and step that range), and pulls the range back. Tensor groups allreduce with
    strategy.collective, as under bsp."""

    def start(self) -> None:
        ctx = self.ctx
        self.setup_servers()
        self._setup_collective()  # the tensor groups'
        self.replays = False
        self.request_s = ctx.cpu.message.requests_s(int(np.count_nonzero(ctx.server.share)))
        self.pulled: dict[tuple[int, int], int] = {}  # (step, group) -> ranks that pulled
        self.closed_steps = 0  # steps closed so far
        self.closing: dict[int, simpy.Event] = {}  # step -> fires when it closes
        self.build_ranks()
        self.rank_keys = [self.shard_keys(place.stage, place.shard)
                          for place in self.plan.ranks]
        self.start_ranks()

    def shard_keys(self, stage: int, shard: int) -> tuple[float, float]:
        """A stage's shard's key range (fractions of the vector): the stage's layers'
        range, cut into t equal parts."""
        work = self.works[stage]
        lo, hi = self.key_edges[work.layers[0]], self.key_edges[work.layers[-1] + 1]
        cuts = np.linspace(lo, hi, self.plan.tensor + 1)
        return float(cuts[shard]), float(cuts[shard + 1])

    def data_parallel(self, rank: int, work: StageWork,
                      step: int) -> Generator[simpy.Event, Any, None]:
        """``rank`` pushes its shard's gradient (and its held pull request, as bsp-ps's
        worker), meets its data group's pushes (the servers then average and step the
        range), and pulls the range back."""
        ctx = self.ctx
        yield from self.previous_step_closed(rank, step)
        me = Endpoint(rank, int(self.placed[rank]))
        keys, layers = self.rank_keys[rank], (work.layers[0], work.layers[-1])
        sent = work.grad_bytes if self.compressed_bytes is None else self.compressed_bytes
        yield from push(ctx, me, sent, ctx.cpu.kept_push_s, keys, False, layers)
        yield from cpu(ctx, rank, "overhead", self.request_s)
        group = self.data_groups[rank]
        yield from self.meetings.join(("data", step, group.ranks[0]), rank, group.ranks,
                                      lambda: self.apply_range(keys, work.grad_bytes),
                                      at_once=True)
        yield from self.pull_range(rank, me.host, keys, work.grad_bytes, layers, False)
        # bsp-ps's worker wakes up one event after its pull has landed, before the step
        # closes (where ranks share cores, who asks for one first gets it)
        woken = self.ctx.env.timeout(0)
        self.range_pulled(step, group)
        yield woken

    def previous_step_closed(self, rank: int,
                             step: int) -> Generator[simpy.Event, Any, None]:
        """``rank`` waits until the step before ``step`` has closed: bsp-ps's servers take a
        step's pushes once every worker has pulled the step before
        (:class:`sim.simulated.backprop_overlap.ParameterServerChannel`)."""
        if step <= self.closed_steps:
            # bsp-ps's sender process wakes up one event after its worker's backward: where
            # ranks share cores, the other ranks' tasks queued meanwhile go first
            yield self.ctx.env.timeout(0)
            return
        closed = self.closing.get(step - 1)
        if closed is None:
            closed = self.closing[step - 1] = self.ctx.env.event()
        start = self.ctx.env.now
        yield closed
        self.ctx.recorder.add_span(rank, "wait", start, self.ctx.env.now)

    def step_done(self, step: int) -> None:
        super().step_done(step)
        self.closed_steps = step + 1
        closed = self.closing.pop(step, None)
        if closed is not None:
            closed.succeed()

    def apply_range(self, keys: tuple[float, float],
                    nbytes: int) -> Generator[simpy.Event, Any, None]:
        """The shards owning ``keys`` average and step them, queued on their cores before
        they answer pulls (the numbers are applied when the step closes, apply_step)."""
        self.apply_keys(keys, nbytes)
        yield from ()

    def range_pulled(self, step: int, group: Group) -> None:
        key = (step, group.ranks[0])
        self.pulled[key] = self.pulled.get(key, 0) + 1
        if self.pulled[key] == group.size:
            del self.pulled[key]
            self.group_updated(step)

    def apply_step(self, step: int) -> float:
        """Every range is applied: the servers' mean of the replicas' gradients and the SGD
        step of the whole vector (as bsp-ps's one message does), a new version."""
        self.apply_numbers(plan_messages(self.layers.grad_bytes, "none", 0)[0])
        return super().apply_step(step)

    def alone_per_step_s(self) -> float:
        """Every replica's whole gradient pushed and pulled back alone, as bsp-ps's M (a
        replica's ranks push their ranges at once, the whole vector between them)."""
        whole = plan_messages(self.layers.grad_bytes, "none", 0)[0]
        return self.alone_s(whole)
