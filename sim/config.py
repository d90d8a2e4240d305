"""Experiment configs: the typed, frozen schema with its defaults, reading TOML, dotted
``--set`` overrides, and writing a resolved config back.

A config is a TOML file with the tables ``[cluster]``, ``[workload]``, ``[strategy]``,
``[parallel]``, ``[embeddings]``, ``[compute]``, ``[run]`` and optionally ``[faults]``,
``[checkpoint]`` and ``[sweep]``.
Every key has a default, so an empty file is a valid experiment. :func:`parse` checks
types and ranges, one table at a time; the checks across keys and against the registries,
and :func:`~sim.training.validator.load_config`, are the one validator's
(:mod:`sim.training.validator`). A :class:`Config` is frozen: once validated, nothing
changes it. :func:`dump_config` writes a config back as TOML (defaults filled in), which
reruns identically. Anything wrong raises :class:`sim.errors.UserError` naming the file,
the dotted key and what was expected.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sim.errors import UserError
from sim.names import close_match, field_at, literal_hint, unknown_key

PositiveInt = Annotated[int, Field(strict=True, ge=1)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True,
                              ser_json_inf_nan="constants")  # TOML writes inf


def doc(default: Any, description: str, **constraints: Any) -> Any:
    """A field with its default and the one-line description the config reference shows."""
    return Field(default, description=description, **constraints)


class Cluster(Section):
    """The machines and the network between them."""

    workers: PositiveInt = doc(4, "worker processes, one per host; with [parallel], "
                               "data-parallel replicas of parallel.pipeline x "
                               "parallel.tensor ranks each")
    fabric: str | dict[str, Any] = doc(
        "ib-hdr", "a preset (`python -m sim list fabrics`), `calibrated:PATH`, or a table "
        "{base, bandwidth_Bps or line_rate_bps, latency_s, overhead_s, efficiency, stack_Bps}")
    transport: str | dict[str, Any] = doc(
        "mpi", "the software between ranks: mpi (the fabric's own stack), grpc, rdma "
        "(`python -m sim list transports`), `calibrated:PATH`, or a table {base, rpc_s, "
        "overhead_s, copy_Bps, serialize_Bps, deserialize_Bps, header_bytes, frame_bytes, "
        "frame_payload_bytes, window_bytes, one_sided_pulls, answered_calls}")
    topology: str = doc("star", "star (one switch), leaf-spine / fat-tree, or ring")
    oversubscription: float = doc(1.0, "leaf-spine: leaf downlink / uplink capacity ratio",
                                  ge=1, allow_inf_nan=False)
    hosts_per_leaf: PositiveInt = doc(16, "leaf-spine: hosts under each leaf switch")
    placement: Literal["block", "round-robin"] = doc(
        "block", "how ranks map to hosts (round-robin spreads neighbours over leaves)")
    servers: PositiveInt = doc(1, "parameter-server shards, each on its own host (unless "
                               "rank_hosts places them), holding what shard_by says")
    shard_by: Literal["keys", "round-robin", "least-loaded"] = doc(
        "keys", "how the servers split the parameters: keys, equal key ranges (ps-lite, Li et "
        "al. 2014); whole layers dealt round-robin, layer i on shard i mod servers "
        "(TensorFlow's replica_device_setter), or each on the shard holding the fewest bytes "
        "so far (tf_cnn_benchmarks' parameter_server mode)")
    network: Literal["flow", "analytical"] = doc(
        "flow", "flow: max-min fair sharing of links; analytical: alpha-beta with each host's "
        "link a FIFO queue (incast serialises), no contention in the switch core")
    host: str = doc("ideal", "CPU profile of a host's cores (`python -m sim list hosts`) "
                    "or `calibrated:PATH`; ideal: no CPU costs, a core per rank")
    cores: PositiveInt = doc(1, "cores on each host")
    ranks_per_host: PositiveInt = doc(1, "ranks on each host: workers, then servers, "
                                      "consecutive ranks sharing a host (with [parallel]: a "
                                      "stage's tensor shards, then a replica's stages)")
    rank_hosts: list[NonNegativeInt] = doc([], "the host of every rank (workers, then "
                                           "servers); overrides ranks_per_host")
    host_link: str = doc("none", "the interconnect between ranks of one host "
                         "(`python -m sim list host-links`: NVLink, PCIe): their messages "
                         "take it instead of the fabric; none: every rank its own NIC on "
                         "the fabric, also to a rank beside it")
    nics_per_host: PositiveInt | None = doc(
        None, "NICs on each host, its ranks spread over them in order (rank i of a host of "
        "g ranks uses NIC i k // g; ranks sharing a NIC share its bandwidth to the switch); "
        "none: every rank its own NIC on the fabric")
    preset: str | None = doc(
        None, "a cluster of a published run (`python -m sim list clusters`): fills "
        "ranks_per_host, host_link, fabric, nics_per_host and compute.device where the "
        "config does not set them")
    wait: Literal["auto", "sleep", "spin"] = doc(
        "auto", "how a waiting rank waits: sleep frees its core, spin (MPI busy polling) "
        "holds it; auto spins only where every rank has a core")
    sched: Literal["default", "fifo"] = doc(
        "default", "how ranks share a host's cores (`sim real --sched`): default, Linux's "
        "time slices; fifo, each rank pinned to core (its index on the host mod cores) and "
        "holding it from when it runs until it waits, waits napping, a woken rank queued "
        "first in, first out for its core")


class Workload(Section):
    """The data set, the model and the optimizer."""

    model: str = doc("logreg", "logreg, softmax, mlp, sparse-logreg or wide-deep")
    dataset: str = doc("gaussian", "gaussian, digits (shipped by scikit-learn), "
                       "sparse-powerlaw, ctr-synthetic or criteo:PATH (Criteo's display-ads "
                       "TSV)")
    features: PositiveInt = doc(64, "input dimension of generated data sets (ctr-synthetic: "
                                "dense features)")
    samples: int = doc(4096, "rows of generated data sets (train + held out)", strict=True,
                       ge=2)
    classes: int = doc(2, "classes of the gaussian data set", strict=True, ge=2)
    hidden: list[PositiveInt] = doc([64], "mlp: widths of the ReLU hidden layers")
    batch: PositiveInt = doc(32, "rows per gradient on each worker")
    lr: Positive = doc(0.1, "learning rate")
    momentum: float = doc(0.0, "SGD momentum (PyTorch semantics)", ge=0, lt=1,
                          allow_inf_nan=False)
    weight_decay: NonNegative = doc(0.0, "optimizer weight decay (not part of the loss)")
    l2: NonNegative = doc(0.0, "L2 penalty inside the loss (reported losses include it)")
    separation: Positive = doc(2.0, "gaussian: distance of class means from the origin; "
                               "sparse-powerlaw: scale of the hidden weights")
    noise: NonNegative = doc(1.0, "gaussian: per-feature standard deviation")
    nnz_per_row: PositiveInt = doc(20, "sparse-powerlaw: active features per row")
    zipf_exponent: NonNegative = doc(1.1, "sparse-powerlaw, ctr-synthetic: row i of a field "
                                     "drawn with probability ~ i^-a (0: uniform)")
    fields: PositiveInt = doc(8, "ctr-synthetic: categorical fields, one embedding table each")
    vocab: PositiveInt | list[PositiveInt] = doc(
        1000, "ctr-synthetic, criteo: rows of each field's table (one value for all, or one "
        "per field)")
    ids_per_field: PositiveInt = doc(1, "ctr-synthetic: ids in each field's bag (multi-hot)")
    embedding_dim: PositiveInt = doc(8, "wide-deep: columns of every embedding table")
    cross_buckets: PositiveInt = doc(4096, "wide-deep: hash buckets of the wide part's crossed "
                                     "features (one per consecutive field pair)")
    pooling: Literal["sum", "mean"] = doc("sum", "wide-deep: how a field's bag of rows is "
                                          "pooled")
    test_fraction: float = doc(0.2, "held-out share of the rows", gt=0, lt=1)
    shard: Literal["contiguous", "shuffled"] = doc(
        "shuffled", "how training rows are split over workers")
    profile: str | None = doc(
        None, "a timing profile (`python -m sim list profiles`): charge each step the "
        "per-layer FLOPs and gradient sizes (float32) of a real network (a transformer's with "
        "[parallel] too, timing only); bsp and bsp-ps only")
    numerics: bool = doc(True, "false: timing only (a profile's layers, or the model's from the "
                         "data set's shape; no data, no loss)")


class Strategy(Section):
    """How workers combine their gradients."""

    kind: str = doc("bsp", "a strategy of the strategy table (`python -m sim list strategies`)")
    staleness: NonNegativeInt = doc(2, "ssp: the bound s on clock differences")
    backup: NonNegativeInt = doc(0, "backup: gradients dropped per step (first N - b used)")
    late_gradients: Literal["drop", "cancel"] = doc(
        "drop", "backup: a worker still computing when its step closes finishes, pushes, "
        "its gradient is dropped on arrival and it then pulls (drop: Chen et al. 2016, "
        "TensorFlow's SyncReplicasOptimizer) or it stops at once and pulls (cancel)")
    collective: str = doc("ring", "bsp / local-sgd allreduce: ring, rabenseifner, "
                          "recursive-doubling, tree, or two-level over cluster.ranks_per_host: "
                          "hierarchical (reduce in each host, allreduce across, broadcast: "
                          "Goyal et al. 2017) or hierarchical-rs (reduce-scatter, allreduce "
                          "of each local rank's piece across hosts, allgather: Horovod); on a "
                          "[parallel] plan each data and tensor group runs it over its own "
                          "members a host (a group on one host: the ring)")
    inter_collective: str = doc("ring", "hierarchical collectives: the allreduce across hosts "
                                "(ring, rabenseifner, recursive-doubling or tree)")
    allgather: str = doc("ring-allgather", "bsp with compression: the allgather of every "
                         "worker's compressed gradient (their sum would not stay compressed): "
                         "ring-allgather or recursive-doubling-allgather")
    compression: Literal["none", "topk", "qsgd"] = doc(
        "none", "gradient compression on the wire (shrinks simulated messages)")
    topk_ratio: float = doc(0.01, "topk: share of entries sent", gt=0, le=1)
    qsgd_levels: int = doc(16, "qsgd: quantisation levels s", strict=True, ge=1, le=2**30)
    qsgd_bucket: PositiveInt = doc(512, "qsgd: entries per bucket, each with its own norm "
                                   "(Alistarh et al. 2017 use 512; the model's size or "
                                   "more: one norm)")
    async_lr: Literal["per-worker", "full"] = doc(
        "per-worker", "asp/ssp: lr / N per gradient (N gradients move the model as far as "
        "one bsp step) or the full lr per gradient (Downpour, Dean et al. 2012)")
    staleness_lr: bool = doc(False, "divide the lr by the gradient's staleness "
                             "(Zhang et al. 2016)")
    local_steps: PositiveInt = doc(4, "local-sgd: steps H between averages; easgd: period tau")
    elasticity: float | None = doc(None, "easgd: moving rate alpha (default 0.9 / workers)",
                                   gt=0, le=1)
    sparse_comm: bool = doc(True, "sparse-logreg under asp / ssp: pull and push only the "
                            "features a batch touches (false: whole vectors)")
    pipelining: Literal["none", "wfbp", "bucket", "fusion"] = doc(
        "none", "bsp / bsp-ps: send each layer (wfbp) or bucket as backprop produces it; "
        "bsp: fusion, Horovod's Tensor Fusion (every cycle_s, the layers ready so far packed "
        "into buffers of at most fusion_bytes)")
    bucket_bytes: Positive = doc(25e6, "bucket: a bucket closes once it holds this many bytes "
                                 "(PyTorch DDP's default 25 MB)")
    # Horovod's defaults until v0.21 (horovod/common/operations.cc; v0.21 made them 128 MiB
    # and 1 ms, Horovod's changelog, PR #2468)
    fusion_bytes: NonNegative = doc(64 * 2**20, "fusion: a buffer's threshold; a layer that "
                                    "would overflow it opens the next (Horovod's "
                                    "HOROVOD_FUSION_THRESHOLD, 64 MiB; 0: every layer alone)")
    cycle_s: NonNegative = doc(0.005, "fusion: the coordinator's cycle (Horovod's "
                               "HOROVOD_CYCLE_TIME, 5 ms); a buffer leaves on the first tick "
                               "after its layers are produced, ticks counted from the start of "
                               "each backward pass")
    priority: bool = doc(False, "send ready messages lowest layer first (P3, ByteScheduler)")


class Parallel(Section):
    """Model parallelism: a replica's layers split over pipeline stages and tensor shards."""

    pipeline: PositiveInt = doc(1, "stages each replica's layers are split over (contiguous "
                                "layers, balanced by FLOPs unless stage_layers says)")
    stage_layers: list[PositiveInt] = doc([], "layers of each stage, first stage first "
                                          "(empty: balanced by FLOPs)")
    tensor: PositiveInt = doc(1, "shards each dense layer pair is split over (Megatron-LM: "
                              "column- then row-parallel; per pair and microbatch, one "
                              "allreduce forward of microbatch x the row layer's outputs and "
                              "one backward of microbatch x the column layer's inputs, none "
                              "where the column layer is the model's first: its input needs "
                              "no gradient)")
    microbatches: PositiveInt = doc(1, "microbatches each replica's batch (workload.batch) "
                                    "is cut into per step")
    schedule: Literal["gpipe", "1f1b", "interleaved"] = doc(
        "1f1b", "gpipe: all forwards, then all backwards (Huang et al. 2019); 1f1b: "
        "PipeDream-Flush, one forward one backward (Narayanan et al. 2021); interleaved: "
        "1F1B over virtual_stages model chunks per stage (Narayanan et al. 2021, Sec. 2.2.2; "
        "microbatches a multiple of pipeline)")
    virtual_stages: PositiveInt = doc(
        1, "interleaved: model chunks per stage (v); stage s holds virtual stages c x "
        "pipeline + s of pipeline x v contiguous layer groups (stage_layers then lists p x v)")
    dp_overlap: bool = doc(
        False, "bsp: each stage's data-parallel allreduce of its gradient overlapped with "
        "the backward of its last microbatch, layer by layer as strategy.pipelining "
        "(wfbp or bucket, Megatron-LM's overlap_grad_reduce, PyTorch DDP) groups them; "
        "false: once the stage's last backward is done")
    recompute: Literal["none", "selective", "full"] = doc(
        "none", "activation recomputation (Korthikanti et al. 2022): full: each layer's "
        "forward again before its backward, stashing only each transformer layer's input (an "
        "MLP stage's input); selective: a transformer attention's scores, softmax and "
        "dropout again (for an MLP, no attention: as none); a plan's time and memory only")


class Embeddings(Section):
    """Where wide-deep's embedding tables live and how their rows are updated."""

    placement: Literal["ps", "alltoall", "replicated"] | None = doc(
        None, "ps: rows on the parameter-server shards, sparse pulls and pushes; alltoall: "
        "tables split over the workers, pooled embeddings exchanged all-to-all (DLRM); "
        "replicated: every worker holds them, gradients allreduced; none: the strategy's "
        "own (ps for the parameter-server strategies, replicated for bsp)")
    sharding: Literal["row-hash", "row-range", "table", "column"] = doc(
        "row-hash", "ps / alltoall: rows by hash or by range, whole tables, or each shard some "
        "columns of every row (TorchRec's names)")
    cache_rows: NonNegativeInt = doc(0, "ps: the hottest rows each worker keeps, refreshed "
                                     "after strategy.staleness steps")
    optimizer: Literal["adagrad", "sgd"] = doc(
        "adagrad", "the tables' row updates (state lives with the rows); the dense part "
        "uses workload.lr and momentum")
    lr: Positive | None = doc(None, "the tables' learning rate (none: workload.lr)")
    initial_accumulator: Positive = doc(0.1, "adagrad: every entry's starting sum of squares "
                                        "(TensorFlow's initial_accumulator_value)")
    sparse_allreduce: bool = doc(False, "replicated: allgather the touched rows instead of "
                                 "allreducing whole tables")


class Slowdown(Section):
    """A named worker slowed during a window of simulated time."""

    worker: NonNegativeInt = doc(..., "the worker's index")
    start_s: NonNegative = doc(0.0, "window start, simulated s")
    end_s: Positive | None = doc(None, "window end, simulated s (none: until the end)")
    factor: float = doc(2.0, "compute time multiplier in the window", ge=1,
                        allow_inf_nan=False)


class Compute(Section):
    """How long a gradient takes."""

    device: str = doc("cpu-core", "a preset (`python -m sim list devices`) or "
                      "`calibrated:PATH`")
    time_s: Positive | None = doc(None, "fixed seconds per gradient instead of FLOPs / rate")
    precision: str | None = doc(
        None, "fp64, fp32, fp16 or bf16: the bytes of gradients, activations and pipeline "
        "and tensor messages, and the device peak GEMM-class layers run at, times "
        "gemm_efficiency; other than fp64 timing only (workload.numerics = false). none: "
        "the workload's own dtype (fp64 for the lab's models, fp32 for a profile) at the "
        "device's flops_per_s, other ops not charged")
    gemm_efficiency: float = doc(1.0, "with precision: the achieved fraction of the device's "
                                 "peak on GEMM-class FLOPs (matrix products, convolutions)",
                                 gt=0, le=1, allow_inf_nan=False)
    other_efficiency: float = doc(1.0, "with precision: the achieved fraction of the memory "
                                  "bandwidth the other ops (norms, nonlinearities, softmax, "
                                  "pooling, residual adds) read and write their elements at",
                                  gt=0, le=1, allow_inf_nan=False)
    distribution: Literal["constant", "exponential", "shifted-exponential", "lognormal"] = doc(
        "constant", "noise factor on each gradient's time, mean 1")
    sigma: Positive = doc(0.5, "lognormal: shape")
    shift: float = doc(0.5, "shifted-exponential: the fixed minimum, as a fraction of the "
                       "mean time (Dutta et al. 2018); 0 is exponential, 1 constant",
                       ge=0, le=1, allow_inf_nan=False)
    straggler_fraction: Fraction = doc(0.0, "share of workers that are always slow")
    straggler_slowdown: float = doc(1.0, "their compute time multiplier", ge=1,
                                    allow_inf_nan=False)
    slowdowns: list[Slowdown] = doc([], "named workers slowed in time windows")


class Run(Section):
    """How long to run and what to record."""

    iterations: PositiveInt = doc(200, "updates applied (bsp: steps; asp/ssp: gradients)")
    seed: NonNegativeInt = doc(0, "the one seed every random stream derives from")
    engine: Literal["events", "steady"] = doc(
        "events", "events: every rank a SimPy process, every message and collective flow by "
        "flow; steady: the fast path for a timing-only bsp plan (sim/simulated/"
        "steady_state.py): one tensor shard (and, under a balanced collective, one replica) "
        "simulated for all, each tensor allreduce timed once alone on its host link; the "
        "same results to 1e-6, what it does not cover refused")
    eval_every: PositiveInt = doc(20, "held-out loss and accuracy every this many updates")
    target_loss: Positive | None = doc(None, "held-out loss that defines time_to_target_s")
    time_limit_s: Positive | None = doc(None, "also stop at this simulated time (s): "
                                        "compares strategies over the same time span")
    samples: PositiveInt | None = doc(None, "also stop once the updates have used this many "
                                      "training samples (a bsp step uses every worker's "
                                      "batch, an asp gradient one): compares strategies at "
                                      "equal work")
    memory: Literal["refuse", "report"] = doc(
        "refuse", "a rank needing more than compute.device's memory: refuse the config "
        "(exit 2) or run it and flag it")
    reduced: str | None = doc(None, "what `SGD_LAB_QUICK=1` cut from this run (it sets this "
                              "itself, e.g. 'SGD_LAB_QUICK=1: run.iterations 60 -> 20'); "
                              "summary.json repeats it. none: the run as configured")
    seeds: list[NonNegativeInt] = doc([], "sweeps repeat every point for each seed")
    trace_flows: NonNegativeInt = doc(100_000, "link flows kept on trace.json's link tracks, "
                                      "arrows and link counters (the first ones in the "
                                      "window; a cut is marked; 0: no link side)")
    trace_window_s: list[NonNegative] = doc([], "[start, end]: only the link flows of this "
                                            "simulated span go on the trace (empty: all)")
    trace_samples: NonNegativeInt = doc(200_000, "link utilisation and flows-in-flight "
                                        "samples kept on trace.json's link counters (the "
                                        "first ones; a flow's start or end can change a "
                                        "thousand links at once; a cut is marked; 0: none)")

    @field_validator("trace_window_s")
    @classmethod
    def _window(cls, window: list[float]) -> list[float]:
        if window and (len(window) != 2 or window[0] >= window[1]):
            raise ValueError(f"run.trace_window_s: expected [start, end] in simulated seconds "
                             f"with start < end, got {window}")
        return window


class Failure(Section):
    """One fail-stop failure of a rank, at a given time or right after a given update."""

    rank: NonNegativeInt = doc(..., "the rank that fails: workers 0..N-1, then the server "
                               "shards N..N+S-1")
    at_s: Positive | None = doc(None, "when it fails (s of the run's time)")
    at_update: PositiveInt | None = doc(None, "or: right after this update is applied, "
                                        "before a checkpoint of it")

    @model_validator(mode="after")
    def _one_time(self) -> Failure:
        if (self.at_s is None) == (self.at_update is None):
            raise ValueError(f"faults.failures: rank {self.rank}: give exactly one of at_s "
                             "and at_update")
        return self


class Faults(Section):
    """Fail-stop failures of workers and server shards, and the restart after one."""

    mtbf_s: Positive | None = doc(None, "mean time between failures of each rank (s); "
                                  "none: only the listed `failures`")
    distribution: Literal["exponential", "weibull"] = doc(
        "exponential", "times between a rank's failures")
    weibull_shape: Positive = doc(0.7, "weibull: shape k (< 1: failures cluster early; "
                                  "Schroeder & Gibson 2006 fit 0.7-0.8 to LANL nodes)")
    ranks: Literal["all", "workers", "servers"] = doc(
        "all", "which ranks fail at random (mtbf_s)")
    failures: list[Failure] = doc([], "failures at given times or updates")
    restart_s: NonNegative = doc(60.0, "detecting a failure, rescheduling and starting the "
                                 "rank again, before reading the checkpoint (s; an "
                                 "assumption: set it from your cluster)")

    @property
    def enabled(self) -> bool:
        return self.mtbf_s is not None or bool(self.failures)


class Checkpoint(Section):
    """Saving the parameters and optimizer state, and what that costs."""

    every_steps: PositiveInt | None = doc(None, "a checkpoint every this many updates")
    every_s: Positive | None = doc(None, "or: at the first update this long (s) after the "
                                   "last checkpoint began")
    storage: str | dict[str, Any] = doc(
        "nvme", "a preset (`python -m sim list storage`) or a table {write_Bps, read_Bps, "
        "latency_s, aggregate_Bps}")
    mode: Literal["blocking", "background"] = doc(
        "blocking", "blocking: training waits for the write; background: it waits only for "
        "a snapshot in memory, then the write runs beside it (CheckFreq, Mohan et al. 2021)")
    state_bytes: Positive | None = doc(
        None, "bytes of a checkpoint (default: the parameters, and the momentum buffer if "
        "any): set it to study a larger model's checkpoints on a small stand-in")

    @property
    def enabled(self) -> bool:
        return self.every_steps is not None or self.every_s is not None

    @model_validator(mode="after")
    def _one_interval(self) -> Checkpoint:
        if self.every_steps is not None and self.every_s is not None:
            raise ValueError("checkpoint.every_s: give every_steps or every_s, not both")
        return self


class Config(Section):
    """A whole experiment."""

    cluster: Cluster = Cluster()
    workload: Workload = Workload()
    strategy: Strategy = Strategy()
    parallel: Parallel = Parallel()
    embeddings: Embeddings = Embeddings()
    compute: Compute = Compute()
    run: Run = Run()
    faults: Faults = Faults()
    checkpoint: Checkpoint = Checkpoint()
    sweep: dict[str, list[Any]] = doc({}, "dotted key -> list of values; `sweep` runs "
                                       "the grid")

    @field_validator("sweep", mode="before")
    @classmethod
    def _dotted(cls, table: Any) -> Any:
        """``[sweep]`` may nest tables (``cluster.workers = [...]`` unquoted): flatten them."""
        if not isinstance(table, dict):
            return table
        flat: dict[str, Any] = {}
        for key, value in table.items():
            if isinstance(value, dict):
                flat.update({f"{key}.{k}": v for k, v in cls._dotted(value).items()})
            else:
                flat[key] = value
        return flat

    @model_validator(mode="after")
    def _derived_defaults(self) -> Config:
        """Defaults that depend on other keys, written out so config.toml shows them."""
        if self.strategy.elasticity is None:  # Zhang et al. 2015: alpha = beta / p, beta = 0.9
            strategy = self.strategy.model_copy(
                update={"elasticity": min(1.0, 0.9 / self.cluster.workers)})
            # still being built (frozen is for its users): the one write past the freeze
            object.__setattr__(self, "strategy", strategy)
        return self


# ---- loading, overrides, dumping -----------------------------------------------------

def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b=value`` -> (["a", "b"], value); the value is read as TOML, else a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set {text!r}: expected KEY=VALUE, e.g. cluster.workers=8")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key.strip().split("."), value


UNSET = "none"  # `--set KEY=none`: an optional key (default None) back to its default


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of ``data`` with each ``a.b=value`` set (tables created as needed);
    ``a.b=none`` removes an optional key (one whose default is None, which TOML cannot
    write). ``sweep.KEY=[...]`` sets the sweep key KEY whole, e.g. a coupled
    ``sweep.cluster.workers,parallel.pipeline=[[8, 1], [2, 4]]``. Raises UserError for a key
    the schema does not have, suggesting the closest one."""
    import copy

    data = copy.deepcopy(data)
    for text in overrides:
        path, value = parse_override(text)
        if path[0] == "sweep" and len(path) > 2:  # [sweep]'s keys are dotted keys, whole
            path = ["sweep", ".".join(path[1:])]  # (a coupled one holds dots and commas)
        field = field_at(Config, path)
        if value == UNSET and field is not None and field.default is None:
            table_at(data, path, f"--set {text!r}").pop(path[-1], None)
        else:
            set_key(data, path, value, f"--set {text!r}")
    return data


def table_at(data: dict[str, Any], path: list[str], where: str) -> dict[str, Any]:
    """The table of config ``data`` that holds the key ``path`` names (made if missing).
    Raises UserError naming ``where`` for a key the schema does not have, or a path
    through a value that is not a table."""
    if wrong := unknown_key(Config, path):
        raise UserError(f"{where}: {wrong}")
    node = data
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise UserError(f"{where}: {part} is not a table")
        node = child
    return node


def set_key(data: dict[str, Any], path: list[str], value: Any, where: str) -> None:
    """Config ``data``'s key ``path`` (dotted, split) set to ``value``, in place. Raises
    UserError naming ``where`` (:func:`table_at`)."""
    table_at(data, path, where)[path[-1]] = value


def _describe(error: dict[str, Any]) -> str:
    loc = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return unknown_key(Config, error["loc"]) or f"{loc}: unknown key"
    msg = error["msg"].removeprefix("Value error, ")
    if error["type"] == "value_error":  # our cross-key checks name their own key
        return msg
    got = error.get("input")
    shown = "" if isinstance(got, dict) else f", got {got!r}"
    if error["type"] == "literal_error":
        shown += literal_hint(Config, error["loc"], got)
    return f"{loc}: {msg.lower()}{shown}"


def parse(data: dict[str, Any], source: str = "<config>") -> Config:
    """The resolved Config by the schema alone (types, ranges, one table at a time); the
    checks across keys and against the registries are :func:`sim.training.validator.validate`'s.
    Raises UserError naming ``source``, the key and what was expected."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{source}: {_describe(exc.errors()[0])}") from None


def _beside(path: Path) -> str:
    """`` (did you mean DIR/NAME.toml?)`` for the config file in ``path``'s directory whose
    name is closest to ``path``'s, or ""."""
    try:
        known = sorted(p.name for p in path.parent.glob("*.toml") if p.is_file())
    except OSError:
        return ""
    match = close_match(path.name, known)
    return f" (did you mean {path.with_name(match)}?)" if match else ""


def read_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such config file{_beside(path)}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None


def resolved(config: Config) -> dict[str, Any]:
    """Every key with its value (defaults included); None values are left out (TOML has none)."""
    return config.model_dump(mode="json", exclude_none=True)


def dump_config(config: Config) -> str:
    """The resolved config as TOML text."""
    return tomli_w.dumps(resolved(config))
