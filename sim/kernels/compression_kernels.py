"""Gradient compression kernels: top-k with error feedback, QSGD, and the scatter-add that
decodes a sparse payload. The codecs built on them live in :mod:`sim.training.compression`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.kernels.arguments import _INT32, _INT64, _array, _disjoint, _int, _out, _pair
from sim.kernels.calls import _call


def topk_ef(g: np.ndarray, residual: np.ndarray, k: int,
            scratch: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-k with error feedback: (indices ascending (k,), values (k,)); updates residual.

    acc = g + residual; the k largest |acc| (ties: lowest index) are sent and the rest
    stays in residual, so scatter(indices, values) + residual == acc exactly.
    """
    residual, g = _pair("residual", residual, "g", g)
    n = residual.size
    k = _int("k", k, 0, n)
    scratch = _out("scratch", scratch, g.dtype, (n,), {"g": g, "residual": residual})
    idx, val = np.empty(k, np.int64), np.empty(k, g.dtype)
    _call("topk_ef", g.dtype, g, residual, n, k, idx, val, scratch)
    return idx, val


def _qsgd_buckets(bucket: Any, n: int) -> tuple[int, int]:
    """(entries per bucket, number of buckets) for n entries; bucket None is one bucket."""
    bucket = max(n, 1) if bucket is None else _int("bucket", bucket, 1, 2**63 - 1)
    return bucket, -(-n // bucket)


def qsgd_quantize(v: np.ndarray, s: int, seed: int, out: np.ndarray | None = None, *,
                  bucket: int | None = None,
                  norms: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """QSGD with s levels in buckets of ``bucket`` consecutive entries of v (the last may be
    shorter; None: one bucket, the whole vector): (int32 levels in [-s, s] shaped like v,
    each bucket's L2 norm as an array (ceil(v.size / bucket),) of v's dtype), reproducible
    per seed; ``out`` and ``norms`` receive them when given. Entry i in bucket b stands for
    norms[b] * levels[i] / s, unbiased (Alistarh et al. 2017)."""
    v = _array("v", v)
    bucket, count = _qsgd_buckets(bucket, v.size)
    levels = _out("out", out, _INT32, v.shape, {"v": v})
    norms = _out("norms", norms, v.dtype, (count,), {"v": v, "out": levels})
    _call("qsgd_quantize", v.dtype, v, v.size, _int("s", s, 1, 2**30), bucket,
          _int("seed", seed, 0, 2**64 - 1), levels, norms)
    return levels, norms


def qsgd_dequantize(levels: np.ndarray, norms: np.ndarray, s: int,
                    out: np.ndarray | None = None, *, bucket: int | None = None) -> np.ndarray:
    """(norms[b] / s) * levels in each bucket b of ``bucket`` entries (None: one bucket), as
    an array of the norms' dtype (or into ``out``); levels, norms and bucket as
    :func:`qsgd_quantize` takes and returns them."""
    levels = _array("levels", levels, _INT32)
    bucket, count = _qsgd_buckets(bucket, levels.size)
    norms = _array("norms", norms, shape=(count,))
    out = _out("out", out, norms.dtype, levels.shape, {"levels": levels, "norms": norms})
    s = _int("s", s, 1, 2**30)
    try:
        _call("qsgd_dequantize", norms.dtype, levels, levels.size, s, bucket, norms, out)
    except ValueError:  # sizes, s and bucket are checked above: only a norm is left
        raise ValueError("norms: expected finite norms >= 0 (checked before any write)") \
            from None
    return out


def scatter_add(idx: np.ndarray, val: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out.flat[idx] += val (indices checked first: nothing is written when one is bad)."""
    out = _array("out", out, writable=True)
    idx = _array("idx", idx, _INT64)
    if idx.ndim != 1:
        raise ValueError(f"idx: expected a 1-D array, got shape {idx.shape}")
    val = _array("val", val, out.dtype, idx.shape)
    _disjoint("idx", idx, "out", out)
    _disjoint("val", val, "out", out)
    _call("scatter_add", out.dtype, idx, val, idx.size, out, out.size)
    return out
