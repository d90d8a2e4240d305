"""A split replica's real run put together after training, on rank 0: every rank's steps as
spans, the run's updates, the model of record, and the figures of its pipeline stages.

Each rank logs one :class:`SplitStep` per update it applied (:mod:`.bsp_split`). Here, on the
common clock:

- a receive's blocked time is wait until its sender posted the message (the stage had
  nothing to do: the pipeline's bubble) and wire after it;
- the data group's allreduce is wire once its slowest member was ready, wait before (bsp's
  rule, :func:`sim.real.executors.bsp.waiting_for`);
- an update is applied when the last rank has stepped its parameters; its loss is the mean
  over the replicas of each replica's batch loss (bsp's mean over its workers).

The figures (``summary.json``), measured over the updates every rank applied:

- ``stage_compute_s``: per stage, the seconds a rank of it spent in its passes' kernels (the
  mean over its replicas and shards);
- ``tensor_allreduce_s``: the seconds a rank spent in its tensor group's sums (mean over
  ranks);
- ``pipeline_p2p_s``: the seconds a rank spent on activation and gradient messages: posting
  them, completing its sends, and blocked on a receive after its sender posted it (the
  blocked time before that is the bubble's, ``wait``); mean over ranks;
- ``bubble_fraction``: the idle share of the ranks' time within steps: per replica and step,
  the window from its first pass's start to its last pass's end, against the time each of its
  ranks spent in passes (a pass from its input in hand to its output, its tensor sums
  included): 1 - sum of pass time / sum of windows (each window counted once per rank);

and the plan's (not measured): ``activation_bytes_per_step``, with ``stage_layers`` (the
layers of each stage). The memory keys are every real run's (:mod:`.assemble`).

The trace draws an arrow per stage message (activation or gradient), as the simulated
run's does: from the sending pass's compute slice to the receiving pass's (:func:`handoffs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.real.executors.assemble import Part, RankLog
from sim.real.executors.bsp import waiting_for
from sim.real.executors.stage_links import Received, Sent, pass_of
from sim.recorder import UpdateRecord
from sim.training.parallel_plan import Plan, build_plan
from sim.training.stage_numerics import ShardRunner
from sim.training.workload import Workload

# what a logged part of a step was, for the run's figures
PASS, TENSOR, LINKS, DATA_PARALLEL, OTHER = "pass", "tensor", "links", "data-parallel", "other"
Tagged = tuple[str, str, float, float, str]  # role, kind, start, end, label ("" for none)


@dataclass
class SplitStep:
    """What one rank did in one step, in seconds since the run's start."""

    update: int
    parts: list[Tagged] = field(default_factory=list)
    passes: list[tuple[str, float, float]] = field(default_factory=list)  # label, start, end
    received: list[Received] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)
    ready: float = 0.0  # the gradient was done: this rank joined its data group's allreduce
    updated: float = 0.0
    loss: float | None = None  # the replica's batch loss (the last stage's ranks)

    def add(self, role: str, parts: list[Part], label: str = "") -> None:
        self.parts += [(role, kind, start, end, label) for kind, start, end in parts]


def combine(logs: list[RankLog], workload: Workload) -> None:
    """Every rank's steps into spans, rank 0's log into the run's updates, the model of
    record and the run's figures (rank 0's ``extra``). Raises RuntimeError if the tensor
    shards' copies of a parameter disagree."""
    config = workload.config
    plan = build_plan(config)
    n = min(len(log.steps) for log in logs)  # a diverging rank stopped earlier
    steps: list[list[SplitStep]] = [log.steps[:n] for log in logs]
    posted = {(rank, dest, rec.update, tag): at for rank, own in enumerate(steps)
              for rec in own for dest, tag, at in rec.sent}
    tagged: list[list[list[Tagged]]] = [[] for _ in logs]
    for k in range(n):
        ready = [own[k].ready for own in steps]
        passes: list[dict[str, tuple[int, int]]] = []
        for rank, own in enumerate(steps):
            joined = max(ready[r] for r in plan.data_group(rank))
            parts = step_parts(own[k], rank, posted, joined)
            tagged[rank].append(parts)
            before = len(logs[rank].spans)
            logs[rank].spans_of(rank, [(kind, start, end, label)
                                       for _, kind, start, end, label in parts])
            passes.append(pass_spans(logs[rank], before))
        logs[0].handoffs += handoffs([own[k] for own in steps], passes)
        logs[0].updates.append((max(own[k].updated for own in steps), UpdateRecord(
            -1, k + 1, k, 0, replica_loss(plan, [own[k] for own in steps]),
            workload.n * config.workload.batch)))
    gather_model(logs, workload, plan)
    logs[0].extra.update(figures(plan, steps, tagged))


def step_parts(rec: SplitStep, rank: int, posted: dict[tuple[int, int, int, int], float],
               joined: float) -> list[Tagged]:
    """A rank's step as tagged parts on the common clock: its receives cut at their
    messages' posting, its data-parallel wire cut at ``joined`` (its group's slowest
    member was ready)."""
    parts = [p for p in rec.parts if p[0] != DATA_PARALLEL]
    for source, tag, start, end in rec.received:
        at = posted[(source, rank, rec.update, tag)]
        parts += [(LINKS, "wait", start, min(end, at), ""),
                  (LINKS, "wire", max(start, at), end, "")]
    data = [p[1:4] for p in rec.parts if p[0] == DATA_PARALLEL]
    parts += [(DATA_PARALLEL, kind, start, end, "") for kind, start, end in
              waiting_for(data, joined)]
    return [p for p in parts if p[3] > p[2]]


def pass_spans(log: RankLog, since: int) -> dict[str, tuple[int, int]]:
    """The passes among ``log``'s spans from index ``since`` on (one step's): pass label
    ("F3") -> the indices of its first and last compute span (a pass's kernels are cut in
    pieces by its tensor sums)."""
    found: dict[str, tuple[int, int]] = {}
    for i in range(since, len(log.spans)):
        label = log.labels.get(i)
        if label:
            found[label] = (found.get(label, (i, i))[0], i)
    return found


def handoffs(recs: list[SplitStep], passes: list[dict[str, tuple[int, int]]]
             ) -> list[tuple[int, int, int, int]]:
    """One step's stage messages as the trace's arrows (:attr:`RankLog.handoffs`): from the
    last compute span of the pass that sent it to the first of the same pass on the rank
    that received it, as the simulator draws them (sim.simulated.strategies.model_parallel).
    ``recs`` and ``passes`` (:func:`pass_spans`): every rank's step."""
    out = []
    for rank, rec in enumerate(recs):
        for source, tag, _, _ in rec.received:
            label = pass_of(tag)
            sent, taken = passes[source].get(label), passes[rank].get(label)
            if sent is not None and taken is not None:  # (a pass cut to nothing has none)
                out.append((source, sent[1], rank, taken[0]))
    return out


def replica_loss(plan: Plan, recs: list[SplitStep]) -> float:
    """The mean over the replicas of each one's batch loss (its last stage's shard 0's)."""
    last = plan.pipeline - 1
    return float(np.mean([recs[plan.rank_of(d, last, 0)].loss for d in range(plan.replicas)]))


def gather_model(logs: list[RankLog], workload: Workload, plan: Plan) -> None:
    """Rank 0's snapshots become whole parameter vectors, put together from replica 0's
    ranks' snapshots of their held entries (at the iterations all of them have). Raises
    RuntimeError if two shards' copies of an entry differ (they take the same sums)."""
    ranks = [plan.rank_of(0, s, k) for s in range(plan.pipeline) for k in range(plan.tensor)]
    held = {r: ShardRunner(workload.model, plan, plan.ranks[r].stage,
                           plan.ranks[r].shard).held() for r in ranks}
    common = set.intersection(*(set(logs[r].snapshots) for r in ranks))
    whole: dict[int, np.ndarray] = {}
    for iteration in sorted(common):
        params = np.zeros(workload.model.size)
        written = np.zeros(workload.model.size, bool)
        for r in ranks:
            values, index = logs[r].snapshots[iteration], held[r]
            again = written[index]
            if params[index][again].tobytes() != values[again].tobytes():
                raise RuntimeError(f"rank {r}'s copies of parameters other shards hold too "
                                   f"differ from theirs after update {iteration}")
            params[index] = values
            written[index] = True
        whole[iteration] = params
    for r in ranks:
        logs[r].snapshots = {}
    logs[0].snapshots = whole


def figures(plan: Plan, steps: list[list[SplitStep]], tagged: list[list[list[Tagged]]]
            ) -> dict[str, object]:
    """The run's model-parallel figures (see the module's doc)."""
    def seconds(rank: int, role: str, keep=lambda kind: True) -> float:
        return sum(p[3] - p[2] for parts in tagged[rank] for p in parts
                   if p[0] == role and keep(p[1]))

    ranks = range(len(steps))
    stage_compute = [float(np.mean([seconds(r, PASS) for r in ranks
                                    if plan.ranks[r].stage == s]))
                     for s in range(plan.pipeline)]
    return {
        "bubble_fraction": bubble_fraction(plan, steps),
        "stage_compute_s": stage_compute,
        "tensor_allreduce_s": float(np.mean([seconds(r, TENSOR) for r in ranks])),
        "pipeline_p2p_s": float(np.mean([seconds(r, LINKS, lambda kind: kind != "wait")
                                         for r in ranks])),
        "activation_bytes_per_step": plan.activation_bytes_per_step,
        "stage_layers": [stage.last - stage.first + 1 for stage in plan.stages],
    }


def bubble_fraction(plan: Plan, steps: list[list[SplitStep]]) -> float | None:
    """1 - pass time / window time, summed over pipelines (a replica's shard through its
    stages), steps and ranks (None without steps): the simulator's definition
    (sim.simulated.stages.BubbleTally)."""
    busy = window = 0.0
    for replica, shard in np.ndindex(plan.replicas, plan.tensor):
        ranks = [r for r in range(len(steps))
                 if (plan.ranks[r].replica, plan.ranks[r].shard) == (replica, shard)]
        for k in range(len(steps[0])):
            passes = [p for r in ranks for p in steps[r][k].passes]
            busy += sum(end - start for _, start, end in passes)
            window += len(ranks) * (max(p[2] for p in passes) - min(p[1] for p in passes))
    return 1.0 - busy / window if window > 0 else None
