"""Gradient compression on the wire: what a worker sends and how many bytes it takes.

Each worker owns one codec (top-k keeps its error-feedback residual). ``encode``
returns an opaque payload and its size in bytes, which is what the network
simulates; ``decode`` turns a payload back into a dense gradient at the receiver.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from sim import kernels as K

INDEX_BYTES = 4  # 32-bit feature ids on the wire
NORM_BYTES = 4  # a float32 norm per QSGD message


class Dense:
    """No compression: the gradient itself."""

    name = "none"

    def __init__(self, size: int, cfg: Any, seed: int) -> None:
        self.size = size

    def encode(self, g: np.ndarray) -> tuple[Any, int]:
        return g, g.nbytes

    def decode(self, payload: Any, out: np.ndarray) -> np.ndarray:
        return K.copy(out, payload)


class TopK(Dense):
    """Top-k sparsification with error feedback: k = ceil(ratio * size) (index, value) pairs."""

    name = "topk"

    def __init__(self, size: int, cfg: Any, seed: int) -> None:
        super().__init__(size, cfg, seed)
        self.k = max(1, math.ceil(cfg.topk_ratio * size))
        self.residual = np.zeros(size)
        self.scratch = np.empty(size)

    def encode(self, g):
        idx, val = K.topk_ef(g, self.residual, self.k, scratch=self.scratch)
        return (idx, val), self.k * (INDEX_BYTES + val.itemsize)

    def decode(self, payload, out):
        out[:] = 0
        return K.scatter_add(*payload, out)


class QSGD(Dense):
    """QSGD with s levels: a norm plus one signed level per entry, ceil(log2(2s+1)) bits each."""

    name = "qsgd"

    def __init__(self, size: int, cfg: Any, seed: int) -> None:
        super().__init__(size, cfg, seed)
        self.levels = cfg.qsgd_levels
        self.bits = math.ceil(math.log2(2 * self.levels + 1))
        self.seed, self.messages = seed, 0

    def encode(self, g):
        # a fresh counter-based stream per message; the kernel mixes the key (SplitMix64)
        key = ((self.seed << 32) + self.messages) & (2**64 - 1)
        self.messages += 1
        levels, norm = K.qsgd_quantize(g, self.levels, key)
        return (levels, norm), NORM_BYTES + math.ceil(len(levels) * self.bits / 8)

    def decode(self, payload, out):
        levels, norm = payload
        return K.qsgd_dequantize(levels, norm, self.levels, out=out)


CODECS: dict[str, Callable[[int, Any, int], Dense]] = {
    cls.name: cls for cls in (Dense, TopK, QSGD)
}


def make_codec(cfg: Any, size: int, seed: int) -> Dense:
    """The codec named by ``strategy.compression`` for a vector of ``size`` entries."""
    return CODECS[cfg.compression](size, cfg, seed)
