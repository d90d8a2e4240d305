"""In-place vector kernels: sums, axpy, scaling, copies, the SGD step and averages.

Any shape; the arrays of one call have equal shapes and dtypes and share no memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.kernels.arguments import _array, _disjoint, _out, _pair, _scalar
from sim.kernels.calls import _call, _ptr
from sim.kernels.library import ffi


def sum_into(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """dst += src in place (any shape, equal shapes and dtypes); returns dst."""
    dst, src = _pair("dst", dst, "src", src)
    _call("sum_into", dst.dtype, dst, src, dst.size)
    return dst


def axpy(a: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y += a x in place; returns y."""
    y, x = _pair("y", y, "x", x)
    _call("axpy", y.dtype, _scalar("a", a, -np.inf), x, y, y.size)
    return y


def scale(a: float, x: np.ndarray) -> np.ndarray:
    """x *= a in place; returns x."""
    x = _array("x", x, writable=True)
    _call("scale", x.dtype, _scalar("a", a, -np.inf), x, x.size)
    return x


def copy(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """dst[...] = src; returns dst."""
    dst, src = _pair("dst", dst, "src", src)
    _call("copy", dst.dtype, dst, src, dst.size)
    return dst


def sgd_update(w: np.ndarray, g: np.ndarray, v: np.ndarray | None, lr: float,
               momentum: float = 0.0, weight_decay: float = 0.0) -> np.ndarray:
    """In-place SGD step, PyTorch semantics: v = mu v + (g + wd w); w -= lr v. Returns w.

    v (the momentum buffer) may be None when momentum is 0; given, it shares no memory
    with w or g.
    """
    w, g = _pair("w", w, "g", g)
    momentum = _scalar("momentum", momentum)
    if v is None:
        if momentum != 0:
            raise ValueError("v: a momentum buffer is required when momentum > 0")
        v = w  # never read or written by the kernel when momentum == 0: restrict holds
    else:
        v = _array("v", v, w.dtype, w.shape, writable=True)
        _disjoint("v", v, "w", w)
        _disjoint("v", v, "g", g)
    _call("sgd_update", w.dtype, w, g, v, w.size, _scalar("lr", lr), momentum,
          _scalar("weight_decay", weight_decay))
    return w


def average(bufs: Sequence[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    """Element-wise mean of k equal-shaped buffers, summed in index order."""
    if len(bufs) == 0:
        raise ValueError("bufs: expected at least one buffer")
    first = _array("bufs[0]", bufs[0])
    arrays = [_array(f"bufs[{i}]", b, first.dtype, first.shape) for i, b in enumerate(bufs)]
    out = _out("out", out, first.dtype, first.shape,
               {f"bufs[{i}]": a for i, a in enumerate(arrays)})
    ctype = "float *[]" if first.dtype == np.float32 else "double *[]"
    keep = [_ptr(a) for a in arrays]  # keeps the buffers alive across the call
    _call("average", first.dtype, out, ffi.new(ctype, keep), len(arrays), out.size)
    return out
