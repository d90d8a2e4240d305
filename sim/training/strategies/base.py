"""What every simulated strategy shares: the run context and the strategy interface.

A strategy here decides *when* things happen (SimPy processes on the simulated network);
*what* happens (apply, accumulate or drop a push, the pull gate, combining, learning rates)
is its rules' (:mod:`sim.training.rules`), which the real executor follows too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import simpy

from sim.record import Recorder
from sim.training.compute import ComputeModel
from sim.training.messages import LayerCosts
from sim.training.rules import Rules
from sim.training.server import ParameterServer
from sim.workloads.models import Model
from sim.workloads.workload import Worker, Workload


@dataclass
class Context:
    """Everything a strategy works with, built by :mod:`sim.training.engine`."""

    env: simpy.Environment
    config: Any  # sim.config.Config
    network: Any  # FlowNetwork or AnalyticalNetwork
    workload: Workload
    rules: Rules
    recorder: Recorder
    done: simpy.Event  # fires when the recorder has every update
    server: ParameterServer | None  # for strategies whose rules use servers
    network_options: dict[str, Any]  # topology, model, placement...: to rebuild the network

    @property
    def model(self) -> Model | None:
        return self.workload.model

    @property
    def params(self) -> np.ndarray:
        """The initial parameters."""
        return self.workload.params

    @property
    def workers(self) -> list[Worker]:
        return self.workload.workers

    @property
    def compute(self) -> ComputeModel:
        return self.workload.compute

    @property
    def layers(self) -> LayerCosts:
        return self.workload.layers

    @property
    def numerics(self) -> bool:
        """False: timing only (a profile, no data and no parameters)."""
        return self.workload.numerics

    @property
    def n(self) -> int:
        return len(self.workers)


class Strategy(ABC):
    """A training strategy: starts its SimPy processes and names its model of record."""

    name: ClassVar[str]

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


def compute(ctx: Context, worker: Worker) -> Generator[simpy.Event, Any, float]:
    """Spend the simulated compute time of one gradient; returns its duration (s)."""
    duration = ctx.compute.duration(worker.index, ctx.env.now)
    with ctx.recorder.span(worker.index, "compute"):
        yield ctx.env.timeout(duration)
    return duration
