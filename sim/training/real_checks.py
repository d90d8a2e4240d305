"""What a real run (MPI ranks on this machine) supports of a valid config.

A config that passed :func:`sim.training.validator.validate` can still ask for what only
the simulator runs: a strategy without real programs, compression, random failures, an
RDMA transport, ... Each check here raises :class:`sim.errors.UserError` naming ``source``
(default ``config``), the dotted key and why; :func:`sim.training.validator.validate_real`
runs them in order, in the parent process only (the ranks trust what they receive).

Pure (no MPI, no gRPC): the executors' programs are named by the strategy row, never
imported here.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.config import Config
from sim.errors import UserError
from sim.network.collectives import REGISTRY as COLLECTIVES
from sim.network.transports import get_transport
from sim.training.messages import MODES as PIPELINING_MODES
from sim.training.parallel_plan import chunks_of, split_key
from sim.training.rules import table_layout
from sim.training.strategies import (
    GRPC,
    MPI,
    STRATEGIES,
    RealProgram,
    StrategyRow,
    make_rules,
    row_of,
)
from sim.workloads.models import MLP, MODELS


def _real_names(where: Callable[[StrategyRow], bool] = lambda row: True) -> str:
    return ", ".join(name for name, row in STRATEGIES.items() if row.real and where(row))


def check_supported(config: Config, row: StrategyRow, source: str = "config") -> str:
    """UserError saying what of ``config`` (strategy row ``row``) real runs do not support;
    the message path its ranks take, ``"mpi"`` or ``"grpc"``."""
    kind = config.strategy.kind
    if row.real is None:
        raise UserError(f"{source}: strategy.kind {kind!r} {row.no_real}; real runs "
                        f"support {_real_names()}")
    check_split(config, row, source)
    if config.strategy.compression != "none":
        raise UserError(f"{source}: strategy.compression {config.strategy.compression!r}: "
                        "real runs send dense gradients only (use \"none\")")
    if not PIPELINING_MODES[config.strategy.pipelining].real:
        raise UserError(f"{source}: strategy.pipelining {config.strategy.pipelining!r}: "
                        "simulated only (real ranks have no coordinator to agree on each "
                        "cycle's buffers)")
    if config.strategy.pipelining != "none" and row.real.pipelined is None:
        raise UserError(f"{source}: strategy.pipelining {config.strategy.pipelining!r}: "
                        f"real runs pipeline {_real_names(lambda r: bool(r.real.pipelined))} "
                        f"only ({kind} pipelining is simulated only)")
    for key in ("time_limit_s", "samples"):
        if getattr(config.run, key) is not None:
            raise UserError(f"{source}: run.{key}: real runs stop after run.iterations "
                            f"updates; drop run.{key} (--set run.{key}=none) and "
                            f"set run.iterations (now {config.run.iterations})")
    if COLLECTIVES[config.strategy.collective].takes:
        raise UserError(f"{source}: strategy.collective {config.strategy.collective!r}: "
                        "simulated only (the real ranks run the flat allreduces)")
    if config.strategy.priority:
        raise UserError(f"{source}: strategy.priority: not run for real (the ranks would "
                        "have to agree which ready message goes next)")
    if config.workload.profile is not None or not config.workload.numerics:
        raise UserError(f"{source}: workload.profile / numerics = false: a timing profile "
                        "has no data or kernels to run for real")
    if MODELS[config.workload.model].sparse:
        raise UserError(f"{source}: workload.model {config.workload.model!r}: real runs "
                        "support dense models only")
    tables = bool(table_layout(config))
    if tables:
        check_tables(config, row, source)
    elif row.uses_servers and config.cluster.servers != 1:
        raise UserError(f"{source}: cluster.servers = {config.cluster.servers}: real runs "
                        "use one parameter-server rank (set cluster.servers = 1), or "
                        "several for a model with tables (wide-deep)")
    return check_transport(config, row.real, source)


# the row shardings and whole tables: each shard holds whole rows
_REAL_SHARDINGS = ("row-hash", "row-range", "table")


def check_tables(config: Config, row: StrategyRow, source: str = "config") -> None:
    """What a real run of a model with embedding tables (wide-deep) does not support
    (UserError naming the key)."""
    assert row.real is not None
    kind, embeddings = config.strategy.kind, config.embeddings
    if row.real.tables is None:
        raise UserError(f"{source}: strategy.kind {kind!r}: real runs train a model with "
                        f"tables ({config.workload.model}) with "
                        f"{_real_names(lambda r: bool(r.real.tables))} only ({kind} is "
                        "simulated only)")
    if embeddings.placement not in row.real.table_placements:
        raise UserError(f"{source}: embeddings.placement {embeddings.placement!r}: real {kind} "
                        f"runs keep the tables {' or '.join(map(repr, row.real.table_placements))} "
                        "only (the others are simulated only)")
    if embeddings.sharding not in _REAL_SHARDINGS:
        raise UserError(f"{source}: embeddings.sharding {embeddings.sharding!r}: real runs "
                        f"shard whole rows ({', '.join(_REAL_SHARDINGS)}); column sharding is "
                        "simulated only")
    if embeddings.cache_rows:
        raise UserError(f"{source}: embeddings.cache_rows = {embeddings.cache_rows}: real "
                        "runs keep no worker cache of hot rows yet (set it to 0)")
    if config.strategy.pipelining != "none":
        raise UserError(f"{source}: strategy.pipelining {config.strategy.pipelining!r}: real "
                        "runs of a model with tables do not pipeline (use \"none\")")
    if config.faults.enabled or config.checkpoint.enabled:
        name = "checkpoint.enabled" if not config.faults.enabled else "faults.enabled"
        raise UserError(f"{source}: {name}: real runs of a model with tables neither inject "
                        "failures nor keep checkpoints yet")
    if not row.uses_servers:
        for name, used in _MODELLED_COMPUTE:
            if used(config.compute):
                raise UserError(f"{source}: {name}: real {kind} runs of a model with tables "
                                "run their real kernels only; modelled compute times are "
                                "not slept (drop it, or simulate the run)")


# what a real split replica runs its passes' kernels without: (key, whether it is set)
_MODELLED_COMPUTE = (
    ("compute.time_s", lambda c: c.time_s is not None),
    ("compute.distribution", lambda c: c.distribution != "constant"),
    ("compute.straggler_fraction", lambda c: c.straggler_fraction > 0
     and c.straggler_slowdown > 1),
    ("compute.slowdowns", lambda c: bool(c.slowdowns)),
)


def check_split(config: Config, row: StrategyRow, source: str = "config") -> None:
    """What a real run of a replica split over ranks ([parallel] pipeline, tensor or
    microbatches) does not support (UserError naming the key); nothing without a split."""
    key = split_key(config)
    if key is None:
        return
    assert row.real is not None
    if row.real.split is None:
        raise UserError(f"{source}: parallel.{key}: real runs split a replica with "
                        f"{_real_names(lambda r: bool(r.real.split))} only "
                        f"({config.strategy.kind} with [parallel] is simulated only)")
    model = MODELS[config.workload.model]
    if not (isinstance(model, type) and issubclass(model, MLP)):
        raise UserError(f"{source}: workload.model {config.workload.model!r}: a split "
                        "replica runs an MLP's dense layers on real ranks (model = \"mlp\")")
    if config.parallel.recompute != "none":
        raise UserError(f"{source}: parallel.recompute {config.parallel.recompute!r}: real "
                        "ranks keep every activation (recomputation is simulated only)")
    if config.strategy.pipelining != "none":
        raise UserError(f"{source}: strategy.pipelining {config.strategy.pipelining!r}: a "
                        "split replica's data-parallel allreduce runs after the pipeline's "
                        "flush on real ranks, not overlapped with backward (use \"none\")")
    if chunks_of(config.parallel) > 1:
        raise UserError(f"{source}: parallel.virtual_stages: real ranks run one chunk per "
                        "stage (the interleaved schedule with more is simulated only)")
    for name, used in _MODELLED_COMPUTE:
        if used(config.compute):
            raise UserError(f"{source}: {name}: a split replica's passes run their real "
                            "kernels only; modelled compute times are not slept per pass on "
                            "real ranks (drop it, or simulate the run)")
    faults = config.faults
    if faults.enabled or config.checkpoint.enabled:
        every = "every_steps" if config.checkpoint.every_steps is not None else "every_s"
        name = (f"checkpoint.{every}" if not faults.enabled else
                "faults.failures" if faults.failures else "faults.mtbf_s")
        raise UserError(f"{source}: {name}: real runs of a split replica neither inject "
                        "failures nor keep checkpoints yet")


# ---- the message path: MPI, or gRPC --------------------------------------------------------
# ``cluster.transport`` names the software between ranks for the simulator
# (sim.network.transports); a real run takes it as a choice of message path:
# * mpi (and any transport without RPC work of its own): MPI point-to-point messages, as
#   every real strategy sends them;
# * grpc, a table based on it, or a calibrated profile of it (a transport whose name starts
#   with grpc or that has a per-call cost rpc_s > 0): the parameter-server strategies'
#   pushes and pulls go over gRPC (sim.real.executors.ps_grpc);
# * rdma (one-sided pulls): refused, this machine has no RDMA hardware.

def real_transport(config: Config, source: str = "config") -> str:
    """``"mpi"`` or ``"grpc"``: the message path a real run of ``config`` takes.

    Raises UserError for an RDMA transport (no RDMA hardware here), one line naming
    ``cluster.transport``.
    """
    transport = get_transport(config.cluster.transport)  # validate() read it already
    if transport.one_sided_pulls or transport.name.startswith("rdma"):
        raise UserError(f"{source}: cluster.transport = {transport.name!r}: real runs need "
                        "RDMA hardware, which this machine has none of; simulate it with "
                        "`sim run`")
    if transport.rpc_s > 0 or transport.name.startswith(GRPC):
        return GRPC
    return MPI


def check_transport(config: Config, real: RealProgram, source: str = "config") -> str:
    """The message path of a real run of ``config`` whose strategy's real programs are
    ``real``, or UserError naming the key that rules it out: a program without that path,
    cancelled late gradients or failures over gRPC. Returns ``"mpi"`` or ``"grpc"``."""
    transport = real_transport(config, source)
    if transport == MPI:
        return transport
    key = f"{source}: cluster.transport = {transport!r}"
    if transport not in real.transports:
        raise UserError(f"{key}: real {config.strategy.kind} runs send their messages over "
                        "MPI only; gRPC carries the parameter-server strategies' pushes and "
                        "pulls (set cluster.transport = \"mpi\")")
    if make_rules(config).cancels_late:
        raise UserError(f"{key} with strategy.late_gradients = \"cancel\": a cancel would "
                        "need a server-to-worker call during the gradient, which the gRPC "
                        "path does not make (use \"drop\", or cluster.transport = \"mpi\")")
    if config.faults.enabled or config.checkpoint.enabled:
        name = "faults.enabled" if config.faults.enabled else "checkpoint.enabled"
        raise UserError(f"{key} with {name}: the gRPC path neither injects failures nor "
                        "keeps checkpoints (use cluster.transport = \"mpi\")")
    return transport


def check_transport_net(transport: str, net: str) -> None:
    """UserError if ``net`` (``--net``) cannot carry ``transport``: gRPC connects over
    127.0.0.1, which an emulated network's namespaces do not share."""
    if transport == GRPC and net != "shm":
        raise UserError(f"--net {net} with cluster.transport = 'grpc': the gRPC path "
                        "connects the ranks over 127.0.0.1, which the emulated network's "
                        "namespaces do not share (use --net shm, or cluster.transport = "
                        "\"mpi\")")


# ---- failures and checkpoints --------------------------------------------------------------

def check_recovery(config: Config, net: str = "shm", source: str = "config") -> str | None:
    """The recovery a real run of ``config`` uses ("restart", "elastic"), None without
    ``[faults]`` and ``[checkpoint]``. Raises UserError naming the key real runs refuse:
    random failures, restarts of a strategy whose program does not checkpoint, background
    checkpoints, server failures or checkpoints of an elastic strategy, elastic failures
    over an emulated network."""
    faults, cp, kind = config.faults, config.checkpoint, config.strategy.kind
    if not (faults.enabled or cp.enabled):
        return None
    if faults.mtbf_s is not None:
        raise UserError(f"{source}: faults.mtbf_s: real runs inject only the failures listed "
                        "in faults.failures (random failures are simulated only)")
    recovery = row_of(config).recovery
    key = "faults.failures" if faults.failures else \
        f"checkpoint.{'every_steps' if cp.every_steps is not None else 'every_s'}"
    restarting = [name for name, row in STRATEGIES.items() if row.real and row.real.restarts]
    if recovery == "restart" and (kind not in restarting or
                                  config.strategy.pipelining != "none"):
        raise UserError(f"{source}: {key}: real runs checkpoint and restart unpipelined "
                        f"{', '.join(restarting)} only ({kind} with failures or checkpoints "
                        "is simulated only)")
    if recovery == "restart" and cp.enabled and cp.mode != "blocking":
        raise UserError(f"{source}: checkpoint.mode {cp.mode!r}: real runs write "
                        "checkpoints blocking")
    if recovery == "elastic":
        if cp.enabled:
            raise UserError(f"{source}: {key}: real {kind} runs keep no server checkpoints "
                            "(a server's failure is simulated only); drop [checkpoint]")
        servers = [f.rank for f in faults.failures if f.rank >= config.cluster.workers]
        if servers:
            raise UserError(f"{source}: faults.failures: rank {servers[0]} is the parameter "
                            f"server; real {kind} runs kill workers only (ranks 0.."
                            f"{config.cluster.workers - 1})")
        if faults.failures and net != "shm":
            raise UserError(f"{source}: faults.failures: real {kind} runs with failures "
                            "use shared memory only (--net shm)")
    return recovery


def check_rt(c: Config) -> None:
    """The real-time discipline's rule (``cluster.sched = "fifo"``, for simulated and real
    runs alike): raises ValueError("cluster.wait: ...") where its ranks would spin, as a
    real-time rank that spins keeps its core from the ranks pinned beside it."""
    if c.cluster.sched == "fifo" and c.cluster.wait == "spin":
        raise ValueError("cluster.wait: 'spin' is not a wait under cluster.sched = 'fifo' "
                         "(its ranks nap while they wait); use 'auto' or 'sleep'")
