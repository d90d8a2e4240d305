"""Training strategies, by name (a registry, not an if/elif chain)."""

from __future__ import annotations

from sim.simulated.strategies.allreduce import BSP, LocalSGD
from sim.simulated.strategies.base import Context, Strategy
from sim.simulated.strategies.easgd import EASGD
from sim.simulated.strategies.ps_async import ASP, SSP
from sim.simulated.strategies.ps_sync import BSPPS, Backup

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (BSP, BSPPS, Backup, ASP, SSP, LocalSGD, EASGD)
}

__all__ = ["STRATEGIES", "Context", "Strategy"]
