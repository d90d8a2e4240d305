"""Real strategies by name: the module of each rank program and how many ranks it needs.

The module has ``run(ctx) -> RankLog`` (one rank) and may have ``combine(logs, workload)``,
which rank 0 calls on the gathered logs before they are replayed. What a strategy does is
its rules' (:mod:`sim.training.rules`); a module here only moves the messages. ``run``
warms up first (kernels, and one full-size exchange with every peer, so that connection
set-up and first-touch costs are not timed: the simulator models steady state), then calls
``ctx.start_clock()``. Modules are imported only on the ranks, so the parent process never
imports mpi4py.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sim.config import Config
from sim.errors import UserError
from sim.real.executors.rank_transport import check_transport
from sim.training.parallel_plan import split_key
from sim.training.rules import table_layout
from sim.training.strategies import STRATEGIES, StrategyRow, row_of
from sim.training.workload import Workload
from sim.workloads.models import MLP, MODELS

if TYPE_CHECKING:
    from sim.real.executors.context import RankContext


@dataclass(frozen=True)
class RealStrategy:
    """A strategy's row, run for real: its rank programs (the row's ``real``)."""

    row: StrategyRow

    @property
    def name(self) -> str:
        return self.row.name

    def ranks(self, config: Config) -> int:
        """Workers, then one server rank if the strategy uses servers (real runs have one)."""
        return self.row.ranks(config)

    def program(self, config: Config) -> ModuleType:
        """The rank program's module for ``config``: a split replica's, a layer-wise
        pipelined one's, or the plain one."""
        real = self.row.real
        assert real is not None  # check_supported refused the others
        if real.tables is not None and table_layout(config):
            return importlib.import_module(real.tables)
        if split_key(config) is not None:
            return importlib.import_module(real.split)
        pipelined = config.strategy.pipelining != "none"
        return importlib.import_module(real.pipelined if pipelined else real.module)

    def run(self, ctx: RankContext) -> Any:
        return self.program(ctx.config).run(ctx)

    def combine(self, logs: list[Any], workload: Workload) -> None:
        combine: Callable[..., None] | None = getattr(self.program(workload.config),
                                                      "combine", None)
        if combine is not None:
            combine(logs, workload)


def real_strategy(config: Config) -> RealStrategy:
    """The real strategy of ``config`` (already checked by :func:`check_supported`)."""
    return RealStrategy(row_of(config))


def _real_names(where: Callable[[StrategyRow], bool] = lambda row: True) -> str:
    return ", ".join(name for name, row in STRATEGIES.items() if row.real and where(row))


def check_supported(config: Config, source: str = "config") -> RealStrategy:
    """The real strategy for ``config``, or UserError saying what real runs do not support."""
    kind, row = config.strategy.kind, row_of(config)
    if row.real is None:
        raise UserError(f"{source}: strategy.kind {kind!r} {row.no_real}; real runs "
                        f"support {_real_names()}")
    check_split(config, row, source)
    if config.strategy.compression != "none":
        raise UserError(f"{source}: strategy.compression {config.strategy.compression!r}: "
                        "real runs send dense gradients only (use \"none\")")
    if config.strategy.pipelining != "none" and row.real.pipelined is None:
        raise UserError(f"{source}: strategy.pipelining {config.strategy.pipelining!r}: "
                        f"real runs pipeline {_real_names(lambda r: bool(r.real.pipelined))} "
                        f"only ({kind} pipelining is simulated only)")
    for key in ("time_limit_s", "samples"):
        if getattr(config.run, key) is not None:
            raise UserError(f"{source}: run.{key}: real runs stop after run.iterations "
                            f"updates; drop run.{key} (--set run.{key}=none) and "
                            f"set run.iterations (now {config.run.iterations})")
    if config.strategy.priority:
        raise UserError(f"{source}: strategy.priority: not run for real (the ranks would "
                        "have to agree which ready message goes next)")
    if getattr(config.workload, "profile", None) is not None or \
            not getattr(config.workload, "numerics", True):
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
    check_transport(config, row.real, source)
    return RealStrategy(row)


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
    if config.strategy.pipelining != "none":
        raise UserError(f"{source}: strategy.pipelining {config.strategy.pipelining!r}: a "
                        "split replica's data-parallel allreduce runs after the pipeline's "
                        "flush on real ranks, not overlapped with backward (use \"none\")")
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
