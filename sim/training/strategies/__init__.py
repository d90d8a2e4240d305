"""Training strategies, by name (a registry, not an if/elif chain)."""

from __future__ import annotations

from sim.training.strategies.allreduce import BSP, LocalSGD
from sim.training.strategies.base import Context, Strategy
from sim.training.strategies.easgd import EASGD
from sim.training.strategies.ps_async import ASP, SSP
from sim.training.strategies.ps_sync import BSPPS, Backup

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (BSP, BSPPS, Backup, ASP, SSP, LocalSGD, EASGD)
}

__all__ = ["STRATEGIES", "Context", "Strategy"]
