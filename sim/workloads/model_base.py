"""The model interface: a flat float64 parameter vector named by layers, gradients from the
C kernels (:mod:`sim.workloads.models` registers the models)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Layer:
    name: str
    params: slice          # the layer's part of the flat parameter vector
    forward_flops: float   # per sample
    backward_flops: float  # per sample
    # a dense layer's weight matrix (outputs, inputs), which model parallelism splits;
    # None for a layer that is not a dense matrix product (sparse rows)
    shape: tuple[int, int] | None = None
    bias: bool = False     # a bias vector of `outputs` entries follows the weights
    # ids per sample the layer reads by index (an embedding bag's lookups); its backward
    # scatters as many row gradients. 0 for a dense layer
    lookups: float = 0.0


class Model:
    """Base class: subclasses set ``layers`` and implement ``loss_grad`` and ``predict``."""

    name = ""
    sparse = False  # takes CSR rows
    tabular = False  # takes click-through-rate rows (sim.workloads.ctr.CtrRows)
    tables: Sequence[Any] = ()  # row-addressed parts (sim.workloads.wide_deep.Table)
    binary = False  # labels 0/1 (float64) rather than class ids (int32)
    layers: list[Layer]

    @property
    def label_dtype(self) -> np.dtype:
        """The labels the model's kernels take: float64 0/1 if binary, else int32 ids."""
        return np.dtype(np.float64 if self.binary else np.int32)

    @property
    def size(self) -> int:
        return self.layers[-1].params.stop

    def flops(self, batch: int) -> float:
        """Forward + backward floating-point operations for one mini-batch."""
        return batch * sum(layer.forward_flops + layer.backward_flops for layer in self.layers)

    def init(self, rng: np.random.Generator) -> np.ndarray:
        return np.zeros(self.size)

    def loss_grad(self, params: np.ndarray, X, y: np.ndarray,
                  out: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        raise NotImplementedError

    def backward_layers(self, params: np.ndarray, X, y: np.ndarray,
                        out: np.ndarray) -> Iterator[tuple[float, int]]:
        """Yield (loss, layer index) as each layer's gradient in ``out`` is ready, last first."""
        loss, _ = self.loss_grad(params, X, y, out=out)
        for index in reversed(range(len(self.layers))):
            yield loss, index

    def evaluate(self, params: np.ndarray, X, y: np.ndarray) -> tuple[float, float]:
        """(mean loss, accuracy) on held-out data."""
        loss, _ = self.loss_grad(params, X, y)
        return loss, float(np.mean(self.predict(params, X) == y))

    def predict(self, params: np.ndarray, X) -> np.ndarray:
        raise NotImplementedError
