"""Embedding-table kernels (Wide & Deep): pooled lookups, their row gradients, and
row-wise Adagrad and SGD steps.

An id or row out of range raises ``ValueError`` naming the argument, before anything is
written; a non-finite result raises :class:`~sim.kernels.calls.NonFiniteError`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.kernels.arguments import _INT64, _array, _disjoint, _int, _ndim, _out, _real
from sim.kernels.calls import _call_indexed


def _bags(ids: Any) -> np.ndarray:
    """ids: (n, k) int64, n, k >= 1 (a bag of k ids per row)."""
    return _ndim("ids", _array("ids", ids, _INT64), 2)


def embedding_bag_forward(table: np.ndarray, ids: np.ndarray, mean: bool,
                          out: np.ndarray | None = None) -> np.ndarray:
    """Pooled rows of an embedding table: out[i] = the sum over j of table[ids[i, j]] (added
    in j order), divided by k when ``mean``; returns out (n, D).

    table: (V, D) float32 or float64; ids: (n, k) int64 in [0, V), repeats allowed (a bag of
    k ids per row). An id out of range: ValueError naming ids, before anything is written.
    """
    table = _ndim("table", _array("table", table), 2)
    V, D = table.shape
    ids = _bags(ids)
    n, k = ids.shape
    out = _out("out", out, table.dtype, (n, D), {"table": table, "ids": ids})
    _call_indexed("embedding_bag_forward", table.dtype, "ids", V, table, V, D, ids, n, k,
                  1 if mean else 0, out)
    return out


def embedding_bag_backward(ids: np.ndarray, grad_out: np.ndarray, mean: bool,
                           inverse: np.ndarray, unique_count: int,
                           out: np.ndarray | None = None) -> np.ndarray:
    """Row gradients of :func:`embedding_bag_forward` on the unique ids: out (u, D), zeroed,
    then out[inverse[i k + j]] += grad_out[i] (divided by k when ``mean``), in (i, j) order.

    ids: (n, k) int64, the forward's (only its shape is used); grad_out: (n, D) float32 or
    float64; (unique, inverse) = np.unique(ids, return_inverse=True): inverse (n * k,) or
    (n, k) (numpy 2 gives the latter) int64 in [0, u), unique_count u = len(unique) in
    [1, n * k]. An inverse entry out of range: ValueError naming inverse, out untouched.
    """
    ids = _bags(ids)
    n, k = ids.shape
    grad_out = _ndim("grad_out", _array("grad_out", grad_out), 2)
    if grad_out.shape[0] != n:
        raise ValueError(f"grad_out: expected shape ({n}, D), got {grad_out.shape}")
    D = grad_out.shape[1]
    inverse = _array("inverse", inverse, _INT64)
    if inverse.shape not in ((n * k,), (n, k)):
        raise ValueError(f"inverse: expected shape ({n * k},) or ({n}, {k}), "
                         f"got {inverse.shape}")
    u = _int("unique_count", unique_count, 1, n * k)
    out = _out("out", out, grad_out.dtype, (u, D),
               {"ids": ids, "grad_out": grad_out, "inverse": inverse})
    _call_indexed("embedding_bag_backward", grad_out.dtype, "inverse", u, inverse, n, k,
                  grad_out, D, 1 if mean else 0, u, out)
    return out


def _row_grads(table: np.ndarray, rows: Any, grads: Any,
               written: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """rows (u,) int64 (u may be 0) and grads (u, D) of table's dtype, sharing no memory with
    the arrays the step writes."""
    rows = _array("rows", rows, _INT64)
    if rows.ndim != 1:
        raise ValueError(f"rows: expected a 1-D array, got shape {rows.shape}")
    grads = _array("grads", grads, table.dtype, (len(rows), table.shape[1]))
    for name, a in written.items():
        _disjoint("rows", rows, name, a)
        _disjoint("grads", grads, name, a)
    return rows, grads


def adagrad_rows(table: np.ndarray, accum: np.ndarray, rows: np.ndarray, grads: np.ndarray,
                 lr: float, eps: float) -> np.ndarray:
    """Adagrad on the listed rows, TensorFlow's form, in place; returns table. For r =
    rows[q], g = grads[q]: accum[r] += g * g; table[r] -= lr * g / (sqrt(accum[r]) + eps).

    table, accum: (V, D) float32 or float64 (TensorFlow's initial_accumulator_value lives in
    accum); rows: (u,) int64 in [0, V), distinct (not checked: a repeated row is stepped
    twice in turn); grads: (u, D); lr, eps >= 0. The dense step is rows = arange(V): the
    same bits on every row. A row out of range: ValueError naming rows, nothing written. A
    non-finite table or accum (0 / 0 too: g = 0 with accum = eps = 0): NonFiniteError.
    """
    table = _ndim("table", _array("table", table, writable=True), 2)
    V, D = table.shape
    accum = _array("accum", accum, table.dtype, (V, D), writable=True)
    _disjoint("accum", accum, "table", table)
    rows, grads = _row_grads(table, rows, grads, {"table": table, "accum": accum})
    _call_indexed("adagrad_rows", table.dtype, "rows", V, table, accum, V, D, rows, len(rows),
                  grads, _real("lr", lr, table.dtype), _real("eps", eps, table.dtype))
    return table


def sgd_rows(table: np.ndarray, rows: np.ndarray, grads: np.ndarray, lr: float) -> np.ndarray:
    """SGD on the listed rows in place: table[rows[q]] -= lr * grads[q]; returns table.

    table: (V, D) float32 or float64; rows: (u,) int64 in [0, V), distinct; grads: (u, D);
    lr >= 0. A row out of range: ValueError naming rows, nothing written; a non-finite
    result: NonFiniteError.
    """
    table = _ndim("table", _array("table", table, writable=True), 2)
    V, D = table.shape
    rows, grads = _row_grads(table, rows, grads, {"table": table})
    _call_indexed("sgd_rows", table.dtype, "rows", V, table, V, D, rows, len(rows), grads,
                  _real("lr", lr, table.dtype))
    return table
