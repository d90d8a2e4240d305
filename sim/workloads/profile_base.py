"""What a timing profile is made of: a published network's layers, each with its parameters,
GEMM FLOPs, non-GEMM elements and stashed activations per sample.

The builders (:mod:`sim.workloads.cnn`, BERT in :mod:`sim.workloads.timing_profiles`) import
these types from here, and the registry (:mod:`sim.workloads.timing_profiles`) imports the
builders, so the types live apart from both: no import cycle.

FLOPs count a multiply-add as 2. Backward costs 2x forward (weight and input gradients),
except the first layer, which needs no input gradient (1x). Layers are in forward order;
a worker sends them in reverse, as backward produces them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerProfile:
    name: str
    params: int            # parameters (the gradient has as many entries)
    forward_flops: float   # per sample: GEMM-class FLOPs (matrix products, convolutions)
    # per sample: elements the layer's other ops (norms, nonlinearities, softmax, pooling,
    # dropout, residual adds) read and write in the forward; memory-bound, so charged by bytes
    other_elements: float = 0.0
    # per sample: elements the forward stashes for the backward (activation memory)
    activation_elements: float = 0.0


@dataclass(frozen=True)
class Profile:
    name: str
    layers: tuple[LayerProfile, ...]
    source: str

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def forward_flops(self) -> float:
        return sum(layer.forward_flops for layer in self.layers)

    def backward_flops(self, index: int) -> float:
        """Backward FLOPs per sample of layer ``index`` (2x forward; 1x for the first)."""
        return self.layers[index].forward_flops * (1 if index == 0 else 2)
