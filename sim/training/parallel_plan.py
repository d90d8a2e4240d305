"""Parallelism plans: which rank holds which layers and shards, what a microbatch sends, and
what each rank keeps in memory. Pure data; both executors run the same plan.

A job has ``cluster.workers`` data-parallel replicas x ``parallel.pipeline`` stages x
``parallel.tensor`` shards. Rank r is (replica, stage, shard) with the shard fastest, then
the stage: r = (replica x p + stage) x t + shard. With ``cluster.ranks_per_host`` consecutive
ranks per host, a tensor group shares a host first, then the stages of one replica, as the
issue asks (Megatron-LM also keeps tensor groups inside a node, Narayanan et al. 2021,
Sec. 3.3, but numbers its data-parallel peers before its stages).

Stages are contiguous layers, balanced by FLOPs (forward + backward per sample) unless
``parallel.stage_layers`` gives the counts. Inside a stage, with t > 1, consecutive dense
layers pair up as Megatron-LM's MLP does (Shoeybi et al. 2019, Sec. 3, Fig. 3a): the first
is column-parallel (its outputs split over the shards), the second row-parallel (its inputs
split; its partial outputs are summed by one allreduce in forward, and the column layer's
partial input gradients by one allreduce in backward, rows x width each). A stage's odd last
layer stays whole on every shard. The backward allreduce of a pair whose column layer is the
model's first is left out: the data needs no gradient (the kernels skip it, as autograd
skips a tensor that does not require one).

Activations go from each shard of stage s to the same shard of stage s + 1 (each holds the
whole activation after its last allreduce), and their gradients back; no scatter/gather
across the shards (Narayanan et al. 2021, Sec. 4.1, is not modelled).

With the interleaved schedule and v = ``parallel.virtual_stages`` chunks per stage, the
layers are cut into p v contiguous virtual stages (balanced by FLOPs, or
``parallel.stage_layers`` with p v counts) and stage s holds virtual stages c p + s, c =
0..v-1 (Narayanan et al. 2021, Sec. 2.2.2): each is planned as a stage of its own (its
shards, tensor allreduces, messages to virtual stages u - 1 and u + 1, the last of stage
p - 1's chunks sending on to stage 0's next), and the rank's :class:`Stage` holds them as
its ``chunks``.

A transformer profile (:mod:`sim.workloads.transformer`, timing only) is planned from its
parts: stages (virtual stages, interleaved) are contiguous transformer layers (balanced by FLOPs,
or ``parallel.stage_layers`` counts layers), the embedding on the first and the head on the
last. Each layer's attention and MLP block is one column/row pair of its own (role
"part"): one allreduce forward and one backward of microbatch x s x h elements each; the
vocab-parallel embedding allreduces forward, the head backward. A part stashes what
:meth:`~sim.workloads.transformer.Part.stash_bytes` says (dropout masks at one byte).
The head's logits reuse the first stage's word embedding: with p > 1 Megatron-LM keeps a
copy on the last stage and allreduces its gradient with the first stage's; neither the copy
nor that allreduce is counted. A part's recomputed non-GEMM elements
(``ShardLayer.recompute_other``) are carried, not charged yet.

``parallel.recompute`` (Korthikanti et al. 2022): "full" recomputes each layer's forward
before its backward (a shard layer's backward FLOPs include it) and stashes only what the
recomputation starts from: a transformer layer's input, an MLP stage's input (the whole
stage is recomputed from it; no logits kept). "selective" recomputes a transformer
attention's core only (its scores, softmax and dropout); an MLP has no attention, so there
it is "none". The working set of the layer being recomputed is not counted, as Korthikanti
et al. 2022 (Sec. 5) leave it out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from sim.training.stage_schedule import Op, peak_in_flight, peak_stash, stage_ops
from sim.workloads.datasets import dataset_shape
from sim.workloads.models import MODELS, make_model
from sim.workloads.precision import run_itemsize
from sim.workloads.transformer import TRANSFORMERS, Part, Recompute, Transformer

if TYPE_CHECKING:
    from sim.config import Config, Parallel


@dataclass(frozen=True)
class PlanLayer:
    """A dense layer: widths, FLOPs per sample, and whether backward computes its input's
    gradient (not for the model's first layer)."""

    name: str
    inputs: int
    outputs: int
    bias: bool
    forward_flops: float
    backward_flops: float
    input_grad: bool = True
    # per sample: elements its other ops (not GEMM-class) read and write in the forward
    # (sim.workloads.timing_profiles.LayerProfile's; 0 for the lab's dense layers)
    other_elements: float = 0.0
    part: Part | None = None  # a transformer's part (widths per sample); None: a dense layer

    @property
    def params(self) -> int:
        if self.part is not None:
            return self.part.params_on()
        return self.outputs * self.inputs + (self.outputs if self.bias else 0)


def plan_layers(model: Any) -> list[PlanLayer]:
    """A model's layers (:class:`sim.workloads.models.Model`) as the plan splits them: every
    layer a dense matrix (the validator refuses [parallel] for a model with other layers)."""
    out = []
    for i, layer in enumerate(model.layers):
        assert layer.shape is not None, f"{model.name}: layer {layer.name} is not dense"
        outputs, inputs = layer.shape
        out.append(PlanLayer(layer.name, inputs, outputs, layer.bias, layer.forward_flops,
                             layer.backward_flops, input_grad=i > 0))
    return out


def transformer_layers(spec: Transformer) -> list[PlanLayer]:
    """A transformer's parts as plan layers (backward 2x forward; the embedding, the first,
    needs no input gradient)."""
    return [PlanLayer(part.name, part.width_in, part.width_out, False, part.flops,
                      2 * part.flops, input_grad=part.kind != "embedding",
                      other_elements=part.other_on(), part=part)
            for part in spec.parts()]


def config_layers(config: Config) -> list[PlanLayer]:
    """The layers of ``config``'s model, a :func:`plannable` one, built from the data set's
    shape (no data made), or of its transformer profile."""
    w = config.workload
    assert plannable(config), f"{w.model} (profile {w.profile}) has no dense layers to plan"
    if w.profile is not None:
        return transformer_layers(TRANSFORMERS[w.profile])
    _, features, classes, _ = dataset_shape(w.dataset, w.samples, w.features, w.classes)
    return plan_layers(make_model(w.model, features, classes, hidden=tuple(w.hidden)))


# ---- stages ---------------------------------------------------------------------------

def balance(weights: Sequence[float], stages: int) -> list[int]:
    """Layers per stage: ``weights`` cut into ``stages`` contiguous non-empty parts whose
    largest sum is as small as can be (the first such cut in the search's order). Raises
    ValueError if there are fewer weights than stages."""
    n = len(weights)
    if not 1 <= stages <= n:
        raise ValueError(f"{stages} stages for {n} layers")
    prefix = [0.0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    inf = float("inf")
    # best[k][j]: the smallest largest part when the first j layers form k stages
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for k in range(1, stages + 1):
        for j in range(k, n - (stages - k) + 1):
            for i in range(k - 1, j):
                worst = max(best[k - 1][i], prefix[j] - prefix[i])
                if worst < best[k][j]:
                    best[k][j], cut[k][j] = worst, i
    counts, j = [], n
    for k in range(stages, 0, -1):
        counts.append(j - cut[k][j])
        j = cut[k][j]
    return counts[::-1]


# a dense layer whole, column- or row-parallel; a transformer's part, split on its own
Role = Literal["whole", "column", "row", "part"]


@dataclass(frozen=True)
class ShardLayer:
    """What one tensor shard holds and computes of a layer of its stage (per sample)."""

    layer: int  # the model's layer index
    role: Role
    params: int
    forward_flops: float
    backward_flops: float
    stash_width: int  # floats of the layer's input this shard keeps for backward
    output_width: int  # floats of the layer's output this shard computes (partial sums too)
    other_elements: float = 0.0  # per sample: what this shard's other ops read and write
    # per sample: of backward_flops, the forward it recomputes first (parallel.recompute)
    recompute_flops: float = 0.0
    recompute_other: float = 0.0  # per sample: other elements the backward recomputes


@dataclass(frozen=True)
class TensorAllreduce:
    """One allreduce inside a tensor group, per microbatch: after ``layer``'s forward (the
    row layer's partial outputs) or its backward (the column layer's partial input
    gradients)."""

    layer: int
    phase: Literal["forward", "backward"]
    nbytes: int


@dataclass(frozen=True)
class Memory:
    """Bytes one rank holds at its peak."""

    params_bytes: int
    grads_bytes: int
    momentum_bytes: int  # SGD's momentum buffer (0 without momentum)
    activations_bytes: int  # stashed inputs of the microbatches in flight

    @property
    def total_bytes(self) -> int:
        return self.params_bytes + self.grads_bytes + self.momentum_bytes + self.activations_bytes


@dataclass(frozen=True)
class Stage:
    """Layers first..last of the model on every rank of one stage (per shard); with the
    interleaved schedule, its chunks' layers (``chunks``), first of chunk 0 to last of the
    last chunk."""

    index: int
    first: int
    last: int
    layers: tuple[ShardLayer, ...]
    ops: tuple[Op, ...]  # this stage's passes in one step, in order
    peak_in_flight: int  # microbatches stashed at once ((microbatch, chunk) pairs)
    tensor_allreduces: tuple[TensorAllreduce, ...]  # per microbatch: forward's, then backward's
    activation_bytes: int  # sent to the next stage per microbatch (0 on the last)
    gradient_bytes: int  # sent to the previous stage per microbatch (0 on the first)
    memory: Memory
    # interleaved: the virtual stages this stage holds, chunk 0 first, each planned as a
    # stage (index: its virtual stage c p + s); the fields above sum theirs (layers and
    # tensor allreduces in chunk order, bytes per microbatch over the chunks). Empty: one
    chunks: tuple[Stage, ...] = ()

    @property
    def pieces(self) -> tuple[Stage, ...]:
        """The stage's chunks, or the stage itself with one."""
        return self.chunks or (self,)

    @property
    def forward_flops(self) -> float:
        """Per sample, on one shard."""
        return sum(x.forward_flops for x in self.layers)

    @property
    def backward_flops(self) -> float:
        return sum(x.backward_flops for x in self.layers)

    @property
    def params(self) -> int:
        """Parameters on one shard: the entries its data-parallel allreduce sums."""
        return sum(x.params for x in self.layers)


@dataclass(frozen=True)
class RankPlace:
    rank: int
    replica: int
    stage: int
    shard: int
    host: int


@dataclass(frozen=True)
class Plan:
    """A whole job's placement, schedule, messages and memory."""

    replicas: int
    pipeline: int
    tensor: int
    microbatches: int
    schedule: str
    microbatch_rows: int
    itemsize: int
    stages: tuple[Stage, ...]
    ranks: tuple[RankPlace, ...]

    @property
    def chunks(self) -> int:
        """Model chunks per stage (v; 1 but for the interleaved schedule)."""
        return len(self.stages[0].pieces)

    def virtual_stage(self, u: int) -> Stage:
        """Virtual stage u (chunk u // p of stage u % p); stage u with one chunk."""
        return self.stages[u % self.pipeline].pieces[u // self.pipeline]

    def rank_of(self, replica: int, stage: int, shard: int) -> int:
        return (replica * self.pipeline + stage) * self.tensor + shard

    def tensor_group(self, rank: int) -> tuple[int, ...]:
        """The ranks of ``rank``'s stage of its replica (its shards), shard 0 first."""
        at = self.ranks[rank]
        return tuple(self.rank_of(at.replica, at.stage, k) for k in range(self.tensor))

    def data_group(self, rank: int) -> tuple[int, ...]:
        """The ranks holding ``rank``'s shard of its stage in every replica: its gradient
        allreduce."""
        at = self.ranks[rank]
        return tuple(self.rank_of(d, at.stage, at.shard) for d in range(self.replicas))

    def next_rank(self, rank: int, chunk: int = 0) -> int | None:
        """Where ``rank`` sends its ``chunk``'s activations: the rank of the next virtual
        stage (None from the last)."""
        return self._neighbour(rank, chunk, 1)

    def prev_rank(self, rank: int, chunk: int = 0) -> int | None:
        """Where ``rank`` sends its ``chunk``'s input's gradients: the rank of the previous
        virtual stage (None from the first)."""
        return self._neighbour(rank, chunk, -1)

    def _neighbour(self, rank: int, chunk: int, step: int) -> int | None:
        at = self.ranks[rank]
        u = chunk * self.pipeline + at.stage + step
        if not 0 <= u < self.pipeline * self.chunks:
            return None
        return self.rank_of(at.replica, u % self.pipeline, at.shard)

    @property
    def memory_bytes_by_stage(self) -> list[int]:
        """Bytes one rank of each stage holds at its peak (its shards hold the same)."""
        return [stage.memory.total_bytes for stage in self.stages]

    @property
    def peak_memory_bytes(self) -> int:
        """The largest rank's bytes."""
        return max(self.memory_bytes_by_stage)

    @property
    def activation_bytes_per_step(self) -> int:
        """Bytes of activations and their gradients sent between stages in one step, summed
        over every replica and shard."""
        per_microbatch = sum(s.activation_bytes + s.gradient_bytes for s in self.stages)
        return self.replicas * self.tensor * self.microbatches * per_microbatch


def build_plan(config: Config, layers: Sequence[PlanLayer] | None = None,
               itemsize: int | None = None) -> Plan:
    """The plan of a resolved config (:class:`sim.config.Config`); ``layers`` default to
    the config's model's (:func:`config_layers`), ``itemsize`` (bytes per element of its
    messages and memory) to the run's precision's
    (:func:`sim.workloads.precision.run_itemsize`). What a plan cannot place (fewer layers
    than stages, ``stage_layers`` of the wrong length or sum, a tensor count that does not
    divide a split layer's width or finds no pair to split, microbatches that do not divide
    the batch) the validator refuses (:mod:`sim.training.validator`); here it is a bug."""
    par, cluster = config.parallel, config.cluster
    layers = list(config_layers(config) if layers is None else layers)
    p, t, m, v = par.pipeline, par.tensor, par.microbatches, chunks_of(par)
    itemsize = run_itemsize(config) if itemsize is None else itemsize
    counts = stage_counts(par, layers)
    batch = config.workload.batch
    assert batch % m == 0, f"{m} microbatches of {batch} rows"
    rows = batch // m
    momentum = config.workload.momentum > 0
    ops = [stage_ops(par.schedule, p, s, m, v) for s in range(p)]
    pieces, first = [], 0
    for u, count in enumerate(counts):  # virtual stage u: chunk u // p of stage u % p
        pieces.append(_stage(u, p * v, layers, first, first + count - 1, t, rows,
                             ops[u % p], u // p, momentum, itemsize, par.recompute))
        first += count
    stages = pieces if v == 1 else [_chunked(s, pieces[s::p], ops[s], momentum, itemsize)
                                    for s in range(p)]
    assert t == 1 or any(x.role in ("column", "part") for st in stages for x in st.layers), \
        f"{t} shards, no column/row pair"
    replicas = cluster.workers
    hosts = list(cluster.rank_hosts)
    ranks = tuple(
        RankPlace(r, r // (p * t), r // t % p, r % t,
                  hosts[r] if hosts else r // cluster.ranks_per_host)
        for r in range(replicas * p * t))
    return Plan(replicas, p, t, m, par.schedule, rows, itemsize, tuple(stages), ranks)


def chunks_of(par: Parallel) -> int:
    """Model chunks per stage: ``parallel.virtual_stages`` under the interleaved schedule,
    else 1."""
    return par.virtual_stages if par.schedule == "interleaved" else 1


def stage_units(layers: Sequence[PlanLayer]) -> list[float]:
    """What a stage cut places, by weight (forward + backward FLOPs per sample): each dense
    layer, or each transformer layer (its attention and MLP parts; the embedding goes with
    the first stage and the head with the last, outside the balance)."""
    if layers[0].part is None:
        return [x.forward_flops + x.backward_flops for x in layers]
    body = [x.forward_flops + x.backward_flops for x in layers[1:-1]]
    return [a + b for a, b in zip(body[::2], body[1::2], strict=True)]


def stage_counts(par: Parallel, layers: Sequence[PlanLayer]) -> list[int]:
    """Plan layers of each virtual stage (p x v of them; a stage each with one chunk), first
    first: ``parallel.stage_layers`` (dense layers, or transformer layers), else balanced by
    FLOPs (:func:`balance`)."""
    counts = list(par.stage_layers) or balance(stage_units(layers),
                                               par.pipeline * chunks_of(par))
    if layers[0].part is None:
        return counts
    counts = [2 * c for c in counts]  # a transformer layer is its attention and MLP parts
    counts[0] += 1  # the embedding
    counts[-1] += 1  # the head
    return counts


def shard_roles(count: int, tensor: int) -> list[Role]:
    """Column/row pairs of consecutive layers, an odd last one whole (all whole if t = 1)."""
    if tensor == 1:
        return ["whole"] * count
    pairs = count // 2
    return ["column", "row"] * pairs + ["whole"] * (count - 2 * pairs)


def stage_roles(layers: Sequence[PlanLayer], tensor: int) -> list[Role]:
    """The roles of a stage's layers: dense ones as :func:`shard_roles` pairs them, a
    transformer's parts each its own pair."""
    if layers[0].part is not None:
        return ["part"] * len(layers)
    return shard_roles(len(layers), tensor)


def _shard(index: int, layer: PlanLayer, role: Role, t: int,
           recompute: Recompute) -> ShardLayer:
    if layer.part is not None:
        part = layer.part
        again = part.recompute_flops(t, recompute)
        return ShardLayer(index, role, part.params_on(t), layer.forward_flops / t,
                          layer.backward_flops / t + again, layer.inputs, layer.outputs,
                          part.other_on(t), again, part.recompute_other(t, recompute))
    shard = _dense_shard(index, layer, role, t)
    if recompute != "full":  # a dense layer has no attention to recompute selectively
        return shard
    return replace(shard, backward_flops=shard.backward_flops + shard.forward_flops,
                   recompute_flops=shard.forward_flops, recompute_other=shard.other_elements)


def _dense_shard(index: int, layer: PlanLayer, role: Role, t: int) -> ShardLayer:
    if role == "column":
        assert layer.outputs % t == 0, f"{t} shards of {layer.name}'s {layer.outputs} outputs"
        outputs = layer.outputs // t
        params = outputs * layer.inputs + (outputs if layer.bias else 0)
        # its outputs are split, and so are the elementwise ops on them
        return ShardLayer(index, role, params, layer.forward_flops / t,
                          layer.backward_flops / t, layer.inputs, outputs,
                          layer.other_elements / t)
    if role == "row":  # its input is the column layer's split output; the bias stays whole
        inputs = layer.inputs // t
        params = layer.outputs * inputs + (layer.outputs if layer.bias else 0)
        # the summed output is whole on every shard, and so are the ops after the allreduce
        # (Megatron-LM repeats dropout and residual adds on each: Shoeybi et al. 2019, Fig. 3)
        return ShardLayer(index, role, params, layer.forward_flops / t,
                          layer.backward_flops / t, inputs, layer.outputs,
                          layer.other_elements)
    return ShardLayer(index, role, layer.params, layer.forward_flops, layer.backward_flops,
                      layer.inputs, layer.outputs, layer.other_elements)


def _sums_forward(layer: PlanLayer, role: Role, t: int) -> bool:
    """Whether the shards' partial outputs are allreduced after the layer's forward."""
    part = layer.part
    return role == "row" or (t > 1 and part is not None and part.forward_allreduce)


def _sums_backward(layer: PlanLayer, role: Role, t: int) -> bool:
    """Whether the shards' partial input gradients are allreduced after its backward."""
    part = layer.part
    split = role == "column" or (t > 1 and part is not None and part.backward_allreduce)
    return split and layer.input_grad


def _backward_sums(layer: PlanLayer, shard: ShardLayer, t: int, rows: int,
                   itemsize: int, recompute: Recompute) -> list[int]:
    """The bytes of the tensor allreduces in ``shard``'s backward, in order: under full
    recomputation its forward's allreduce again (the recomputed forward is the forward,
    communication included: Korthikanti et al. 2022, Sec. 5), then its backward's."""
    again = recompute == "full" and shard.recompute_flops > 0 \
        and _sums_forward(layer, shard.role, t)
    return ([rows * layer.outputs * itemsize] if again else []) + (
        [rows * layer.inputs * itemsize] if _sums_backward(layer, shard.role, t) else [])


def stash_bytes(layers: Sequence[PlanLayer], shards: Sequence[ShardLayer], last_stage: bool,
                t: int, recompute: Recompute, itemsize: int) -> int:
    """Bytes per sample one shard of a stage keeps for its backward: a transformer's parts'
    (:meth:`~sim.workloads.transformer.Part.stash_bytes`); a dense stage's every layer's
    input and, on the last stage, the logits its loss differentiates; with full
    recomputation only the stage's input."""
    if layers[0].part is not None:
        return sum(x.part.stash_bytes(itemsize, t, recompute)
                   for x in layers if x.part is not None)
    if recompute == "full":
        return shards[0].stash_width * itemsize
    return (sum(x.stash_width for x in shards) + (layers[-1].outputs if last_stage else 0)) \
        * itemsize


def _stage(s: int, p: int, layers: list[PlanLayer], first: int, last: int, t: int,
           rows: int, ops: tuple[Op, ...], chunk: int, momentum: bool, itemsize: int,
           recompute: Recompute = "none") -> Stage:
    """Stage (or virtual stage) ``s`` of ``p``, layers first..last, its rank running ``ops``
    (its ``chunk``'s passes are this stage's)."""
    mine = layers[first:last + 1]
    roles = stage_roles(mine, t)
    shards = tuple(_shard(first + j, layers[first + j], role, t, recompute)
                   for j, role in enumerate(roles))
    forward = [TensorAllreduce(x.layer, "forward", rows * layers[x.layer].outputs * itemsize)
               for x in shards if _sums_forward(layers[x.layer], x.role, t)]
    backward = [TensorAllreduce(x.layer, "backward", nbytes) for x in reversed(shards)
                for nbytes in _backward_sums(layers[x.layer], x, t, rows, itemsize, recompute)]
    in_flight = peak_in_flight([op for op in ops if op.chunk == chunk])
    stash = stash_bytes(mine, shards, s == p - 1, t, recompute, itemsize)
    params = sum(x.params for x in shards)
    memory = Memory(params * itemsize, params * itemsize, params * itemsize if momentum else 0,
                    in_flight * rows * stash)
    boundary_out = rows * layers[last].outputs * itemsize if s < p - 1 else 0
    boundary_in = rows * layers[first].inputs * itemsize if s > 0 else 0
    return Stage(s, first, last, shards, ops, in_flight, tuple(forward + backward),
                 boundary_out, boundary_in, memory)


def _chunked(s: int, chunks: list[Stage], ops: tuple[Op, ...], momentum: bool,
             itemsize: int) -> Stage:
    """Stage ``s`` holding ``chunks`` (its virtual stages, chunk 0 first): their layers,
    allreduces and bytes; its stash at its peak, each chunk's microbatches counted at their
    own size (:func:`~sim.training.stage_schedule.peak_stash`)."""
    params = sum(c.params for c in chunks)
    # a chunk stashes the same bytes per microbatch, and has one in flight at least
    per_microbatch = [c.memory.activations_bytes // c.peak_in_flight for c in chunks]
    memory = Memory(params * itemsize, params * itemsize, params * itemsize if momentum else 0,
                    round(peak_stash(ops, lambda c: per_microbatch[c])))
    return Stage(s, chunks[0].first, chunks[-1].last,
                 tuple(x for c in chunks for x in c.layers), ops, peak_in_flight(ops),
                 tuple(a for c in chunks for a in c.tensor_allreduces),
                 sum(c.activation_bytes for c in chunks), sum(c.gradient_bytes for c in chunks),
                 memory, tuple(chunks))


def rank_track(place: RankPlace) -> str:
    """A rank's thread name in trace.json, the same in simulated and real runs
    (docs/reference/results.md)."""
    return (f"rank {place.rank}: replica {place.replica}, stage {place.stage}, "
            f"shard {place.shard}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 'es' if noun.endswith('h') else 's'}"


def layout_words(config: Config) -> str:
    """A resolved config's ranks in words, as reports head a run: "1 replica x 3 stages x 1
    shard (3 ranks), 1f1b, 4 microbatches" for a split replica, "4 workers" otherwise."""
    cluster, par = config.cluster, config.parallel
    if not splits(config):
        return _count(cluster.workers, "worker")
    ranks = cluster.workers * par.pipeline * par.tensor
    chunks = chunks_of(par)
    schedule = par.schedule + (f" ({chunks} chunks per stage)" if chunks > 1 else "")
    return (f"{_count(cluster.workers, 'replica')} x {_count(par.pipeline, 'stage')} x "
            f"{_count(par.tensor, 'shard')} ({_count(ranks, 'rank')}), {schedule}, "
            f"{_count(par.microbatches, 'microbatch')}")


def split_key(config: Config) -> str | None:
    """The first [parallel] key of ``config`` that splits a replica over ranks or cuts its
    batch into microbatches (``pipeline``, ``tensor``, ``microbatches``), or recomputes
    activations (``recompute``: only a plan times it); None if none does, and a run is
    plain data parallel."""
    par = config.parallel
    for key, used in (("pipeline", par.pipeline > 1), ("tensor", par.tensor > 1),
                      ("microbatches", par.microbatches > 1),
                      ("recompute", par.recompute != "none")):
        if used:
            return key
    return None


def splits(config: Config) -> bool:
    """Whether ``config``'s [parallel] splits a replica over stages or shards, or its batch
    into microbatches: what an executor (simulated or real) runs as a plan rather than as
    whole replicas."""
    return split_key(config) is not None


def plannable(config: Config) -> bool:
    """Whether a plan knows the config's layers: a dense model (with or without numerics),
    not timed by a profile; not a model with embedding tables (their rows are placed by
    [embeddings]); or a transformer profile (:mod:`sim.workloads.transformer`)."""
    w = config.workload
    if w.profile is not None:
        return w.profile in TRANSFORMERS
    model = MODELS[w.model]
    return not model.sparse and not model.tabular
