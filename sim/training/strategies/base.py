"""What every strategy shares: the run context and the strategy interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import simpy

from sim.record import Recorder
from sim.training.compute import ComputeModel
from sim.training.pipeline import LayerCosts
from sim.training.server import ParameterServer
from sim.training.worker import Worker
from sim.workloads.models import Model


@dataclass
class Context:
    """Everything a strategy works with, built by :mod:`sim.training.engine`."""

    env: simpy.Environment
    config: Any  # sim.config.Config
    network: Any  # FlowNetwork or AnalyticalNetwork
    model: Model
    params: np.ndarray  # the initial parameters
    workers: list[Worker]
    compute: ComputeModel
    recorder: Recorder
    server: ParameterServer | None  # for strategies with uses_servers
    layers: LayerCosts  # per-layer FLOPs and gradient bytes (of the model or a profile)
    numerics: bool  # False: timing only (a profile, no data and no parameters)
    network_options: dict[str, Any]  # topology, model, placement...: to rebuild the network

    @property
    def lr(self) -> float:
        return self.config.workload.lr

    @property
    def n(self) -> int:
        return len(self.workers)


class Strategy(ABC):
    """A training strategy: starts its SimPy processes and names its model of record."""

    name: ClassVar[str]
    uses_servers: ClassVar[bool] = False

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    @abstractmethod
    def start(self) -> None:
        """Start the SimPy processes that train until ``ctx.recorder.finished``."""

    @abstractmethod
    def model_of_record(self) -> np.ndarray:
        """The parameters that evaluations measure."""

    def summary_extra(self) -> dict[str, Any]:
        """Strategy-specific summary keys."""
        return {}

    def step_lr(self, staleness: int) -> float:
        """The learning rate for a gradient of this staleness (lr / staleness when enabled)."""
        if self.ctx.config.strategy.staleness_lr and staleness > 1:
            return self.ctx.lr / staleness
        return self.ctx.lr
