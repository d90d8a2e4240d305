"""Data parallelism over an allreduce: ``bsp`` and ``local-sgd``.

Both keep one replica per worker in principle; in ``bsp`` the replicas never differ, so one
array stands for all of them.

The network decides *when* an allreduce ends, the kernels *what* it yields: the collective
runs on the simulated network at the message size (timing only) and the sum is taken here,
in rank order, with :func:`sim.kernels.sum_into`. Moving the real vectors through the
schedule would give the same sum up to rounding at O(p^2) small kernel calls per step.

Compressed ``bsp`` gathers instead of reducing: a sum of top-k vectors is not k-sparse and a
sum of quantised ones needs wider integers, so every worker's compressed message goes to
every worker (``strategy.allgather``: (p - 1) messages of the compressed size per worker
on the ring) and each decodes and adds the p - 1 it received, as QSGD (Alistarh et al.
2017) and SparCML (Renggli et al. 2019) exchange them.
"""

from __future__ import annotations

from collections.abc import Generator
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np
import simpy

from sim import kernels as K
from sim.network.collective_alone import run_alone
from sim.network.collectives import Collective, configured
from sim.simulated.backprop_overlap import AllreduceChannel
from sim.simulated.strategies.base import Strategy, block, compute, cpu, everyone, together
from sim.simulated.strategies.pipelined import PipelinedStrategy
from sim.simulated.strategies.table_exchange import EXCHANGES
from sim.training.messages import Message
from sim.training.rules import SGD
from sim.training.workload import Worker


class RankStep(NamedTuple):
    """One rank's part of a collective's round (:meth:`AllreduceMixin.rank_plans`)."""

    index: int  # the round
    sent_s: float  # CPU s to post the rank's sends
    received_s: float  # CPU s to receive (and sum) what it gets
    sends: list[tuple[int, int, int, float]]  # (transfer, source host, destination host, B)
    recvs: list[int]  # the transfers it receives
    handshake_s: float  # the slowest rendezvous among those (s)
    rendezvous_sends: list[int]  # its sends beyond the eager limit


class Group(NamedTuple):
    """Ranks that run a collective together (the recorder's and the cores' rank numbers),
    the network host of each, in the collective's endpoint order, and the collective they
    run (None: the strategy's, :attr:`AllreduceMixin.collective`; a plan's group under a
    hierarchical allreduce has its own, built for its members a host)."""

    ranks: tuple[int, ...]
    hosts: np.ndarray
    collective: Collective | None = None

    @property
    def size(self) -> int:
        return len(self.ranks)


class AllreduceMixin:
    """Time one allreduce per step through the configured collective, in simulated time:
    each rank's CPU for it (posting and copying its messages, summing what arrives), then
    its messages on the network. (An allgather, for compressed gradients, goes the same way;
    ``nbytes`` is then each rank's message.)

    By default every worker takes part (:attr:`all_workers`); a model-parallel strategy runs
    the same machinery on sub-groups of ranks (a stage's data-parallel peers, a tensor
    group), given as a :class:`Group`."""

    def _setup_collective(self, name: str | None = None) -> None:
        """``name``: the collective (default ``strategy.collective``)."""
        config = self.ctx.config
        # a hierarchical allreduce also takes where ranks sit and what runs across hosts
        self.collective = configured(name or config.strategy.collective,
                                     lambda key: attrgetter(key)(config))
        self.hosts = np.array([w.host for w in self.ctx.workers])
        self.all_workers = Group(tuple(w.index for w in self.ctx.workers), self.hosts)
        # a plan's groups' own hierarchical collectives, by members a host (built as needed)
        self.group_collectives: dict[int, Collective] = {}
        # whether a collective of every worker starts on an idle network, so that its
        # duration can be replayed (allreduce_time); not where other traffic runs beside it,
        # nor on token-bucket links, whose buckets the earlier messages left part-empty
        self.replays = not self.ctx.network.fabric.shaped
        self.elapsed_s: dict[int, float] = {}  # message bytes -> simulated allreduce time
        # (ranks, bytes, collective's id) -> CPU, busiest path
        self.cpu_s: dict[tuple[int, int, int], float] = {}
        # (ranks, bytes, collective's id) -> each rank's part of each round, transfers a round
        self.plans: dict[tuple[tuple[int, ...], int, int],
                         tuple[list[list[RankStep]], list[int]]] = {}
        # CPU s of a rank after the collective, decoding and adding what it received (an
        # allgather's p - 1 messages); an allreduce's sums are in its rounds already
        self.decode_s = 0.0

    def allreduce_cpu_s(self, nbytes: int, size: int | None = None,
                        collective: Collective | None = None) -> float:
        """CPU seconds of one allreduce of ``nbytes`` among ``size`` ranks (default every
        worker) with ``collective`` (default the strategy's) on a rank (its busiest path,
        then the decoding)."""
        collective = collective or self.collective
        key = (size or self.ctx.n, nbytes, id(collective))
        if key not in self.cpu_s:
            schedule = collective.schedule(key[0], int(nbytes))
            self.cpu_s[key] = self.ctx.cpu.collective_s(schedule, 1.0)
        return self.cpu_s[key] + self.decode_s

    def allreduce(self, nbytes: int, overlapped: bool = False,
                  group: Group | None = None) -> Generator[simpy.Event, Any, None]:
        """Every rank of ``group`` (default every worker) allreduces ``nbytes``: their CPU,
        then the wire, both recorded.

        The CPU part comes first as a lump: ring rounds alternate CPU and wire, and their
        sum is the same in either order when the ranks are alike. Ranks that share cores
        are not alike (they wait for a core, and to notice their messages): then round by
        round (:meth:`allreduce_by_rounds`).
        """
        group = group or self.all_workers
        if any(self.ctx.hosts.shared.values()):
            yield from self.allreduce_by_rounds(nbytes, overlapped, group)
            return
        yield from together(self.ctx, group.ranks, "overhead",
                            self.allreduce_cpu_s(nbytes, group.size, group.collective),
                            overlapped)
        start = self.ctx.env.now
        yield from self.allreduce_time(nbytes, group)
        for rank in group.ranks:
            self.ctx.recorder.add_span(rank, "wire", start, self.ctx.env.now, overlapped)

    def allreduce_by_rounds(self, nbytes: int, overlapped: bool = False,
                            group: Group | None = None) -> Generator[simpy.Event, Any, None]:
        """Every rank goes through the rounds it takes part in on its own, as real ranks do
        (:mod:`sim.real.executors.rank_collectives`): it posts its sends on its core (they leave
        then, not when every rank has posted), waits for its receives to arrive (spinning
        or polling, :meth:`sim.simulated.hosts.Hosts.wait`), and receives, and sums, them
        on its core. Ends when the last rank has."""
        env, group = self.ctx.env, group or self.all_workers
        plans, sizes = self.rank_plans(int(nbytes), group)
        delivered = [[env.event() for _ in range(n)] for n in sizes]
        taken = [[env.event() for _ in range(n)] for n in sizes]
        yield simpy.AllOf(env, [env.process(self.rank_rounds(rank, plan, delivered, taken,
                                                             overlapped))
                                for rank, plan in zip(group.ranks, plans, strict=True)])

    def rank_rounds(self, w: int, plan: list[RankStep], delivered: list[list[simpy.Event]],
                    taken: list[list[simpy.Event]],
                    overlapped: bool) -> Generator[simpy.Event, Any, None]:
        """Rank ``w``'s rounds. A message beyond the eager limit is a rendezvous
        (MPICH's large-message protocol: the sender announces it, the receiver copies it
        when it notices, then tells the sender): the receiver spends its
        :meth:`~sim.simulated.hosts.Hosts.handshake_s` once it has noticed the message,
        and the sender's round ends only when it notices that the receiver has taken it.
        ``delivered[r][t]`` and ``taken[r][t]``: transfer t of round r has arrived, and
        its receiver has taken it."""
        ctx = self.ctx
        for step in plan:
            yield from cpu(ctx, w, "overhead", step.sent_s, overlapped)
            for t, src, dst, count in step.sends:
                ctx.network.send(src, dst, count).callbacks.append(
                    lambda _, done=delivered[step.index][t]: done.succeed())
            incoming = [delivered[step.index][t] for t in step.recvs]
            yield from block(ctx, w, "wire", simpy.AllOf(ctx.env, incoming), overlapped)
            if step.handshake_s > 0:
                with ctx.recorder.span(w, "wire", overlapped):
                    yield ctx.env.timeout(step.handshake_s)
            for t in step.recvs:
                taken[step.index][t].succeed()
            if step.rendezvous_sends:
                yield from block(ctx, w, "wire", simpy.AllOf(
                    ctx.env, [taken[step.index][t] for t in step.rendezvous_sends]),
                    overlapped)
            yield from cpu(ctx, w, "overhead", step.received_s, overlapped)
        if self.decode_s:
            yield from cpu(ctx, w, "overhead", self.decode_s, overlapped)

    def rank_plans(self, nbytes: int, group: Group | None = None,
                   ) -> tuple[list[list[RankStep]], list[int]]:
        """Each rank's part of every round of an allreduce of ``nbytes`` among ``group``
        (default every worker; in its order), and the number of transfers in each round
        (remembered per group and size)."""
        group = group or self.all_workers
        collective = group.collective or self.collective
        key = (group.ranks, nbytes, id(collective))
        if key in self.plans:
            return self.plans[key]
        ctx = self.ctx
        schedule = collective.schedule(group.size, nbytes)
        plans: list[list[RankStep]] = [[] for _ in range(group.size)]
        ranks = np.asarray(group.ranks)
        for r in range(schedule.n_rounds):
            rnd = schedule.round(r)
            if not len(rnd):
                continue
            sent, received = ctx.cpu.round_s(rnd, schedule.n_endpoints)
            handshakes = np.array([ctx.hosts.handshake_s(int(ranks[s]), int(ranks[d]), float(c))
                                   for s, d, c in zip(rnd.src, rnd.dst, rnd.count,
                                                      strict=True)])
            for w in range(group.size):
                out, into = np.flatnonzero(rnd.src == w), np.flatnonzero(rnd.dst == w)
                if not (len(out) or len(into)):
                    continue
                sends = [(int(t), int(group.hosts[rnd.src[t]]), int(group.hosts[rnd.dst[t]]),
                          float(rnd.count[t])) for t in out]
                plans[w].append(RankStep(
                    r, float(sent[w]), float(received[w]), sends, into.tolist(),
                    float(handshakes[into].max(initial=0.0)),
                    [int(t) for t in out if handshakes[t] > 0]))
        sizes = [len(schedule.round(r)) for r in range(schedule.n_rounds)]
        self.plans[key] = plans, sizes
        return plans, sizes

    def allreduce_time(self, nbytes: int,
                       group: Group | None = None) -> Generator[simpy.Event, Any, float]:
        """Wait while the messages of an allreduce of ``nbytes`` among ``group`` (default
        every worker) cross the network; returns the time taken (s).

        In the data-parallel strategies nothing else ever uses the network and one
        allreduce ends before the next starts, so each starts on an idle network and takes
        the same time as the last one of its size: simulate the first, replay its duration
        afterwards. Where other traffic may run beside it or the links are token buckets
        (:attr:`replays` false), or for a sub-group, every one is simulated.
        """
        group = group or self.all_workers
        if not (self.replays and group.ranks == self.all_workers.ranks):
            return (yield from (group.collective or self.collective).run(
                self.ctx.network, p=group.size, nbytes=nbytes, hosts=group.hosts))
        if nbytes not in self.elapsed_s:
            self.elapsed_s[nbytes] = yield from (group.collective or self.collective).run(
                self.ctx.network, p=self.ctx.n, nbytes=nbytes, hosts=self.hosts)
        else:
            yield self.ctx.env.timeout(self.elapsed_s[nbytes])
        return self.elapsed_s[nbytes]


class BSP(AllreduceMixin, PipelinedStrategy):
    """Synchronous SGD: every step averages all workers' gradients with an allreduce.

    Steps run through :mod:`sim.simulated.backprop_overlap`: with ``strategy.pipelining = "none"``
    each step is compute, then one allreduce of the whole gradient; ``wfbp`` and ``bucket``
    overlap per-layer (or per-bucket) allreduces with backprop. Compressed gradients are
    allgathered (``strategy.allgather``) and each worker decodes the p - 1 it receives.
    """


    def start(self) -> None:
        self.setup_replicas()
        self.start_overlap(AllreduceChannel(self.ctx.env, self.ctx.config.strategy.priority,
                                             self.reduce))

    def setup_replicas(self) -> None:
        """The collective that combines the replicas' gradients (an allgather of compressed
        ones) and the one replica that stands for all of them."""
        ctx = self.ctx
        strategy = ctx.config.strategy
        if strategy.compression == "none":
            self._setup_collective()
        else:
            self._setup_collective(strategy.allgather)
            self.decode_s = (ctx.n - 1) * ctx.cpu.reduce_s(ctx.workers[0].codec.decode_bytes)
        self.sgd = SGD(ctx.params.copy(), ctx.config)
        self.total = np.zeros(ctx.params.size)  # the sum, then the mean, of the gradients
        self.decoded = np.zeros(ctx.params.size)
        self.compressed_bytes: int | None = None
        # a model's embedding tables, moved as embeddings.placement says (None: no tables)
        self.tables = (EXCHANGES[ctx.config.embeddings.placement](self)
                       if ctx.model is not None and ctx.model.tables else None)

    def model_of_record(self) -> np.ndarray:
        return self.sgd.params

    @property
    def has_prologue(self) -> bool:
        return super().has_prologue or (self.tables is not None and self.tables.before_forward)

    def prologue(self, worker: int) -> Generator[simpy.Event, Any, None]:
        """The host's per-step code and batch (on a host with costs), then the tables'
        exchange before the forward pass (an all-to-all of pooled embeddings)."""
        if super().has_prologue:
            yield from super().prologue(worker)
        if self.tables is not None and self.tables.before_forward:
            yield from self.tables.forward_part(worker)

    def message_bytes(self, msg: Message) -> int:
        return self.compressed_bytes if self.compressed_bytes is not None else msg.nbytes

    def reduce(self, step: int, msg: Message) -> Generator[simpy.Event, Any, None]:
        """The message's allreduce, then every replica's mean of the sum (a pass at the
        summing rate) and SGD step over its layers."""
        lapped, costs = self.overlap.overlapped, self.ctx.cpu
        if self.tables is not None:
            yield from self.tables.timed_exchange(msg.nbytes, lapped)
        else:
            yield from self.allreduce(self.message_bytes(msg), lapped)
        yield from everyone(self.ctx, "update",
                            costs.reduce_s(msg.nbytes) + costs.update_s(msg.nbytes), lapped)

    def compute_gradients(self) -> None:
        super().compute_gradients()
        nbytes = self.sum_gradients()
        if self.ctx.config.strategy.compression != "none":
            self.compressed_bytes = nbytes

    def apply_step(self, step: int) -> float:
        rules = self.ctx.rules
        self.sgd.step(rules.mean_of_sum(self.total, self.ctx.n), rules.lr(0))
        return float(np.mean(self.losses))

    def alone_s(self, msg: Message) -> float:
        """The message's allreduce alone on an idle network, with its CPU (with tables, the
        mean exchange as it ran: nothing runs beside it without pipelining)."""
        if self.tables is not None:
            return self.tables.mean_s
        return self.alone_bytes_s(self.message_bytes(msg))

    def summary_extra(self) -> dict[str, Any]:
        extra = super().summary_extra()
        return extra if self.tables is None else {**extra, **self.tables.summary()}

    def alone_bytes_s(self, nbytes: int, group: Group | None = None) -> float:
        """An allreduce of ``nbytes`` among every worker (or ``group``'s ranks: where they
        sit, their NICs shared as in the run) alone on an idle network, with its CPU."""
        collective = self.collective if group is None else group.collective or self.collective
        if nbytes not in self.elapsed_s:
            options = self.ctx.network_options
            if group is not None:
                options = {**options, **_group_options(options, group.ranks)}
            self.elapsed_s[nbytes], _ = run_alone(
                collective, p=self.ctx.n if group is None else group.size, nbytes=nbytes,
                fabric=self.ctx.network.fabric, **options)
        return self.elapsed_s[nbytes] + self.allreduce_cpu_s(
            nbytes, None if group is None else group.size, collective)

    def sum_gradients(self) -> int:
        """Sum the workers' gradients as received (decoded) into :attr:`total`, in rank order
        (what the allreduce computes, or each worker after the allgather). Returns the bytes
        of one worker's message (the largest, if compressed sizes differ)."""
        sizes = []
        for i, w in enumerate(self.ctx.workers):
            message, nbytes = w.codec.encode(w.grad)
            w.codec.decode(message, self.decoded if i else self.total)
            if i:
                K.sum_into(self.total, self.decoded)
            sizes.append(nbytes)
        return max(sizes)


class LocalSGD(AllreduceMixin, Strategy):
    """Each worker takes H local SGD steps on its own replica; then the replicas are averaged.

    An update is one local step of every worker, recorded when the slowest has taken it.
    """


    def start(self) -> None:
        self._setup_collective()
        ctx = self.ctx
        self.sgd = [SGD(ctx.params.copy(), ctx.config) for _ in ctx.workers]
        self.replicas = [sgd.params for sgd in self.sgd]
        self.average = ctx.params.copy()
        ctx.env.process(self.run())

    def model_of_record(self) -> np.ndarray:
        return self.ctx.rules.average(self.replicas, self.average)

    def local_gradient(self, i: int) -> float:
        """Worker ``i``'s gradient on its replica (left in ``w.grad``); its loss."""
        return self.ctx.workers[i].gradient(self.replicas[i])

    def local_step(self, i: int) -> None:
        """The SGD step of worker ``i``'s last gradient, once its compute has ended."""
        self.sgd[i].step(self.ctx.workers[i].grad, self.ctx.rules.lr(0))

    def run(self) -> Generator[simpy.Event, Any, None]:
        ctx, rec, env = self.ctx, self.ctx.recorder, self.ctx.env
        period = ctx.config.strategy.local_steps
        self.step = 0
        while not rec.finished:
            self.losses = np.zeros((period, ctx.n))  # step h's loss on each worker
            self.taken = [0] * period  # workers that took local step h of this period
            self.barrier = env.event()  # every worker took the period's last step
            yield simpy.AllOf(env, [env.process(self.local_steps(w, period))
                                    for w in ctx.workers])
            if rec.finished:
                return
            yield from self.allreduce(self.average.nbytes)
            mean = self.model_of_record()
            for replica in self.replicas:  # every worker ends with the mean, same bits
                K.copy(replica, mean)

    def local_steps(self, w: Worker, period: int) -> Generator[simpy.Event, Any, None]:
        """``w``'s H local steps (batch, gradient, SGD step on its replica), then a wait for
        the slowest worker; an update is recorded when every worker has taken step h."""
        ctx, rec = self.ctx, self.ctx.recorder
        for h in range(period):
            self.losses[h, w.index] = self.local_gradient(w.index)
            yield from compute(ctx, w)
            if rec.finished:
                return  # the run ended while this step computed: it is never taken
            # applied when taken, not when started: the replicas evaluated at the end hold
            # only the recorded steps
            self.local_step(w.index)
            yield from cpu(ctx, w.index, "update", ctx.cpu.update_s(self.average.nbytes))
            w.clock += 1
            self.taken[h] += 1
            if self.taken[h] == ctx.n:
                self.step += 1
                rec.update(-1, self.step, self.step - 1, 0, float(np.mean(self.losses[h])),
                           ctx.n * w.batch)
            if rec.finished:
                return  # mid-period: the workers ahead are busy with their next step
        if self.taken[-1] == ctx.n:
            self.barrier.succeed()
            return
        with rec.span(w.index, "wait"):
            yield self.barrier


def _group_options(options: dict[str, Any], ranks: tuple[int, ...]) -> dict[str, Any]:
    """The run's network options for ``ranks`` alone: their machines, and their NIC ports
    (endpoint i's is the first member on the same NIC, as
    :func:`sim.network.network_builder.nic_ports` numbers them)."""
    picked = list(ranks)
    out: dict[str, Any] = {}
    if options.get("machines"):
        out["machines"] = [options["machines"][r] for r in picked]
    if "ports" in options:
        ports = [options["ports"][r] for r in picked]
        out["ports"] = [ports.index(port) for port in ports]
    return out
