"""``run.engine = "steady"``: the fast path for a timing-only bsp plan, with the event
engine's results.

The event engine (:class:`~sim.simulated.strategies.model_parallel.ModelParallelBSP`) runs
every rank of replicas x stages x shards as a SimPy process and every tensor allreduce flow
by flow: issue 46's 384-rank plan took 17.5 million events for one step, nearly all of them
the tensor groups' rounds. Where the validator admits ``steady``
(:func:`sim.training.engine_checks.steady_refusals`: bsp on a plan, timing only, constant
compute, no stragglers, slowdowns, faults or checkpoints, CPU-free messages, a non-blocking
star, every tensor group alone on its host's link) ranks that the plan places alike do
alike:

- a stage's shards compute the same FLOPs in the same order (the plan's shard layers of a
  stage are equal), so they reach each tensor allreduce at the same instant and its meeting
  waits for nobody; the group is one host's ranks (``cluster.ranks_per_host =
  parallel.tensor``) and its allreduce runs on that host's link, which nothing else uses
  (neighbouring stages and replicas sit on other hosts; :mod:`sim.network.two_tier`: the
  host link and the fabric share no link), so each allreduce of a size takes its time
  alone, measured once per size by the strategy's own allreduce in a probe simulation of
  one replica (:class:`AloneProbe`);
- shard k's pipeline messages and data-parallel allreduces use only shard k's NIC ports,
  and on a star no two ports share a link: shard k's traffic runs exactly as shard 0's;
- replicas differ only where their data groups' collective treats members unalike. Where
  it is :func:`balanced` (every round, every member sends one message and receives one of
  one size: the ring, recursive doubling on a power of two, hierarchical-rs) and
  :func:`one_link` (each round inside hosts or across them for every member: not a ring
  with two members a host), replica 0 runs, each message
  it sends is sent between the same ranks of every other replica at the same instant
  (:class:`Mirrored`: the data-parallel allreduces meet the same traffic as in the event
  engine), and each data group's allreduce starts when replica 0's member arrives
  (:class:`DataGroupsMirrored`). Otherwise (Rabenseifner's on 3 folds one member in
  first; the leaders-only hierarchical sends across hosts from one member a host) every
  replica's shard 0 runs. A plan's data groups run strategy.collective built for their
  members a host (:meth:`~sim.simulated.strategies.model_parallel.PlanRanks.
  group_collective`); with one shard, ranks may share NICs (every rank's messages are then
  sent, mirrored or run).

So :class:`SteadyBSP` runs the event engine's own rank code (``rank_loop``, the mailbox,
the meetings, the data-parallel allreduces on the live flow network, the step's close and
the summary) for the timed ranks only, with each tensor allreduce a timeout of its time
alone, and writes each timed rank's activity times, message and tensor seconds and bubble
for the ranks it stands for. summary.json and metrics.csv carry the event engine's keys and
values (``events``: what this engine processed); trace.json has the timed ranks' spans (a
tensor allreduce is one span, where the event engine draws one per round; so a run cut by
run.time_limit_s mid-step would count a part-done allreduce differently, and the validator
refuses the limit).
tests/simulated/test_steady_state.py checks sim_time_s, every rank's activities and the
plan's keys against the event engine to 1e-6 relative; on the 384-rank plan sim_time_s
agrees to 1e-15 and every rank's activities to 5e-7 (the event engine's tensor allreduces
took ~6e-13 s, 1e-7 relative, from their time alone on average). The cause: the event
engine finishes flows due within the flow model's precision (1 ns) of each other together
(:mod:`sim.network.flow`), flows of other hosts included, where this engine times a tensor
allreduce alone; at a precision of 0 a 2 x 4 x 4 plan whose step is 0.45 ms agrees to
1.6e-15, at 1 ns to 3.4e-6 (1.5 ns).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from sim.simulated.stages import BubbleTally, Meetings, StageWork
from sim.simulated.strategies.model_parallel import ModelParallelBSP
from sim.training.stage_schedule import Op


class RanksAlike(BubbleTally):
    """A bubble tally whose timed pipeline's passes stand for its shards', and with
    ``replicas`` also for every replica's."""

    def __init__(self, replicas: int, shards: int, stages: int, alike: bool) -> None:
        super().__init__(replicas, shards, stages)
        self.alike = alike

    def passed(self, step: int, replica: int, shard: int, start: float, end: float) -> None:
        at = self.steps.get(step)
        if at is None:
            at = self.steps[step] = np.zeros((3, *self.shape))
            at[0] = np.inf
            at[1] = -np.inf
        rows = slice(None) if self.alike else slice(replica, replica + 1)
        at[0, rows] = np.minimum(at[0, rows], start)
        at[1, rows] = np.maximum(at[1, rows], end)
        at[2, rows] += end - start


class Mirrored:
    """The network as the timed pipeline's mailbox sees it: a message sent between two of
    its ranks is sent between the same ranks of every other replica too, at the same
    instant, so that the data-parallel allreduces meet the traffic they meet in the event
    engine. Returns the timed message's delivery; :attr:`sent` read after a send counts its
    flows only (the trace's arrows link the timed message's own flows)."""

    def __init__(self, network: Any, mirrors: dict[int, list[int]]) -> None:
        self.network, self.mirrors = network, mirrors
        self.timed_end: int | None = None  # flows sent up to the last timed message's

    @property
    def sent(self) -> int:
        end, self.timed_end = self.timed_end, None
        return self.network.sent if end is None else end

    def send(self, src: int, dst: int, nbytes: float) -> simpy.Event:
        delivered = self.network.send(src, dst, nbytes)
        self.timed_end = self.network.sent
        for a, b in zip(self.mirrors[src], self.mirrors[dst], strict=True):
            self.network.send(a, b, nbytes)
        return delivered


class DataGroupsMirrored(Meetings):
    """Meetings where a data group's timed rank (replica 0's) is the only member that
    arrives: the others are its mirror images and arrive with it. Its work (the group's
    allreduce over every member's host) then starts as the event engine's does."""

    def join(self, key: tuple, rank: int, members: tuple[int, ...], *args: Any,
             **kwargs: Any) -> Generator[simpy.Event, Any, None]:
        return super().join(key, rank, (rank,) if key[0] == "data" else members, *args,
                            **kwargs)


class SteadyBSP(ModelParallelBSP):
    """bsp on a plan: shard 0 of replica 0 simulated, its messages mirrored in every replica,
    the data groups' allreduces on the live network, every other rank's times copied
    (module docstring)."""

    def start(self) -> None:
        self.setup_replicas()
        self.replays = False  # every data-parallel allreduce on the live network
        self.build_ranks()
        self.overlaps = None  # the validator refuses parallel.dp_overlap
        plan, ctx = self.plan, self.ctx
        if ctx.numerics:
            raise AssertionError("the validator admits steady timing only")
        self.alone: dict[int, float] = {}  # bytes -> a tensor group's allreduce alone, s
        self.probe = AloneProbe(ctx.config)
        # replica 0 stands for the others where their data groups' collective treats every
        # member alike; else each replica runs (shard 0 still stands for its shards)
        self.mirror = all(self.mirrors(work) for work in self.works)
        self.bubble = RanksAlike(plan.replicas, plan.tensor, plan.pipeline, self.mirror)
        replicas = range(1) if self.mirror else range(plan.replicas)
        self.timed = [plan.rank_of(d, s, 0) for d in replicas for s in range(plan.pipeline)]
        self.stands_for = {r: [plan.rank_of(d, plan.ranks[r].stage, k)
                               for d in (range(plan.replicas) if self.mirror
                                         else [plan.ranks[r].replica])
                               for k in range(plan.tensor)]
                           for r in self.timed}
        if self.mirror:
            self.meetings = DataGroupsMirrored(ctx.env, ctx.recorder)
            placed = self.placed
            self.mail.network = Mirrored(ctx.network, {
                int(placed[r]): [int(placed[plan.rank_of(d, plan.ranks[r].stage, 0)])
                                 for d in range(1, plan.replicas)] for r in self.timed})
        self.loops = [ctx.env.process(self.rank_loop(r)) for r in self.timed]

    def mirrors(self, work: StageWork) -> bool:
        """Whether replica 0 stands for every replica in ``work``'s stage's data groups
        (shard 0's stands for all): their collective is :func:`balanced` and each of its
        rounds stays inside hosts or crosses them for every member (:func:`one_link`)."""
        group = self.data_groups[self.plan.rank_of(0, work.index, 0)]
        schedule = (group.collective or self.collective).schedule(self.plan.replicas,
                                                                  self.sent_bytes(work))
        machines = [self.plan.ranks[r].host for r in group.ranks]
        return balanced(schedule) and one_link(schedule, machines)

    # ---- what stands for the other ranks ----------------------------------------------

    def draw(self, rank: int, work: StageWork, step: int) -> float:
        seconds = super().draw(rank, work, step)
        self.step_compute[step][self.stands_for[rank]] = seconds  # they draw the same
        return seconds

    def group_updated(self, step: int) -> None:
        """A timed data group has updated: so have those it stands for (its stage's other
        shards' groups)."""
        for _ in range(self.plan.tensor):
            super().group_updated(step)

    def tensor_allreduce(self, rank: int, step: int, op: Op, position: int, nbytes: int,
                         k: int = 0) -> Generator[simpy.Event, Any, None]:
        """The tensor group's allreduce of ``nbytes``: its time alone, as the event engine's
        would take it (the shards arrive together; the host link is theirs)."""
        env = self.ctx.env
        seconds = self.alone.get(nbytes)
        if seconds is None:
            seconds = self.alone[nbytes] = self.probe.allreduce_s(
                self.tensor_groups[rank].ranks, nbytes)
        start = env.now
        yield env.timeout(seconds)
        self.ctx.recorder.add_span(rank, "wire", start, env.now)
        self.tensor_s[rank] += env.now - start

    def summary_extra(self) -> dict[str, Any]:
        """The event engine's keys, with each timed rank's times written for the ranks it
        stands for."""
        recorder = self.ctx.recorder
        for rank, others in self.stands_for.items():
            for other in others:
                if other != rank:
                    recorder.copy_time(rank, other)
            self.mail.spent_s[others] = self.mail.spent_s[rank]
            self.tensor_s[others] = self.tensor_s[rank]
        return super().summary_extra()


def balanced(schedule: Any) -> bool:
    """Whether every round of a collective's ``schedule`` (:class:`sim.network.schedule.
    Schedule`) has each endpoint send one message and receive one, all of one size (to one
    element: a buffer cut into p chunks): the ring, recursive halving and doubling on a
    power of two. Its members then meet the same traffic in the same way, and one replica's
    times are every replica's (to one element's time on the wire)."""
    n = schedule.n_endpoints
    for r in range(schedule.n_rounds):
        rnd = schedule.round(r)
        if len(rnd.src) != n or int(rnd.count.max() - rnd.count.min()) > 1 \
                or sorted(rnd.src.tolist()) != list(range(n)) \
                or sorted(rnd.dst.tolist()) != list(range(n)):
            return False
    return True


def one_link(schedule: Any, machines: list[int]) -> bool:
    """Whether every round of ``schedule`` has all its messages between ranks of one machine
    (``machines[e]``: endpoint e's), or all between machines: each member's messages then
    take the same kind of link (a ring with two members a host does not: half its hops
    are on the host link, half on the fabric, and its members wait unalike)."""
    where = np.asarray(machines)
    for r in range(schedule.n_rounds):
        rnd = schedule.round(r)
        inside = where[rnd.src] == where[rnd.dst]
        if inside.any() and not inside.all():
            return False
    return True


class AloneProbe:
    """Allreduces timed alone on ``config``'s cluster: the event engine's own allreduce (its
    CPU part and its wire) in a fresh simulation of the same cluster, one after another with
    nothing else running (built on first use)."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.sim: Any = None

    def allreduce_s(self, group: tuple[int, ...], nbytes: int) -> float:
        """Seconds of an allreduce of ``nbytes`` among ``group`` (ranks of the plan)."""
        from sim.simulated.engine import build_simulation  # the engine builds on this module

        if self.sim is None:  # one replica: a tensor group's host is the same in each
            config = self.config
            events = config.model_copy(update={
                "run": config.run.model_copy(update={"engine": "events"}),
                "cluster": config.cluster.model_copy(update={"workers": 1})})
            self.sim = build_simulation(events)
            self.sim.strategy.setup_replicas()
        env, ctx, strategy = self.sim
        start = env.now
        env.run(env.process(strategy.allreduce(
            nbytes, group=strategy._group(group, np.asarray(ctx.placed)))))
        return float(env.now - start)
