"""A worker: its shard of the data, its mini-batches, its gradient buffer and codec."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from sim.training.compression import Dense
from sim.workloads.datasets import Dataset, csr_rows
from sim.workloads.models import Model


class Worker:
    """Worker ``index`` on network host ``host``, training on the rows ``shard``."""

    def __init__(self, index: int, host: int, shard: np.ndarray, data: Dataset | None,
                 model: Model | None,
                 batch: int, rng: np.random.Generator, codec: Dense) -> None:
        self.index, self.host, self.shard = index, host, shard
        self.data, self.model, self.batch, self.rng, self.codec = data, model, batch, rng, codec
        self.grad = np.zeros(model.size if model is not None else 0)
        self.clock = 0  # iterations this worker has completed
        self._order = rng.permutation(shard)
        self._next = 0

    def next_batch(self) -> tuple[Any, np.ndarray]:
        """The next ``batch`` rows of the shard, without replacement within an epoch."""
        if self._next + self.batch > len(self._order):
            self._order, self._next = self.rng.permutation(self.shard), 0
        rows = self._order[self._next:self._next + self.batch]
        self._next += self.batch
        X = csr_rows(self.data.X_train, rows) if self.data.sparse else self.data.X_train[rows]
        return X, self.data.y_train[rows]

    def gradient(self, params: np.ndarray) -> float:
        """Mini-batch loss; the gradient at ``params`` is left in :attr:`grad`."""
        X, y = self.next_batch()
        loss, _ = self.model.loss_grad(params, X, y, out=self.grad)
        return loss


def compute(ctx: Any, worker: Worker) -> Generator[simpy.Event, Any, float]:
    """Spend the simulated compute time of one gradient; returns its duration (s)."""
    duration = ctx.compute.duration(worker.index, ctx.env.now)
    with ctx.recorder.span(worker.index, "compute"):
        yield ctx.env.timeout(duration)
    return duration
