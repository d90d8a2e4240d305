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
VALUE_BYTES = 8  # float64 gradient entries
NORM_BYTES = 4  # a float32 norm per QSGD bucket


class Dense:
    """No compression: the gradient itself."""

    name = "none"

    def __init__(self, size: int, cfg: Any, seed: int) -> None:
        self.size = size

    def encode(self, g: np.ndarray) -> tuple[Any, int]:
        return g, g.nbytes

    def decode(self, payload: Any, out: np.ndarray) -> np.ndarray:
        return K.copy(out, payload)

    @property
    def decode_bytes(self) -> int:
        """Gradient bytes a receiver adds into its sum per message it decodes (charged as a
        sum of that many bytes): every entry here."""
        return self.size * VALUE_BYTES


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

    @property
    def decode_bytes(self) -> int:
        return self.k * VALUE_BYTES  # a receiver scatter-adds the k values into its sum


class QSGD(Dense):
    """QSGD with s levels in buckets of d entries (Alistarh et al. 2017): per bucket a float32
    norm and d signed levels of ceil(log2(2s + 1)) bits each (= a sign bit + ceil(log2(s + 1))
    bits for the magnitude 0..s), fixed width, no Elias coding."""

    name = "qsgd"

    def __init__(self, size: int, cfg: Any, seed: int) -> None:
        super().__init__(size, cfg, seed)
        self.levels = cfg.qsgd_levels
        self.bucket = cfg.qsgd_bucket
        self.bits = math.ceil(math.log2(2 * self.levels + 1))
        self.seed, self.messages = seed, 0

    def message_bytes(self, n: int) -> int:
        """Bytes on the wire for n entries: a norm per bucket, then every level, bit-packed."""
        return -(-n // self.bucket) * NORM_BYTES + math.ceil(n * self.bits / 8)

    def encode(self, g):
        # a fresh counter-based stream per message; the kernel mixes the key (SplitMix64)
        key = ((self.seed << 32) + self.messages) & (2**64 - 1)
        self.messages += 1
        levels, norms = K.qsgd_quantize(g, self.levels, key, bucket=self.bucket)
        return (levels, norms), self.message_bytes(levels.size)

    def decode(self, payload, out):
        levels, norms = payload
        return K.qsgd_dequantize(levels, norms, self.levels, out=out, bucket=self.bucket)


CODECS: dict[str, Callable[[int, Any, int], Dense]] = {
    cls.name: cls for cls in (Dense, TopK, QSGD)
}


def make_codec(cfg: Any, size: int, seed: int) -> Dense:
    """The codec named by ``strategy.compression`` for a vector of ``size`` entries."""
    return CODECS[cfg.compression](size, cfg, seed)
