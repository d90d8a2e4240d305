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

from sim.training.parallel_plan import split_key
from sim.training.rules import table_layout
from sim.training.strategies import StrategyRow, row_of

if TYPE_CHECKING:
    from sim.config import Config
    from sim.real.executors.context import RankContext
    from sim.training.workload import Workload


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
        assert real is not None  # the validator refused the others (validate_real)
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
    """The real strategy of ``config`` (one :func:`sim.training.validator.validate_real`
    accepted: what real runs support is decided there, never on a rank)."""
    return RealStrategy(row_of(config))
