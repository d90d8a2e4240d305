"""The one validator: a config file plus ``--set`` overrides in, a frozen, checked
:class:`~sim.config.Config` out.

:mod:`sim.config` holds the schema (types, ranges, one table at a time); whether names exist
(strategies, fabrics, models, collectives, devices, hosts, storage) and whether keys agree
with each other is decided here, where the registries are in reach, or in the strategy's
row (:mod:`sim.training.strategies`). :func:`load_config` and :func:`validate` return a
:class:`~sim.config.Config` that passed every check; :func:`validate_real` says whether a
real run supports it (the checks of :mod:`sim.training.real_checks`) and returns what the
launcher needs. Each raises :class:`sim.errors.UserError` naming the source, the dotted key
and what was expected. Real ranks receive a config that passed here and never validate it
again. The valid settings that do nothing in a run are worded by
:mod:`sim.training.config_warnings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

from sim import quick
from sim.calibrated import CALIBRATED
from sim.config import Cluster, Config, apply_overrides, parse, read_toml
from sim.errors import UserError
from sim.faults.storage import get_storage
from sim.names import unknown
from sim.network.collectives import INTER_ALLREDUCES, configured
from sim.network.collectives import REGISTRY as COLLECTIVES
from sim.network.fabrics import get_fabric
from sim.network.hierarchical import block_size
from sim.network.host_links import get_host_link
from sim.network.topology import TOPOLOGIES, topology_options
from sim.network.transports import get_transport
from sim.training.clusters import with_preset
from sim.training.compute_model import DEVICES, load_device, run_device
from sim.training.engine_checks import check_engine
from sim.training.host_costs import load_host
from sim.training.parallel_plan import (
    build_plan,
    chunks_of,
    config_layers,
    plannable,
    shard_roles,
    splits,
    stage_counts,
    stage_units,
)
from sim.training.rank_memory import run_memory
from sim.training.real_checks import check_recovery, check_rt, check_supported, check_transport_net
from sim.training.strategies import STRATEGIES, StrategyRow, row_of
from sim.workloads.datasets import DATASETS, ctr_columns, ctr_dataset, dataset_shape, known_dataset
from sim.workloads.models import MODELS
from sim.workloads.precision import ITEMSIZE, MODEL_PRECISION, itemsize
from sim.workloads.timing_profiles import PROFILES
from sim.workloads.transformer import TRANSFORMERS

# ---- cross-key checks: each raises ValueError("dotted.key: message") -------------------

def _known(key: str, value: str, names: list[str]) -> None:
    if value not in names:
        raise ValueError(f"{key}: {unknown(key.split('.')[-1], value, sorted(names))}")


def _check_names(c: Config) -> None:
    _known("strategy.kind", c.strategy.kind, list(STRATEGIES))
    _known("workload.model", c.workload.model, list(MODELS))
    if c.workload.profile is not None:
        _known("workload.profile", c.workload.profile, list(PROFILES))
    if not known_dataset(c.workload.dataset):
        _known("workload.dataset", c.workload.dataset, [*DATASETS, "criteo:PATH"])
    _known("cluster.topology", c.cluster.topology, list(TOPOLOGIES))
    allreduce = [n for n, cls in COLLECTIVES.items() if cls.kind == "allreduce" and n != "ps"]
    gathers = [n for n, cls in COLLECTIVES.items() if cls.kind == "allgather"]
    if c.strategy.collective in gathers:
        raise ValueError(f"strategy.collective: {c.strategy.collective!r} is an allgather; "
                         "strategy.collective names the allreduce of dense gradients "
                         f"({', '.join(allreduce)}), strategy.allgather the allgather of "
                         "compressed ones")
    _known("strategy.collective", c.strategy.collective, allreduce)
    _known("strategy.allgather", c.strategy.allgather, gathers)
    _known("strategy.inter_collective", c.strategy.inter_collective, list(INTER_ALLREDUCES))
    if not c.compute.device.startswith(CALIBRATED):
        _known("compute.device", c.compute.device, list(DEVICES))
    else:
        try:
            load_device(c.compute.device)
        except ValueError as exc:
            raise ValueError(f"compute.device: {exc}") from None
    _check_precision(c)


def _check_precision(c: Config) -> None:
    """A precision the lab knows and the device has a peak for; efficiencies only with it
    (without a precision the device runs at its flops_per_s, not at a peak's fraction)."""
    compute = c.compute
    if compute.precision is None:
        for key in ("gemm_efficiency", "other_efficiency"):
            if getattr(compute, key) != 1.0:
                raise ValueError(f"compute.{key}: a fraction of a device's peak at a "
                                 "precision; set compute.precision too")
        return
    _known("compute.precision", compute.precision, list(ITEMSIZE))
    if c.workload.numerics and itemsize(compute.precision) != itemsize(MODEL_PRECISION):
        # the kernels compute and the strategies send the gradients' own float64 arrays
        raise ValueError(f"compute.precision: a run with numerics trains in its kernels' "
                         f"{MODEL_PRECISION}; {compute.precision!r} is timed only (set "
                         "workload.numerics = false)")
    try:
        run_device(compute)
    except ValueError as exc:
        raise ValueError(f"compute.precision: {exc}") from None


def _groups_by_host(c: Config) -> bool:
    """Whether strategy.collective groups ranks by host (its ``takes`` names
    cluster.ranks_per_host: the hierarchical allreduces)."""
    return "cluster.ranks_per_host" in COLLECTIVES[c.strategy.collective].takes.values()


def _check_collective(c: Config) -> None:
    """A collective that groups ranks by host groups consecutive ranks, every rank of the
    run: not cluster.rank_hosts' placement. A plan's groups are checked one by one
    (:func:`_check_plan_groups`)."""
    name = c.strategy.collective
    if not _groups_by_host(c) or splits(c):
        return
    if c.cluster.rank_hosts:
        raise ValueError(f"cluster.rank_hosts: strategy.collective {name!r} groups "
                         "consecutive ranks by cluster.ranks_per_host, not a listed placement")
    try:
        configured(name, lambda key: attrgetter(key)(c)).check_ranks(c.cluster.workers)
    except ValueError as exc:
        raise ValueError(f"cluster.ranks_per_host: {exc}") from None


def _check_plan_groups(c: Config) -> None:
    """Under a collective that groups ranks by host, each data and tensor group of a plan
    runs it with its own members a host (:meth:`sim.simulated.strategies.model_parallel.
    PlanRanks.group_collective`): they must sit in equal consecutive blocks, one host a
    block (:func:`sim.network.hierarchical.block_size`)."""
    if not (_groups_by_host(c) and splits(c)):
        return
    plan = build_plan(c)
    seen: set[tuple[int, ...]] = set()
    for kind, group_of in (("data", plan.data_group), ("tensor", plan.tensor_group)):
        for rank in range(len(plan.ranks)):
            group = group_of(rank)
            if group in seen:
                continue
            seen.add(group)
            try:
                block_size([plan.ranks[r].host for r in group])
            except ValueError as exc:
                raise ValueError(f"strategy.collective: {c.strategy.collective!r} on the "
                                 f"{kind} group of ranks {_ranks(group)}: {exc}") from None


def _ranks(group: tuple[int, ...]) -> str:
    return str(list(group)) if len(group) <= 8 else f"{group[0]}, {group[1]}, ..., {group[-1]}"


def _check_topology(c: Config) -> None:
    accepted = topology_options(c.cluster.topology)
    defaults = Cluster()
    for key in ("oversubscription", "hosts_per_leaf"):
        if key not in accepted and getattr(c.cluster, key) != getattr(defaults, key):
            raise ValueError(f"cluster.{key}: not an option of topology "
                             f"{c.cluster.topology!r} (only of leaf-spine / fat-tree)")
    if c.cluster.nics_per_host is not None:
        if "ports" not in accepted:
            raise ValueError(f"cluster.nics_per_host: topology {c.cluster.topology!r} has no "
                             "NIC ports to share (star, leaf-spine or fat-tree have)")
        if c.cluster.placement != "block":
            raise ValueError("cluster.nics_per_host: ranks share a host's NICs in rank order, "
                             "which needs cluster.placement = \"block\"")


def _check_fabric(c: Config) -> None:
    try:
        fabric = get_fabric(c.cluster.fabric)
    except (ValueError, OSError) as exc:
        raise ValueError(f"cluster.fabric: {exc}") from None
    if fabric.shaped and c.cluster.network != "flow":  # only the flow model moves capacities
        raise ValueError(f"cluster.network: {c.cluster.network!r} prices a link at one rate; "
                         f"fabric {fabric.name!r} has token-bucket links: set 'flow'")


def _check_transport(c: Config) -> None:
    try:
        get_transport(c.cluster.transport)
    except (ValueError, OSError) as exc:
        raise ValueError(f"cluster.transport: {exc}") from None


def _check_hosts(c: Config) -> None:
    try:
        load_host(c.cluster.host)
    except ValueError as exc:
        raise ValueError(f"cluster.host: {exc}") from None
    try:
        get_host_link(c.cluster.host_link)
    except ValueError as exc:
        raise ValueError(f"cluster.host_link: {exc}") from None
    ranks = row_of(c).ranks(c)
    placed = len(c.cluster.rank_hosts)
    if placed and placed != ranks:
        raise ValueError(f"cluster.rank_hosts: places {placed} ranks, the cluster has "
                         f"{ranks} ({c.cluster.workers} workers"
                         + (f" + {c.cluster.servers} servers)" if ranks > c.cluster.workers
                            else ")"))


def _check_workload(c: Config) -> None:
    w = c.workload
    if not w.numerics:
        return  # timing only: no data set to check against
    try:
        rows, features, classes, sparse = dataset_shape(w.dataset, w.samples, w.features,
                                                        w.classes)
    except ValueError as exc:  # a data file that cannot be read
        raise ValueError(f"workload.dataset: {exc}") from None
    model = MODELS[w.model]
    if model.tabular != ctr_dataset(w.dataset):
        kind = "a click-through-rate" if model.tabular else "a feature-matrix"
        raise ValueError(f"workload.model: {w.model!r} needs {kind} dataset, "
                         f"{w.dataset!r} is not"
                         + (" (ctr-synthetic or criteo:PATH)" if model.tabular else ""))
    if model.sparse != sparse:
        kind = "a sparse" if model.sparse else "a dense"
        raise ValueError(f"workload.model: {w.model!r} needs {kind} dataset, "
                         f"{w.dataset!r} is not")
    if model.binary and classes != 2:
        raise ValueError(f"workload.classes: {w.model!r} is binary but {w.dataset!r} has "
                         f"{classes} classes")
    shard = int(rows * (1 - w.test_fraction)) // c.cluster.workers
    if w.batch > shard:
        raise ValueError(f"workload.batch: {w.batch} is larger than a worker's shard "
                         f"({shard} rows = {rows} x (1 - test_fraction) / "
                         f"{c.cluster.workers} workers)")


def _check_strategy(c: Config) -> None:
    s = c.strategy
    if s.compression != "none" and c.workload.model == "sparse-logreg":
        raise ValueError("strategy.compression: sparse-logreg already sends only the touched "
                         "features; compression applies to dense models")
    if row_of(c).drops_backups and s.backup >= c.cluster.workers:  # the others ignore it
        raise ValueError(f"strategy.backup: expected fewer than cluster.workers "
                         f"({c.cluster.workers}) backup workers, got {s.backup}")
    ranks = row_of(c).worker_ranks(c)  # with [parallel], a slowdown names a rank
    for slow in c.compute.slowdowns:
        if slow.worker >= ranks:
            split = f": {ranks} ranks of stages and shards" if ranks > c.cluster.workers else ""
            raise ValueError(f"compute.slowdowns: worker {slow.worker} does not exist "
                             f"(cluster.workers = {c.cluster.workers}{split})")
        if slow.end_s is not None and slow.end_s <= slow.start_s:
            raise ValueError(f"compute.slowdowns: end_s ({slow.end_s}) must be after "
                             f"start_s ({slow.start_s})")


def _pipelined(mode: str | None = None) -> str:
    """The strategies that take layer-wise pipelining (``mode``, if given), as a sentence
    names them."""
    return " and ".join(name for name, row in STRATEGIES.items()
                        if len(row.pipelining) > 1 and mode in (None, *row.pipelining))


def _check_pipelining(c: Config) -> None:
    s, w = c.strategy, c.workload
    modes = row_of(c).pipelining
    if s.pipelining not in modes and len(modes) > 1:
        raise ValueError(f"strategy.pipelining: {s.pipelining!r} applies to "
                         f"{_pipelined(s.pipelining)}, not {s.kind!r}")
    if s.pipelining not in modes or (s.priority and len(modes) == 1):
        raise ValueError(f"strategy.pipelining: layer-wise pipelining applies to "
                         f"{_pipelined()}, not {s.kind!r}")
    if s.pipelining != "none" and s.compression != "none":
        raise ValueError("strategy.compression: not combined with pipelining (each layer "
                         "would need its own codec)")
    if w.profile is not None and len(modes) == 1:
        raise ValueError(f"workload.profile: timing profiles apply to "
                         f"{_pipelined()}, not {s.kind!r}")
    if not w.numerics and len(modes) == 1:
        raise ValueError(f"workload.numerics: timing-only runs apply to {_pipelined()}, "
                         f"not {s.kind!r}")
    if not w.numerics and s.compression != "none":
        raise ValueError("strategy.compression: a timing-only run has no gradient to compress")


def _check_faults(c: Config) -> None:
    servers = row_of(c).server_ranks(c)
    ranks = c.cluster.workers + servers
    for failure in c.faults.failures:
        if failure.rank >= ranks:
            raise ValueError(f"faults.failures: rank {failure.rank} does not exist (ranks "
                             f"0..{ranks - 1}: {c.cluster.workers} workers"
                             + (f", {servers} server shards)" if servers else ")"))
        if failure.at_update is not None and failure.at_update >= c.run.iterations:
            raise ValueError(f"faults.failures: at_update = {failure.at_update} is past the "
                             f"run (run.iterations = {c.run.iterations}: the last failure "
                             f"that changes anything is after update {c.run.iterations - 1})")
        limit = c.run.time_limit_s
        if failure.at_s is not None and limit is not None and failure.at_s >= limit:
            raise ValueError(f"faults.failures: at_s = {failure.at_s:g} is past the run "
                             f"(run.time_limit_s = {limit:g})")
    if c.faults.ranks == "servers" and c.faults.mtbf_s is not None and not servers:
        raise ValueError(f"faults.ranks: 'servers' but strategy {c.strategy.kind!r} has no "
                         "parameter servers")
    try:
        get_storage(c.checkpoint.storage)
    except ValueError as exc:
        raise ValueError(f"checkpoint.storage: {exc}") from None


def _model_parallel() -> str:
    """The strategies that take [parallel], as a sentence names them."""
    return " and ".join(name for name, row in STRATEGIES.items() if row.model_parallel)


def _no_layers(c: Config) -> str:
    """Why ``c``'s model has no layers a plan can split (it is not
    :func:`~sim.training.parallel_plan.plannable`), naming the key."""
    if c.workload.profile is not None:
        return (f"workload.profile: {c.workload.profile!r} has no layer widths to plan stages "
                f"and shards from (transformer profiles do: {', '.join(TRANSFORMERS)})")
    return f"workload.model: {c.workload.model!r} has no dense layers to split over ranks"


def _check_plan(c: Config) -> None:
    """[parallel] against the model's dense layers: what a plan cannot place
    (:func:`~sim.training.parallel_plan.build_plan` trusts these checks)."""
    par, w = c.parallel, c.workload
    layers = config_layers(c)
    n, p, t, m, v = (len(stage_units(layers)), par.pipeline, par.tensor, par.microbatches,
                     chunks_of(par))
    what = f"workload.model {w.model!r}" if w.profile is None else \
        f"workload.profile {w.profile!r}"
    if n < p:
        raise ValueError(f"parallel.pipeline: {p} stages, but {what} has "
                         f"{n} layer{'s' if n > 1 else ''} (a stage needs one)")
    if n < p * v:
        raise ValueError(f"parallel.virtual_stages: {p} x {v} virtual stages, but "
                         f"{what} has {n} layers (a chunk needs one)")
    if par.stage_layers and len(par.stage_layers) != p * v:
        stages = "parallel.pipeline is" if v == 1 else "parallel.pipeline x virtual_stages is"
        raise ValueError(f"parallel.stage_layers: lists {len(par.stage_layers)} stages, "
                         f"{stages} {p * v}")
    if par.stage_layers and sum(par.stage_layers) != n:
        raise ValueError(f"parallel.stage_layers: places {sum(par.stage_layers)} layers, "
                         f"{what} has {n}")
    if w.batch % m:
        raise ValueError(f"parallel.microbatches: {m} does not divide workload.batch "
                         f"({w.batch} rows per replica)")
    if w.profile is not None:
        _check_transformer(c)
        return
    first, paired = 0, False
    for count in stage_counts(par, layers):
        for layer, role in zip(layers[first:first + count], shard_roles(count, t), strict=True):
            if role == "column" and layer.outputs % t:
                raise ValueError(f"parallel.tensor: {t} does not divide the {layer.outputs} "
                                 f"outputs of layer {layer.name} (column-parallel: its outputs "
                                 "are split over the shards)")
            paired = paired or role == "column"
        first += count
    if t > 1 and not paired:
        raise ValueError(f"parallel.tensor: {t} shards but no stage holds two consecutive "
                         "dense layers to split as a column/row pair")


def _check_transformer(c: Config) -> None:
    """A transformer profile's plan: timing only, and t dividing what its shards split."""
    spec, t = TRANSFORMERS[c.workload.profile or ""], c.parallel.tensor
    if c.workload.numerics and splits(c):
        raise ValueError(f"workload.numerics: a plan of transformer {spec.name!r} is timed "
                         "only (set workload.numerics = false)")
    for name, size in (("heads", spec.heads), ("FFN width", spec.f),
                       ("vocabulary", spec.vocab)):
        if size % t:
            raise ValueError(f"parallel.tensor: {t} does not divide the {size} {name} of "
                             f"{spec.name!r} (Megatron-LM splits them over the shards)")


def _check_interleaving(c: Config) -> None:
    """parallel.virtual_stages against the schedule, the stages and the microbatches
    (Megatron-LM's interleaved schedule: :mod:`sim.training.stage_schedule`)."""
    par = c.parallel
    if par.virtual_stages > 1 and par.schedule != "interleaved":
        raise ValueError(f"parallel.virtual_stages: {par.virtual_stages} chunks per stage run "
                         f"with parallel.schedule = \"interleaved\" only, not {par.schedule!r}")
    if chunks_of(par) == 1:
        return
    if par.pipeline < 2:
        raise ValueError("parallel.virtual_stages: interleaving chunks needs parallel.pipeline "
                         ">= 2 stages")
    if par.microbatches % par.pipeline:
        raise ValueError(f"parallel.microbatches: {par.microbatches} is not a multiple of "
                         f"parallel.pipeline ({par.pipeline}), as the interleaved schedule "
                         "needs (Megatron-LM)")


def _check_dp_overlap(c: Config) -> None:
    """parallel.dp_overlap and strategy.pipelining on a split replica: the stages' gradient
    messages overlap their last backward only with dp_overlap, under bsp."""
    par, pipelining = c.parallel, c.strategy.pipelining
    if not splits(c):
        if par.dp_overlap:
            raise ValueError("parallel.dp_overlap: overlaps a split replica's stages' "
                             "allreduces (plain data parallelism overlaps with "
                             "strategy.pipelining)")
        return
    if par.dp_overlap and not row_of(c).dp_overlap:
        takes = " and ".join(name for name, row in STRATEGIES.items() if row.dp_overlap)
        raise ValueError(f"parallel.dp_overlap: runs with {takes} only, not "
                         f"{c.strategy.kind!r}")
    if par.dp_overlap and c.cluster.host != "ideal":
        raise ValueError(f"parallel.dp_overlap: runs on cluster.host = \"ideal\" only, not "
                         f"{c.cluster.host!r} (the overlapped allreduces' CPU work is not "
                         "charged to a stage's ranks yet)")
    if par.dp_overlap and pipelining == "none":
        raise ValueError("parallel.dp_overlap: needs strategy.pipelining \"wfbp\" or "
                         "\"bucket\" to cut each stage's gradient into messages")
    if not par.dp_overlap and pipelining != "none":
        raise ValueError(f"strategy.pipelining: {pipelining!r} runs with [parallel] stages, "
                         "shards or microbatches only with parallel.dp_overlap = true "
                         "(otherwise each stage allreduces its gradients once its last "
                         "backward pass is done)")


def _check_parallel(c: Config) -> None:
    """[parallel] against the strategy, the model, the batch and the simulator."""
    par, row = c.parallel, row_of(c)
    changed = {"pipeline": par.pipeline > 1, "tensor": par.tensor > 1,
               "microbatches": par.microbatches > 1, "stage_layers": bool(par.stage_layers),
               "virtual_stages": par.virtual_stages > 1, "dp_overlap": par.dp_overlap}
    if not row.model_parallel:
        key = next((k for k, v in changed.items() if v), None)
        if key is not None:
            raise ValueError(f"parallel.{key}: strategy {c.strategy.kind!r} "
                             f"{row.no_model_parallel}; model parallelism runs with "
                             f"{_model_parallel()}")
        return
    split = par.pipeline * par.tensor > 1
    _check_interleaving(c)
    _check_dp_overlap(c)
    if split and c.strategy.compression != "none":
        raise ValueError("strategy.compression: not combined with model parallelism (each "
                         "stage and shard would need its own codec)")
    if split and c.faults.enabled:
        key = "faults.failures" if c.faults.failures else "faults.mtbf_s"
        raise ValueError(f"{key}: failures are not modelled with model parallelism yet "
                         "(a rank is one stage's shard, not a worker)")
    if (split or par.stage_layers) and not plannable(c):
        raise ValueError(_no_layers(c))  # a timing profile or a sparse model: nothing to split
    if plannable(c):
        _check_plan(c)
    elif c.workload.batch % par.microbatches:
        raise ValueError(f"parallel.microbatches: {par.microbatches} does not divide "
                         f"workload.batch ({c.workload.batch} rows per replica)")
    elif splits(c):  # microbatches of a timing profile or a sparse model: no layers to plan
        raise ValueError(f"{_no_layers(c)} (the simulator runs [parallel] on a plan of the "
                         "model's dense layers)")
    if splits(c) and row.simulated_model_parallel is None:
        raise ValueError(f"parallel.pipeline: strategy {row.name!r} takes [parallel], but "
                         "the simulator does not run its stages yet")


def _placements() -> str:
    """Each strategy that trains models with tables and where it keeps them."""
    return "; ".join(f"{name}: {', '.join(row.embedding_placements)}"
                     for name, row in STRATEGIES.items() if row.embedding_placements)


def _check_embeddings(c: Config) -> None:
    """A model with embedding tables (wide-deep) against its data, the strategy and
    [embeddings]; [embeddings] keys that need a placement."""
    w, e, row = c.workload, c.embeddings, row_of(c)
    tabular = MODELS[w.model].tabular
    if e.cache_rows and e.placement not in ("ps", None):
        raise ValueError(f"embeddings.cache_rows: a worker caches rows it pulls from the "
                         f"servers (placement \"ps\"), not with placement {e.placement!r}")
    if e.sparse_allreduce and e.placement not in ("replicated", None):
        raise ValueError(f"embeddings.sparse_allreduce: gathers replicated tables' rows "
                         f"(placement \"replicated\"), not with placement {e.placement!r}")
    if not tabular:
        return
    if e.placement not in row.embedding_placements:
        where = (f"keeps them {' or '.join(map(repr, row.embedding_placements))}"
                 if row.embedding_placements else "does not train models with tables")
        raise ValueError(f"embeddings.placement: strategy {c.strategy.kind!r} {where}, not "
                         f"{e.placement!r} ({_placements()})")
    fields, _, _ = ctr_columns(w.dataset, w.fields, w.ids_per_field, w.features)
    if isinstance(w.vocab, list) and len(w.vocab) not in (1, fields):  # one per field, or all
        raise ValueError(f"workload.vocab: expected one value or {fields} (one per field), "
                         f"got {len(w.vocab)}")
    if not w.numerics:
        raise ValueError(f"workload.numerics: {w.model}'s messages follow the ids its "
                         "batches touch, which needs the data (numerics = true)")
    refused = {"workload.l2": (w.l2 > 0, "has no L2 term in its loss (workload.weight_decay "
                               "decays the dense part)"),
               "strategy.compression": (c.strategy.compression != "none",
                                        "already sends only the rows a batch touches"),
               "strategy.pipelining": (c.strategy.pipelining != "none",
                                       "sends its tables' rows and its dense part once a step"),
               "parallel.pipeline": (splits(c), "places its tables by [embeddings], not by "
                                     "[parallel] stages, shards or microbatches"),
               "faults.failures": (c.faults.enabled, "is not run with failures yet")}
    for key, (wrong, why) in refused.items():
        if wrong:
            raise ValueError(f"{key}: {w.model} {why}")


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def _check_memory(c: Config) -> None:
    """Refuse a rank, worker or parameter server, that needs more than its device holds
    (run.memory = "refuse"; the ranks' bytes: :mod:`sim.training.rank_memory`)."""
    device = load_device(c.compute.device)
    memory = None if c.run.memory == "report" or device.memory_bytes is None \
        else run_memory(c)
    if memory is None or memory.peak_memory_bytes <= device.memory_bytes:
        return  # fits, nothing to refuse, or no dense layers whose memory the plan knows
    holds = f"{c.compute.device!r} holds {_gib(device.memory_bytes)}; run.memory = " \
        "\"report\" runs it anyway"
    server = memory.server
    if max(memory.memory_bytes_by_stage) < memory.peak_memory_bytes and server is not None:
        raise ValueError(
            f"compute.device: a parameter-server rank needs {_gib(server.total_bytes)} "
            f"(parameters {_gib(server.params_bytes)}, momentum "
            f"{_gib(server.momentum_bytes)}), {holds}")
    plan = build_plan(c)
    stage = max(plan.stages, key=lambda st: st.memory.total_bytes)
    need = stage.memory
    where = f"a rank of stage {stage.index}" if plan.pipeline > 1 else "each rank"
    raise ValueError(
        f"compute.device: {where} needs {_gib(need.total_bytes)} (parameters "
        f"{_gib(need.params_bytes)}, gradients {_gib(need.grads_bytes)}, momentum "
        f"{_gib(need.momentum_bytes)}, activations of {stage.peak_in_flight} "
        f"microbatch{'es' if stage.peak_in_flight > 1 else ''} {_gib(need.activations_bytes)}), "
        f"{holds}")


CHECKS = [_check_names, _check_collective, _check_topology, _check_fabric, _check_transport,
          _check_hosts, _check_pipelining, _check_workload, _check_strategy, _check_faults,
          _check_embeddings, _check_parallel, _check_plan_groups, _check_memory,
          check_engine, check_rt]


# ---- loading -------------------------------------------------------------------------

def _derived(c: Config) -> Config:
    """``c`` with the defaults that depend on the registries, written out so config.toml
    shows them: a model with tables keeps them where its strategy's row first says
    (embeddings.placement). Unknown names are left for :func:`_check_names`."""
    model, row = MODELS.get(c.workload.model), STRATEGIES.get(c.strategy.kind)
    if model is None or row is None or not model.tabular or c.embeddings.placement is not None \
            or not row.embedding_placements:
        return c
    embeddings = c.embeddings.model_copy(update={"placement": row.embedding_placements[0]})
    return c.model_copy(update={"embeddings": embeddings})


def validate(data: dict[str, Any], source: str = "<config>") -> Config:
    """The resolved Config, checked across keys; UserError naming ``source``, the key and
    what was expected."""
    try:
        data = with_preset(data)
    except ValueError as exc:
        raise UserError(f"{source}: cluster.preset: {exc}") from None
    config = _derived(parse(data, source))
    for check in CHECKS:
        try:
            check(config)
        except ValueError as exc:
            raise UserError(f"{source}: {exc}") from None
    return config


def load_config(path: str | Path, overrides: list[str] | None = None,
                quick: bool = False) -> Config:
    """Read, override and validate a config file; ``quick``: in the reduced form of
    :mod:`sim.quick` (the command line's ``SGD_LAB_QUICK=1``). Raises UserError."""
    data = apply_overrides(read_toml(path), overrides or [])
    try:
        config = validate(data, str(path))
    except UserError as exc:
        raise blamed(exc, str(path), overrides or []) from None
    return validate_reduced(data, config, str(path))[1] if quick else config


def blamed(exc: UserError, source: str, overrides: list[str]) -> UserError:
    """``exc`` naming the ``--set`` override whose key it is about (the last one given),
    not only the file, when an override caused it."""
    text = str(exc)
    for override in reversed(overrides):
        key = override.partition("=")[0].strip()
        if text.startswith(f"{source}: {key}") and text[len(source) + 2 + len(key):][:1] in (
                ":", " ", ""):
            return UserError(f"{source} with --set {override.strip()}: "
                             f"{text[len(source) + 2:]}")
    return exc


def validate_reduced(data: dict[str, Any], config: Config, source: str
                     ) -> tuple[dict[str, Any], Config]:
    """Config ``data`` (``config`` once validated) in the reduced form of :mod:`sim.quick`,
    and its Config; the two unchanged when nothing needs cutting. Raises UserError, saying
    the cut caused it."""
    reduced = quick.reduce_config(data, config.run.iterations, config.run.eval_every)
    if reduced is data:
        return data, config
    try:
        return reduced, validate(reduced, source)
    except UserError as exc:  # e.g. a planned failure after the last update left
        raise UserError(f"{exc} ({reduced['run']['reduced']}; unset "
                        f"{quick.VARIABLE} to run it as configured)") from None


# ---- real runs -----------------------------------------------------------------------

@dataclass(frozen=True)
class RealRun:
    """What the launcher needs of a config :func:`validate_real` accepted."""

    row: StrategyRow  # the strategy's row; its ``real`` names the rank programs
    ranks: int  # workers (replicas x stages x shards), then the server ranks
    transport: str  # the message path: "mpi" or "grpc"
    recovery: str | None  # "restart", "elastic", or None without [faults] and [checkpoint]


def validate_real(config: Config, net: str = "shm", source: str = "config") -> RealRun:
    """Whether a real run of ``config`` (already :func:`validate`'d) on ``net`` (``--net``:
    shm or emulate:RATE) is supported, and what it is. Raises UserError naming ``source``
    and the key that only the simulator runs (:mod:`sim.training.real_checks`)."""
    row = row_of(config)
    transport = check_supported(config, row, source)
    check_transport_net(transport, net)
    return RealRun(row, row.ranks(config), transport, check_recovery(config, net, source))
