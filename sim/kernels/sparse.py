"""Sparse (CSR) kernels: logistic regression on sparse rows, sparse mat-vec and mat-mat.

Row order and index range are checked in C: a bad index or row pointer raises
``ValueError`` before anything is written.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.kernels.arguments import _UINT64, _array, _csr, _disjoint, _int, _ndim, _out, _scalar
from sim.kernels.calls import _call, _float_out
from sim.kernels.library import ffi


class SparseWorkspace:
    """Scratch for :func:`sparse_logreg_grad` over d features; reusable, returned all zero."""

    def __init__(self, d: int, dtype: Any = np.float64) -> None:
        self.acc = np.zeros(_int("d", d, 1, 2**62), np.dtype(dtype))
        self.mark = np.zeros((d + 63) // 64, np.uint64)  # bitmap of touched features


def sparse_logreg_grad(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
                       y: np.ndarray, w: np.ndarray, l2: float = 0.0,
                       workspace: SparseWorkspace | None = None
                       ) -> tuple[float, np.ndarray, np.ndarray]:
    """Logistic regression on CSR rows: (loss, feature ids (sorted), gradient values).

    Only touched features appear; l2 applies to them only (lazy regularisation).
    indptr: (n+1,) int64; indices: (nnz,) int64 in [0, d); data: (nnz,); y: (n,); w: (d,).
    """
    indptr, indices, data = _csr(indptr, indices, data)
    n, dtype = len(indptr) - 1, data.dtype
    y = _array("y", y, dtype, (n,))
    w = _ndim("w", _array("w", w, dtype), 1)
    d = len(w)
    ws = workspace if workspace is not None else SparseWorkspace(d, dtype)
    acc = _array("workspace.acc", ws.acc, dtype, (d,), writable=True)
    mark = _array("workspace.mark", ws.mark, _UINT64, ((d + 63) // 64,), writable=True)
    for other, a in {"indptr": indptr, "indices": indices, "data": data, "y": y, "w": w}.items():
        _disjoint("workspace.acc", acc, other, a)
        _disjoint("workspace.mark", mark, other, a)
    _disjoint("workspace.mark", mark, "workspace.acc", acc)
    out_idx = np.empty(len(indices), np.int64)
    out_val = np.empty(len(indices), dtype)
    count, loss = ffi.new("int64_t *"), _float_out(dtype)
    _call("sparse_logreg_grad", dtype, indptr, indices, data, n, d, y, w, _scalar("l2", l2),
          out_idx, out_val, count, loss, ws.acc, ws.mark)
    return float(loss[0]), out_idx[:count[0]], out_val[:count[0]]


def csr_matvec(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, x: np.ndarray,
               out: np.ndarray | None = None) -> np.ndarray:
    """y = A x for A in CSR with len(x) columns; returns y (m,)."""
    indptr, indices, data = _csr(indptr, indices, data)
    x = _ndim("x", _array("x", x, data.dtype), 1)
    m = len(indptr) - 1
    y = _out("out", out, data.dtype, (m,),
             {"indptr": indptr, "indices": indices, "data": data, "x": x})
    _call("csr_matvec", data.dtype, indptr, indices, data, m, len(x), x, y)
    return y


def csr_matmat(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, B: np.ndarray,
               out: np.ndarray | None = None) -> np.ndarray:
    """Y = A B for A in CSR with B.shape[0] columns and B (n, k) row-major; returns Y (m, k).

    Bad indices or row pointer: ValueError, raised before anything is written."""
    indptr, indices, data = _csr(indptr, indices, data)
    B = _ndim("B", _array("B", B, data.dtype), 2)
    m, (n, k) = len(indptr) - 1, B.shape
    Y = _out("out", out, data.dtype, (m, k),
             {"indptr": indptr, "indices": indices, "data": data, "B": B})
    _call("csr_matmat", data.dtype, indptr, indices, data, m, n, B, k, Y)
    return Y
