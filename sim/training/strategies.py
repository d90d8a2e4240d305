"""The strategy table: every strategy is one row, and everything that needs to know about a
strategy reads its row (config checks, both executors, labels, analysis, benches, ``sim
list``); nothing else compares strategy names.

A row names its rules class (what the strategy does, :mod:`sim.training.rules`), its
simulated executor and its real rank program by ``module:name`` path, imported on first
use: the executors live in layers above this one (:mod:`sim.simulated`, :mod:`sim.real`)
and only the one that runs imports its class, and reading the table (for a legend) loads
neither the kernels nor SimPy. A row also says how a paper names the strategy, which
layer-wise pipelining modes it takes, how it recovers from failures and whether it adds
parameter-server ranks. Adding a strategy is one row here plus its classes.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sim.names import unknown

if TYPE_CHECKING:
    from sim.config import Config
    from sim.training.rules import Rules

#: every layer-wise pipelining mode (strategy.pipelining)
PIPELINING = ("none", "wfbp", "bucket", "fusion")
#: the modes a parameter-server strategy takes: Horovod's fusion packs what a coordinator
#: finds ready on every worker each cycle, for an allreduce; pushes have no coordinator
PS_PIPELINING = ("none", "wfbp", "bucket")
#: the message paths of real runs (cluster.transport read by sim.training.real_checks)
MPI, GRPC = "mpi", "grpc"


def fmt(value: Any) -> str:
    """A config value as text: ``None`` -> ``-``, booleans lower case, floats short."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True)
class StrategyName:
    """A name with the parameters it shows: ``StrategyName("SSP (s = {})",
    ("strategy.staleness",))`` reads ``SSP (s = 3)``."""

    text: str  # str.format template, one {} per parameter
    params: tuple[str, ...] = ()  # the dotted keys the name shows

    def of(self, flat: Mapping[str, Any]) -> str:
        """The name with its parameters' values (a flattened config); bare when one is
        unknown."""
        values = [flat.get(key) for key in self.params]
        return self.bare if None in values else self.text.format(*map(fmt, values))

    @property
    def bare(self) -> str:
        """The name without its parameter: ``SSP``."""
        if not self.params:
            return self.text
        head = self.text.split(" (")[0]  # "SSP (s = {})" or "ssp s={}": drop the parameter
        return " ".join(word for word in head.split(" ") if "{" not in word)


@dataclass(frozen=True)
class RealProgram:
    """A strategy's real rank programs: modules with ``run(ctx) -> RankLog`` (and optionally
    ``combine(logs, workload)``), for unpipelined runs, for layer-wise pipelined ones and for
    replicas split over ranks ([parallel]: pipeline stages, tensor shards, microbatches)."""

    module: str
    pipelined: str | None = None  # None: pipelined runs are simulated only
    split: str | None = None  # None: split replicas are simulated only
    restarts: bool = False  # the unpipelined program checkpoints and restarts
    # for a model with embedding tables (wide-deep): the program, and the
    # embeddings.placement values it runs; None: such models are simulated only
    tables: str | None = None
    table_placements: tuple[str, ...] = ()
    # the message paths its programs take (MPI, GRPC: sim.training.real_checks.real_transport)
    transports: tuple[str, ...] = (MPI,)


@dataclass(frozen=True)
class StrategyRow:
    """One strategy, declared once."""

    name: str
    rules: str  # "module:Class" of its rules (sim.training.rules)
    simulated: str  # "module:Class" of its SimPy processes (sim.simulated.strategies)
    label: StrategyName  # as a paper names it, for legends: "SSP (s = 3)"
    short: StrategyName  # as tables and notebooks name it: "ssp s=3"
    summary: str  # one line for `sim list`
    real: RealProgram | None = None
    no_real: str = "has no real runner yet"  # why a real run refuses it (real is None)
    pipelining: tuple[str, ...] = ("none",)  # the strategy.pipelining modes it takes
    # after a failure: "restart" the job from its last checkpoint (lost steps are recomputed,
    # the numbers stay those of a run without failures) or carry on "elastic" (a dead worker
    # is dropped until it rejoins, a dead shard restarts from its own checkpoint)
    recovery: str = "restart"
    uses_servers: bool = False  # adds cluster.servers parameter-server ranks after the workers
    # its pull is a request each shard holds until the step closes and then answers: two
    # sided on any transport, so a transport's one-sided reads do not apply
    held_pulls: bool = False
    gathers_compressed: bool = False  # compressed gradients travel by strategy.allgather
    synchronous: bool = False  # an update combines a step's gradients from (nearly) every worker
    drops_backups: bool = False  # a step drops strategy.backup gradients (needs fewer than N)
    # takes [parallel]: a replica split over pipeline stages and tensor shards, microbatches
    model_parallel: bool = False
    # "module:Class" of its SimPy processes for a config with [parallel] (stages, shards or
    # microbatches: sim.training.parallel_plan.splits); None: the simulator refuses one
    simulated_model_parallel: str | None = None
    # "module:Class" of run.engine = "steady" on such a config: the fast path that simulates
    # one tensor shard and stands it for the others; None: only the event engine runs it
    simulated_steady: str | None = None
    # overlaps a split replica's data-parallel exchange with its stages' last backward
    # (parallel.dp_overlap)
    dp_overlap: bool = False
    no_model_parallel: str = "does not split a replica over ranks"  # why not (model_parallel off)
    # where it can keep wide-deep's embedding tables (embeddings.placement): "ps" for the
    # parameter-server strategies (sparse pulls and pushes), "replicated" and "alltoall"
    # for bsp; empty: it does not train models with tables
    embedding_placements: tuple[str, ...] = ()

    def server_ranks(self, config: Config) -> int:
        """The parameter-server ranks it adds to ``config``'s cluster."""
        return config.cluster.servers if self.uses_servers else 0

    def worker_ranks(self, config: Config) -> int:
        """The ranks that compute: cluster.workers replicas, each parallel.pipeline x
        parallel.tensor ranks (1 x 1 unless the strategy is model parallel)."""
        split = config.parallel.pipeline * config.parallel.tensor if self.model_parallel else 1
        return config.cluster.workers * split

    def ranks(self, config: Config) -> int:
        """Every rank of ``config``'s job: workers (replicas x stages x shards), then server
        shards."""
        return self.worker_ranks(config) + self.server_ranks(config)

    def rules_class(self) -> type[Rules]:
        """Its rules class."""
        return _load(self.rules)

    def simulated_class(self, split: bool = False, engine: str = "events") -> type:
        """The SimPy strategy class (imported on first use, by the simulated executor);
        ``split``: the one that runs a parallelism plan (the validator refuses a config that
        splits for a row without one); ``engine`` (run.engine) "steady": its fast path."""
        if not split:
            return _load(self.simulated)
        if engine == "steady":
            assert self.simulated_steady is not None, f"{self.name} has no steady class"
            return _load(self.simulated_steady)
        assert self.simulated_model_parallel is not None, f"{self.name} has no split class"
        return _load(self.simulated_model_parallel)


def _load(path: str) -> Any:
    """The object a "module:name" path names (imported on first use, so that reading the
    table, e.g. for a plot's legend, loads neither the kernels nor SimPy)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _named(text: str, *params: str) -> StrategyName:
    return StrategyName(text, params)


# pushes and pulls over MPI, or over gRPC (sim.real.executors.ps_grpc)
_REAL_PS = RealProgram("sim.real.executors.ps", transports=(MPI, GRPC))
# bsp-ps and asp also train a model whose tables are on sharded servers (sparse rows)
_REAL_PS_TABLES = RealProgram("sim.real.executors.ps", tables="sim.real.executors.ps_tables",
                              table_placements=("ps",), transports=(MPI, GRPC))
# why a strategy does not take [parallel] (each completes "STRATEGY ...")
_NO_MP_ASYNC = ("is asynchronous: every stage would have to keep the parameter version each "
                "microbatch's forward used (PipeDream's weight stashing), which is not modelled")
_NO_MP_BACKUP = ("drops the late replicas' gradients, and the stages of a split replica "
                 "finish at different times: which replica is late is not one decision")
_NO_MP_AVERAGE = ("averages whole replicas between local steps; its rules do not split a "
                  "replica over stages or shards")
_SIM = "sim.simulated.strategies"
_RULES = "sim.training.rules"

STRATEGIES: dict[str, StrategyRow] = {row.name: row for row in (
    StrategyRow("bsp", f"{_RULES}:BSP", f"{_SIM}.allreduce:BSP", _named("BSP"), _named("bsp"),
                "synchronous SGD: every step averages all workers' gradients with an allreduce",
                real=RealProgram("sim.real.executors.bsp",
                                 pipelined="sim.real.executors.bsp_pipelined", restarts=True,
                                 split="sim.real.executors.bsp_split",
                                 tables="sim.real.executors.bsp_tables",
                                 table_placements=("alltoall",)),
                pipelining=PIPELINING, gathers_compressed=True, synchronous=True,
                model_parallel=True,
                simulated_model_parallel=f"{_SIM}.model_parallel:ModelParallelBSP",
                simulated_steady="sim.simulated.steady_state:SteadyBSP",
                dp_overlap=True,
                embedding_placements=("replicated", "alltoall")),
    StrategyRow("bsp-ps", f"{_RULES}:BSPPS", f"{_SIM}.ps_sync:BSPPS", _named("BSP (PS)"),
                _named("bsp-ps"),
                "synchronous SGD through sharded parameter servers: push, barrier, pull",
                real=_REAL_PS_TABLES, pipelining=PS_PIPELINING, uses_servers=True,
                held_pulls=True, synchronous=True,
                model_parallel=True,
                simulated_model_parallel=f"{_SIM}.model_parallel:ModelParallelBSPPS",
                embedding_placements=("ps",)),
    StrategyRow("backup", f"{_RULES}:Backup", f"{_SIM}.ps_sync:Backup",
                _named("Backup (b = {})", "strategy.backup"),
                _named("backup b={}", "strategy.backup"),
                "synchronous SGD with b backup workers: each step uses the first N - b gradients "
                "(Chen et al. 2016)",
                real=_REAL_PS, recovery="elastic", uses_servers=True, synchronous=True,
                drops_backups=True, no_model_parallel=_NO_MP_BACKUP,
                embedding_placements=("ps",)),
    StrategyRow("asp", f"{_RULES}:ASP", f"{_SIM}.ps_async:ASP", _named("ASP"), _named("asp"),
                "Downpour-style asynchronous SGD through parameter servers (Dean et al. 2012)",
                real=_REAL_PS_TABLES, recovery="elastic", uses_servers=True,
                no_model_parallel=_NO_MP_ASYNC, embedding_placements=("ps",)),
    StrategyRow("ssp", f"{_RULES}:SSP", f"{_SIM}.ps_async:SSP",
                _named("SSP (s = {})", "strategy.staleness"),
                _named("ssp s={}", "strategy.staleness"),
                "stale synchronous parallel: clocks differ by at most strategy.staleness "
                "(Ho et al. 2013)",
                real=_REAL_PS, recovery="elastic", uses_servers=True,
                no_model_parallel=_NO_MP_ASYNC, embedding_placements=("ps",)),
    StrategyRow("local-sgd", f"{_RULES}:LocalSGD", f"{_SIM}.allreduce:LocalSGD",
                _named("Local SGD (H = {})", "strategy.local_steps"), _named("local-sgd"),
                "H local SGD steps on each replica, then the replicas are averaged "
                "(Lin et al. 2020)",
                synchronous=True, no_model_parallel=_NO_MP_AVERAGE),
    StrategyRow("easgd", f"{_RULES}:EASGD", f"{_SIM}.easgd:EASGD",
                _named("EASGD (τ = {})", "strategy.local_steps"), _named("easgd"),
                "elastic averaging SGD: replicas pulled toward a center variable every tau steps "
                "(Zhang et al. 2015)",
                recovery="elastic", uses_servers=True, no_model_parallel=_NO_MP_AVERAGE),
)}


def strategy_row(kind: str) -> StrategyRow:
    """The row of ``kind``. Raises ValueError naming the known strategies."""
    if kind not in STRATEGIES:
        raise ValueError(unknown("strategy", kind, sorted(STRATEGIES)))
    return STRATEGIES[kind]


def row_of(config: Config) -> StrategyRow:
    """The row of ``config.strategy.kind``."""
    return strategy_row(config.strategy.kind)


def make_rules(config: Config, workers: int | None = None) -> Rules:
    """The rules of ``config.strategy.kind`` for ``workers`` workers (default: the config's)."""
    return row_of(config).rules_class()(config, workers or config.cluster.workers)
