"""What a real rank trains: the simulator's own data, model, shards, workers and compute model.

:func:`build_parts` calls :func:`sim.training.engine.build` itself, so a real run uses the
very objects a simulated run of the same config uses: the data set, the initial parameters,
each worker's shard, batch generator and codec, and the compute model's random streams
(all spawned from ``run.seed``). Only the SimPy side (environment, network) goes unused.

:class:`RealCompute` turns the compute model into real time: the kernels run, then the rank
sleeps so that the gradient lasts what the model says. With ``compute.time_s`` the model's
duration is absolute (``time_s`` x noise x straggler factor x slowdown); without it, it is
relative to the kernel time just measured, so a straggler of factor f sleeps (f - 1) x the
measured kernel time. A duration shorter than the kernel cannot be had: no sleep then.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.config import Config
from sim.kernels import NonFiniteError
from sim.real.timing import sleep_until
from sim.training.compute import ComputeModel
from sim.training.worker import Worker
from sim.workloads.datasets import Dataset
from sim.workloads.models import Model


@dataclass
class Parts:
    config: Config
    model: Model
    data: Dataset
    params: np.ndarray  # the initial parameters (shared by every strategy)
    workers: list[Worker]
    compute: ComputeModel

    @property
    def n(self) -> int:
        return len(self.workers)


def build_parts(config: Config) -> Parts:
    """The simulator's workload objects for ``config`` (see the module docstring)."""
    from sim.training.engine import build

    _, ctx, _ = build(config)
    return Parts(config, ctx.model, ctx.workers[0].data, ctx.params, ctx.workers, ctx.compute)


class RealCompute:
    """Worker ``index``'s gradients in real time, starting from the run's clock origin."""

    def __init__(self, parts: Parts, index: int, t0: float) -> None:
        self.worker, self.model, self.index, self.t0 = parts.workers[index], parts.compute, \
            index, t0
        self.absolute = parts.config.compute.time_s is not None
        self.kernel_s: list[float] = []

    def gradient(self, params: np.ndarray,
                 cancelled: Callable[[], bool] | None = None) -> tuple[float, bool]:
        """(mini-batch loss, whether ``cancelled()`` cut the modelled time short).

        The gradient is left in ``worker.grad``; a NaN/Inf gradient becomes all NaN so that
        the strategy sees the divergence at the same step as the simulator would.
        """
        start = time.perf_counter()
        try:
            loss = self.worker.gradient(params)
        except NonFiniteError:
            self.worker.grad.fill(math.nan)
            loss = math.nan
        return loss, self.pad(start, cancelled)

    def pad(self, start: float, check: Callable[[], bool] | None = None) -> bool:
        """Record the kernel time since ``start`` and sleep out the rest of the modelled
        compute time (noise, stragglers); True if ``check()`` cut it short."""
        kernel = time.perf_counter() - start
        self.kernel_s.append(kernel)
        modelled = self.model.duration(self.index, start - self.t0)
        target = modelled if self.absolute else kernel * modelled / self.model.base_s
        return sleep_until(start + target, check)


def median_kernel_s(samples: list[float]) -> float | None:
    return float(np.median(samples)) if samples else None


def describe(parts: Parts) -> dict[str, Any]:
    """Extra summary fields that the simulator also writes."""
    return {"workers_n": parts.n, "stragglers": parts.compute.stragglers}
