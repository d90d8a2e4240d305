"""Recovery by name (the strategy row's ``recovery``): what a simulation does about ``[faults]``
and ``[checkpoint]``. The engine calls :func:`build_recovery` and then the recovery's
``limit``, ``finish`` and ``trace``."""

from __future__ import annotations

from typing import Any

from sim.simulated.elastic_recovery import ElasticRecovery
from sim.simulated.restart_recovery import RestartRecovery
from sim.training.strategies import row_of

RECOVERIES = {"restart": lambda ctx, strategy: RestartRecovery(ctx),
              "elastic": ElasticRecovery}


def build_recovery(ctx: Any, strategy: Any) -> RestartRecovery | ElasticRecovery | None:
    """The run's recovery, or None when it has neither failures nor checkpoints."""
    config = ctx.config
    if not (config.faults.enabled or config.checkpoint.enabled):
        return None
    return RECOVERIES[row_of(config).recovery](ctx, strategy)
