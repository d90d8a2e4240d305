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
from sim.training.rules import RULES
from sim.training.workload import Workload

if TYPE_CHECKING:
    from sim.real.executors.context import RankContext


@dataclass(frozen=True)
class RealStrategy:
    name: str
    module: str  # has run(ctx: RankContext) -> RankLog, optionally combine(logs, workload)
    pipelined: str | None = None  # the module with strategy.pipelining; None: not run for real
    restarts: bool = False  # its unpipelined module checkpoints and restarts (restart.py)

    @property
    def servers(self) -> int:
        """Server ranks: one, after the workers, if the strategy's rules use servers."""
        return 1 if RULES[self.name].uses_servers else 0

    def ranks(self, config: Config) -> int:
        return config.cluster.workers + self.servers

    def program(self, config: Config) -> ModuleType:
        """The rank program's module for ``config``."""
        pipelined = config.strategy.pipelining != "none"
        return importlib.import_module(self.pipelined if pipelined else self.module)

    def run(self, ctx: RankContext) -> Any:
        return self.program(ctx.config).run(ctx)

    def combine(self, logs: list[Any], workload: Workload) -> None:
        combine: Callable[..., None] | None = getattr(self.program(workload.config),
                                                      "combine", None)
        if combine is not None:
            combine(logs, workload)


REAL_STRATEGIES: dict[str, RealStrategy] = {s.name: s for s in (
    RealStrategy("bsp", "sim.real.executors.bsp", pipelined="sim.real.executors.bsp_pipelined",
                 restarts=True),
    RealStrategy("bsp-ps", "sim.real.executors.ps"),
    RealStrategy("backup", "sim.real.executors.ps"),
    RealStrategy("asp", "sim.real.executors.ps"),
    RealStrategy("ssp", "sim.real.executors.ps"),
)}


def check_supported(config: Config, source: str = "config") -> RealStrategy:
    """The real strategy for ``config``, or UserError saying what real runs do not support."""
    kind = config.strategy.kind
    if kind not in REAL_STRATEGIES:
        raise UserError(f"{source}: strategy.kind {kind!r} has no real runner yet; real runs "
                        f"support {', '.join(REAL_STRATEGIES)}")
    if config.strategy.compression != "none":
        raise UserError(f"{source}: strategy.compression {config.strategy.compression!r}: "
                        "real runs send dense gradients only (use \"none\")")
    from sim.workloads.models import MODELS

    strategy = REAL_STRATEGIES[kind]
    if config.strategy.pipelining != "none" and strategy.pipelined is None:
        pipelined = ", ".join(s.name for s in REAL_STRATEGIES.values() if s.pipelined)
        raise UserError(f"{source}: strategy.pipelining {config.strategy.pipelining!r}: "
                        f"real runs pipeline {pipelined} only ({kind} pipelining is "
                        "simulated only)")
    for key in ("time_limit_s", "samples"):
        if getattr(config.run, key) is not None:
            raise UserError(f"{source}: run.{key}: real runs stop after run.iterations "
                            f"updates; drop run.{key}")
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
    if strategy.servers and config.cluster.servers != 1:
        raise UserError(f"{source}: cluster.servers = {config.cluster.servers}: real runs "
                        "use one parameter-server rank (set cluster.servers = 1)")
    return strategy
