"""Model-parallel ranks in simulated time: what each stage computes and sends, the messages
between stages, the meetings of a group before its collective, and the pipeline's bubble.

A parallelism plan (:mod:`sim.training.parallel_plan`) says which rank holds which layers
and shards and what a microbatch sends; :class:`StageWork` is one stage's part of it as the
simulator runs it (FLOPs per layer as arrays, where its tensor allreduces fall, its
messages' bytes). The strategy (:mod:`sim.simulated.strategies.model_parallel`) runs a SimPy
process per rank over these pieces:

- :class:`Mailbox`: activations and their gradients go point to point between stages, over
  the simulated network (its flows share links with everything else); a rank waits for a
  pass's input, and its idle time is split into ``wait`` (the sender had not sent it yet:
  the pipeline's bubble) and ``wire`` (in flight).
- :class:`Meetings`: the ranks of a group (a tensor group, a stage's data-parallel peers)
  arrive one by one; the last one starts the group's collective, and the earlier ones
  ``wait`` until then.
- :class:`BubbleTally`: each step's window per pipeline (a replica's shard, all its stages)
  and its stages' busy time within it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from sim.trace import Facts
from sim.training.messages import OTHER_PASSES, activation_traffic, weight_traffic
from sim.training.parallel_plan import Plan, Stage
from sim.training.stage_schedule import Op


@dataclass(frozen=True)
class StageWork:
    """What every rank of one stage does in a step, on its shard (per sample FLOPs; bytes
    per microbatch)."""

    index: int
    layers: tuple[int, ...]  # the model's layer indices, forward order
    forward_flops: np.ndarray  # per sample, per layer of ``layers``
    backward_flops: np.ndarray
    # position in ``layers`` -> bytes of each allreduce after its forward, in order
    forward_allreduces: dict[int, tuple[int, ...]]
    # position -> bytes of each allreduce in its backward (a recomputed forward's first)
    backward_allreduces: dict[int, tuple[int, ...]]
    ops: tuple[Op, ...]  # the stage's passes in one step, in order
    activation_bytes: int  # to the next stage per microbatch (0 on the last)
    gradient_bytes: int  # to the previous stage per microbatch (0 on the first)
    grad_bytes: int  # the shard's gradient: its data-parallel allreduce per step
    weight_bytes: np.ndarray  # per layer of ``layers``: the shard's weights a pass moves
    # per layer of ``layers``: bytes of the shard's inputs and outputs a step's passes move
    # per sample (sim.training.messages.activation_traffic)
    activations: np.ndarray
    # per chunk (one but for the interleaved schedule): its positions [lo, hi) in
    # ``layers``, and the bytes it sends to the next and previous virtual stage per
    # microbatch
    chunks: tuple[tuple[int, int], ...] = ((0, 0),)
    chunk_activation_bytes: tuple[int, ...] = (0,)
    chunk_gradient_bytes: tuple[int, ...] = (0,)
    # per layer of ``layers``: bytes the shard's other ops read and write in one forward per
    # sample (the backward: sim.training.messages.OTHER_PASSES)
    other: np.ndarray | None = None

    @property
    def flops(self) -> float:
        """Forward and backward FLOPs per sample (summed as
        :meth:`sim.training.messages.LayerCosts.flops` sums a whole model's)."""
        return float(self.forward_flops.sum() + self.backward_flops.sum())

    @property
    def other_bytes(self) -> float:
        """Bytes the other ops of a forward and backward move per sample."""
        return 0.0 if self.other is None else float(self.other.sum()) * sum(OTHER_PASSES)

    def traffic(self, microbatches: int) -> float:
        """Bytes of weights the stage's step moves (every microbatch's passes move them)."""
        return weight_traffic(self.weight_bytes, microbatches)

    def pass_seconds(self, step_s: float, microbatches: int,
                     shares: tuple[np.ndarray, np.ndarray] | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Seconds of each layer's forward and backward for one microbatch, when the
        stage's whole step takes ``step_s``: shared out in proportion to FLOPs, or to
        ``shares`` (the step's seconds per layer and direction, :meth:`~sim.training.
        compute_model.ComputeModel.layer_shares`), as :meth:`~sim.training.messages.
        LayerCosts.split` shares a step out over layers, then over the microbatches."""
        forward, backward = shares or (self.forward_flops, self.backward_flops)
        total = forward.sum() + backward.sum()
        scale = step_s / total if total > 0 else 0.0
        return forward * scale / microbatches, backward * scale / microbatches


def stage_work(stage: Stage, itemsize: int) -> StageWork:
    """The plan's ``stage`` as the simulator runs it."""
    layers = tuple(x.layer for x in stage.layers)
    at = {layer: i for i, layer in enumerate(layers)}
    allreduces: dict[str, dict[int, tuple[int, ...]]] = {"forward": {}, "backward": {}}
    for a in stage.tensor_allreduces:
        sums = allreduces[a.phase]
        sums[at[a.layer]] = (*sums.get(at[a.layer], ()), a.nbytes)
    forward = np.array([x.forward_flops for x in stage.layers], float)
    backward = np.array([x.backward_flops for x in stage.layers], float)
    widths = np.array([x.stash_width + x.output_width for x in stage.layers], float)
    other = np.array([x.other_elements * itemsize for x in stage.layers], float)
    ends = np.cumsum([0] + [len(c.layers) for c in stage.pieces])
    return StageWork(stage.index, layers, forward, backward,
                     allreduces["forward"], allreduces["backward"], stage.ops,
                     stage.activation_bytes, stage.gradient_bytes, stage.params * itemsize,
                     np.array([x.params * itemsize for x in stage.layers], float),
                     activation_traffic(forward, backward, widths, itemsize),
                     tuple(zip(ends[:-1].tolist(), ends[1:].tolist(), strict=True)),
                     tuple(c.activation_bytes for c in stage.pieces),
                     tuple(c.gradient_bytes for c in stage.pieces),
                     other if other.any() else None)


def stage_works(plan: Plan) -> list[StageWork]:
    return [stage_work(stage, plan.itemsize) for stage in plan.stages]


# ---- messages between stages ----------------------------------------------------------

class Letter:
    """One message between two stages: when its sender posted it, its arrival, and the span
    that produced it (for the trace's arrow)."""

    __slots__ = ("posted_s", "arrived", "sender_span")

    def __init__(self, env: simpy.Environment) -> None:
        self.posted_s: float | None = None
        self.arrived = env.event()
        self.sender_span: int | None = None


class Mailbox:
    """Point-to-point messages between ranks over the simulated network.

    ``recorder`` takes the ranks' spans, ``hosts`` (:class:`sim.simulated.hosts.Hosts`) runs
    their CPU, ``costs`` (:class:`sim.network.message_cost.MessageCpu`) what each end pays for
    a message (nothing on the ideal host), ``placed[rank]`` is each rank's network host.
    :attr:`spent_s` sums each rank's time on these messages: posting, receiving, and
    waiting while one is in flight.
    """

    def __init__(self, env: simpy.Environment, network: Any, recorder: Any, hosts: Any,
                 costs: Any, placed: np.ndarray, ranks: int) -> None:
        self.env, self.network, self.recorder, self.hosts = env, network, recorder, hosts
        self.costs, self.placed = costs, placed
        self.letters: dict[tuple, Letter] = {}
        self.spent_s = np.zeros(ranks)

    def _letter(self, key: tuple) -> Letter:
        letter = self.letters.get(key)
        if letter is None:
            letter = self.letters[key] = Letter(self.env)
        return letter

    def _cpu(self, rank: int, seconds: float) -> Generator[simpy.Event, Any, None]:
        if seconds > 0:
            start = self.env.now
            with self.recorder.span(rank, "overhead"):
                yield from self.hosts.run(rank, seconds, message=True)
            self.spent_s[rank] += self.env.now - start

    def post(self, src: int, dst: int, key: tuple, nbytes: int, what: str,
             sender_span: int | None) -> Generator[simpy.Event, Any, None]:
        """Rank ``src`` sends ``nbytes`` to ``dst`` (the letter ``key``; ``what`` it is, for
        the trace): its CPU to post it, then the network carries it while ``src`` goes on.
        ``sender_span``: the span whose output it is."""
        letter = self._letter(key)
        letter.sender_span = sender_span
        facts = Facts(what, nbytes)
        start = self.env.now
        with self.recorder.span(src, "overhead", facts=facts):  # empty on the ideal host
            cost = self.costs.send_s(nbytes)
            if cost > 0:
                yield from self.hosts.run(src, cost, message=True)
            letter.posted_s = self.env.now
            first = self.network.sent
            self.network.send(int(self.placed[src]), int(self.placed[dst]),
                              nbytes).callbacks.append(lambda _: letter.arrived.succeed())
            facts.sends.extend(range(first, self.network.sent))  # its link flows' id
        self.spent_s[src] += self.env.now - start

    def receive(self, rank: int, key: tuple, nbytes: int) -> Generator[simpy.Event, Any, Letter]:
        """Rank ``rank`` waits for the letter ``key`` and receives it (its CPU); the wait is
        ``wait`` until the sender posted it and ``wire`` after. Returns the letter."""
        letter = self._letter(key)
        start = self.env.now
        if not letter.arrived.processed:
            yield from self.hosts.wait(rank, letter.arrived)
            now = self.env.now
            posted = min(max(start, letter.posted_s), now)
            self.recorder.add_span(rank, "wait", start, posted)
            self.recorder.add_span(rank, "wire", posted, now)
            self.spent_s[rank] += now - posted
        del self.letters[key]
        yield from self._cpu(rank, self.costs.receive_s(nbytes))
        return letter


# ---- group meetings -------------------------------------------------------------------

class _Meeting:
    __slots__ = ("arrived_s", "released")

    def __init__(self) -> None:
        self.arrived_s: dict[int, float] = {}  # rank -> when it arrived
        self.released: dict[int, simpy.Event] = {}  # rank -> it may go on


class Meetings:
    """Ranks of a group meet before their collective: the last to arrive starts it, and
    every member goes on when it is done (the earlier ones ``wait`` until it starts, as
    bsp's workers wait for the slowest before their allreduce)."""

    def __init__(self, env: simpy.Environment, recorder: Any) -> None:
        self.env, self.recorder = env, recorder
        self.open: dict[tuple, _Meeting] = {}

    def join(self, key: tuple, rank: int, members: tuple[int, ...],
             work: Callable[[], Generator[simpy.Event, Any, None]],
             then: Callable[[], None] | None = None,
             at_once: bool = False) -> Generator[simpy.Event, Any, None]:
        """``rank`` arrives at the meeting ``key`` of ``members``; the last to arrive
        starts ``work()`` (which records the members' spans); when it ends, the members go
        on in their order (as bsp's workers do when their message lands: where ranks share
        cores, the order they ask for one matters), and then ``then()`` runs (as bsp's step
        closes after its workers' messages have landed). ``work`` starts one event after the
        last arrival (as bsp's channel process wakes up), or ``at_once`` (as bsp-ps's last
        push starts the servers' work)."""
        meeting = self.open.get(key)
        if meeting is None:
            meeting = self.open[key] = _Meeting()
        meeting.arrived_s[rank] = self.env.now
        released = meeting.released[rank] = self.env.event()
        if len(meeting.arrived_s) == len(members):
            del self.open[key]
            now = self.env.now
            for member in members:
                self.recorder.add_span(member, "wait", meeting.arrived_s[member], now)
            # where ranks share cores, what runs first at one instant decides who gets a
            # core: the work starts when its data-parallel strategy's would
            if at_once:
                self.env.process(self._hold(meeting, members, work(), then))
            else:
                kick = self.env.event()
                kick.callbacks.append(
                    lambda _: self.env.process(self._hold(meeting, members, work(), then)))
                kick.succeed()
        yield released

    def _hold(self, meeting: _Meeting, members: tuple[int, ...],
              work: Generator[simpy.Event, Any, None],
              then: Callable[[], None] | None) -> Generator[simpy.Event, Any, None]:
        yield from work
        for member in members:
            meeting.released[member].succeed()
        if then is not None:
            then()


# ---- the bubble -----------------------------------------------------------------------

class BubbleTally:
    """Each step's window on each pipeline (replica x shard: its p stages) from its first
    pass's start to its last pass's end, and the time its stages spent in passes within it.
    The bubble is the stages' idle share of those windows: 1 - busy / (p x window)."""

    def __init__(self, replicas: int, shards: int, stages: int) -> None:
        self.shape, self.stages = (replicas, shards), stages
        self.steps: dict[int, np.ndarray] = {}  # step -> [first start, last end, busy]
        self.idle_s = 0.0  # over the closed steps
        self.window_s = 0.0  # p x each window, summed over pipelines and closed steps

    def passed(self, step: int, replica: int, shard: int, start: float, end: float) -> None:
        """A pass ran on a stage of pipeline (``replica``, ``shard``) from ``start`` to
        ``end`` (s)."""
        at = self.steps.get(step)
        if at is None:
            at = self.steps[step] = np.zeros((3, *self.shape))
            at[0] = np.inf
            at[1] = -np.inf
        at[0, replica, shard] = min(at[0, replica, shard], start)
        at[1, replica, shard] = max(at[1, replica, shard], end)
        at[2, replica, shard] += end - start

    def close(self, step: int) -> None:
        """Every pass of ``step`` has run: add its windows."""
        start, end, busy = self.steps.pop(step)
        window = self.stages * (end - start)
        self.window_s += float(window.sum())
        self.idle_s += float((window - busy).sum())

    @property
    def fraction(self) -> float | None:
        """The idle share over the closed steps (None before one closed)."""
        return self.idle_s / self.window_s if self.window_s > 0 else None
