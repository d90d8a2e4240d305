"""A real rank's gradients in real time.

A rank trains the very workload a simulated run of the same config trains
(:func:`sim.training.workload.build_workload`: data set, initial parameters, each worker's
shard, batch generator and codec, the compute model's random streams, all from
``run.seed``). :class:`RealCompute` turns the compute model into real time: the kernels run,
then the rank sleeps so that the gradient lasts what the model says. Gathering the
mini-batch rows (``Worker.next_batch``) is timed apart, as ``data``: the modelled compute
time is the kernel's (padding starts when the rows are there). With ``compute.time_s``
the model's duration is absolute (``time_s`` x noise x straggler factor x slowdown); without
it, it is relative to the kernel time just measured, so a straggler of factor f sleeps (f -
1) x the measured kernel time. A duration shorter than the kernel cannot be had: no sleep
then.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from sim.kernels import NonFiniteError
from sim.real.executors.rank_clock import sleep_until
from sim.training.workload import Workload


class RealCompute:
    """Worker ``index``'s gradients in real time, starting from the run's clock origin."""

    def __init__(self, workload: Workload, index: int, t0: float) -> None:
        self.worker, self.model, self.index, self.t0 = workload.workers[index], \
            workload.compute, index, t0
        self.absolute = workload.config.compute.time_s is not None
        self.kernel_s: list[float] = []
        self.times = (0.0, 0.0, 0.0)  # the last gradient's start, rows gathered, end (s)

    def gradient(self, params: np.ndarray,
                 cancelled: Callable[[], bool] | None = None) -> tuple[float, bool]:
        """(mini-batch loss, whether ``cancelled()`` cut the modelled time short).

        ``Worker.gradient`` in two timed parts: the batch (``data``), then the kernel and
        its padding (``compute``); :attr:`times` says when, since the run's start. The
        gradient is left in ``worker.grad``; a NaN/Inf gradient becomes all NaN so that
        the strategy sees the divergence at the same step as the simulator would.
        """
        worker = self.worker
        begin = time.perf_counter()
        X, y = worker.next_batch()
        start = time.perf_counter()
        try:
            loss, _ = worker.model.loss_grad(params, X, y, out=worker.grad)
        except NonFiniteError:
            worker.grad.fill(math.nan)
            loss = math.nan
        dropped = self.pad(start, cancelled)
        self.times = (begin - self.t0, start - self.t0, time.perf_counter() - self.t0)
        return loss, dropped

    def parts(self) -> list[tuple[str, float, float]]:
        """The last gradient as spans: gathering its batch, then computing."""
        begin, gathered, end = self.times
        return [("data", begin, gathered), ("compute", gathered, end)]

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

