"""Dense kernels: logistic and softmax regression, an MLP's layers, a dense mat-vec.

They call OpenBLAS (threads: :mod:`sim.kernels.blas`). Logistic regression takes a plan
(:mod:`sim.kernels.plans`). The small layers of an MLP try a fast path first (below).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.kernels.arguments import _CDECL, _INT32, _SUFFIX, _array, _ndim, _out, _scalar
from sim.kernels.calls import _FROM_BUFFER, _call, _float_out, _ptr, _raise_for
from sim.kernels.library import ffi, lib
from sim.kernels.plans import _PLAN_OF_SHAPE, LogregPlan, _logreg_plan

# ---- fast paths ------------------------------------------------------------------
#
# The small dense layers of an MLP (batch 32, 64 -> 64) run in a few microseconds, about
# what the checks of sim.kernels.arguments cost. Their wrappers first try a fast path that
# makes every check of the checked path, cheaply: an exact ndarray of a supported dtype
# (``is``, the dtypes numpy creates), shapes compared as tuples, C-contiguity and (outputs)
# writability left to ``ffi.from_buffer``, which refuses a buffer without them, and
# overlaps compared on the pointers themselves (:func:`_clear`). It only accepts: anything
# it cannot accept, it leaves to the checked path, which raises the error naming the
# argument (or accepts what the fast path is stricter about, such as an ndarray subclass
# or an equal dtype object).

_ND = np.ndarray
#: what ffi.from_buffer raises for a buffer it refuses (not contiguous, read-only)
_REFUSED = (ValueError, TypeError, BufferError)


def _by_dtype(name: str) -> dict[np.dtype, tuple[Any, str]]:
    """{dtype: (the C function ``name`` for it, its cffi array declaration)}."""
    return {dt: (getattr(lib, f"{name}_{sfx}"), _CDECL[dt]) for dt, sfx in _SUFFIX.items()}


def _clear(extents: list, p: Any) -> bool:
    """Whether the buffer ``p`` (an ``ffi.from_buffer`` array, non-empty) overlaps none of
    ``extents``, its [start, end) pointer pairs; if so, it joins them.

    Exact, as :func:`_disjoint` is for the non-empty C-contiguous arrays the fast paths
    accept: cffi orders pointers by address, and such an array is every byte of
    [data, data + nbytes). About 0.05 us a pair.
    """
    end = p + len(p)
    for start, stop in extents:
        if p < stop and start < end:
            return False
    extents.append((p, end))
    return True


def _fast_out(out: Any, dt: np.dtype, cd: str, shape: tuple, extents: list) -> tuple | None:
    """(array, pointer) for an output of the fast path: a fresh array when ``out`` is None
    (it overlaps nothing), else ``out`` if it passes every check of :func:`_out`; None
    otherwise."""
    if out is None:
        out = np.empty(shape, dt)
        return out, _FROM_BUFFER(cd, out)
    if type(out) is not _ND or out.dtype is not dt or out.shape != shape:
        return None
    p = _FROM_BUFFER(cd, out, True)  # require_writable: refuses a read-only or strided one
    return (out, p) if _clear(extents, p) else None


# ---- logistic and softmax regression ------------------------------------------------

def logreg_loss_grad(X: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 0.0,
                     out: np.ndarray | None = None, plan: LogregPlan | None = None
                     ) -> tuple[float, np.ndarray]:
    """Binary logistic regression: (mean loss + l2/2|w|^2, gradient (d,)).

    X: (n, d); y: (n,) labels in {0, 1} of X's dtype; w: (d,). ``plan`` (a
    :class:`LogregPlan`) forces a path and blocks; None takes :func:`logreg_plan`'s.
    """
    X = _ndim("X", _array("X", X), 2)
    n, d = X.shape
    y = _array("y", y, X.dtype, (n,))
    w = _array("w", w, X.dtype, (d,))
    grad = _out("out", out, X.dtype, (d,), {"X": X, "y": y, "w": w})
    l2 = _scalar("l2", l2)
    if plan is None:
        plan = _PLAN_OF_SHAPE.get((X.dtype, n, d)) or _logreg_plan(X.dtype, n, d, (X, y, w, l2))
    elif not isinstance(plan, LogregPlan):
        raise TypeError(f"plan: expected a LogregPlan or None, got {type(plan).__name__}")
    scratch = np.empty(n, X.dtype) if plan.path == "blas" else ffi.NULL
    loss = _float_out(X.dtype)
    _call("logreg_loss_grad", X.dtype, X, y, n, d, w, l2, grad, loss, plan.c, scratch)
    return float(loss[0]), grad


def softmax_loss_grad(X: np.ndarray, labels: np.ndarray, W: np.ndarray, l2: float = 0.0,
                      out: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Softmax regression, fused: (mean cross-entropy + l2/2|W|^2, gradient (k, d)).

    X: (n, d); labels: (n,) int32 in [0, k); W: (k, d), one row per class.
    """
    X = _ndim("X", _array("X", X), 2)
    n, d = X.shape
    labels = _array("labels", labels, _INT32, (n,))
    W = _ndim("W", _array("W", W, X.dtype), 2)
    k = W.shape[0]
    if W.shape[1] != d or k < 2:
        raise ValueError(f"W: expected shape (k >= 2, {d}), got {W.shape}")
    grad = _out("out", out, X.dtype, (k, d), {"X": X, "labels": labels, "W": W})
    loss = _float_out(X.dtype)
    scratch = np.empty(min(n, lib.SGD_SOFTMAX_BLOCK) * k, X.dtype)
    _call("softmax_loss_grad", X.dtype, X, labels, n, d, k, W, _scalar("l2", l2), grad, loss,
          scratch)
    return float(loss[0]), grad


# ---- MLP layers ---------------------------------------------------------------------

_DENSE_FORWARD = _by_dtype("dense_forward")


def dense_forward(x: np.ndarray, W: np.ndarray, b: np.ndarray, relu: bool,
                  out: np.ndarray | None = None) -> np.ndarray:
    """One dense layer: act(x W^T + b), x: (n, din), W: (dout, din), b: (dout,) -> (n, dout)."""
    if type(x) is _ND and type(W) is _ND and type(b) is _ND:  # the fast path (see above)
        dt = x.dtype
        entry = _DENSE_FORWARD.get(dt)
        xs, ws = x.shape, W.shape
        if (entry is not None and W.dtype is dt and b.dtype is dt and len(xs) == 2
                and len(ws) == 2 and xs[0] and xs[1] and ws[0] and ws[1] == xs[1]
                and b.shape == (ws[0],)):
            fn, cd = entry
            try:
                px, pw, pb = _FROM_BUFFER(cd, x), _FROM_BUFFER(cd, W), _FROM_BUFFER(cd, b)
                extents = [(px, px + len(px)), (pw, pw + len(pw)), (pb, pb + len(pb))]
                o = _fast_out(out, dt, cd, (xs[0], ws[0]), extents)
            except _REFUSED:
                o = None
            if o is not None:
                status = fn(px, xs[0], xs[1], pw, pb, ws[0], 1 if relu else 0, o[1])
                if status:
                    _raise_for("dense_forward", status)
                return o[0]
    return _dense_forward_checked(x, W, b, relu, out)


def _dense_forward_checked(x: Any, W: Any, b: Any, relu: bool, out: Any) -> np.ndarray:
    x = _ndim("x", _array("x", x), 2)
    n, din = x.shape
    W = _ndim("W", _array("W", W, x.dtype), 2)
    dout = W.shape[0]
    if W.shape[1] != din:
        raise ValueError(f"W: expected shape (dout, {din}), got {W.shape}")
    b = _array("b", b, x.dtype, (dout,))
    out = _out("out", out, x.dtype, (n, dout), {"x": x, "W": W, "b": b})
    _call("dense_forward", x.dtype, x, n, din, W, b, dout, int(bool(relu)), out)
    return out


def softmax_xent(logits: np.ndarray, labels: np.ndarray,
                 out: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Softmax cross-entropy head: (mean loss, d loss / d logits), logits: (n, k)."""
    logits = _ndim("logits", _array("logits", logits), 2)
    n, k = logits.shape
    if k < 2:
        raise ValueError(f"logits: expected at least 2 classes, got shape {logits.shape}")
    labels = _array("labels", labels, _INT32, (n,))
    delta = _out("out", out, logits.dtype, (n, k), {"logits": logits, "labels": labels})
    loss = _float_out(logits.dtype)
    _call("softmax_xent", logits.dtype, logits, labels, n, k, delta, loss)
    return float(loss[0]), delta


_DENSE_BACKWARD = _by_dtype("dense_backward")


def dense_backward(x: np.ndarray, delta: np.ndarray, W: np.ndarray, relu_in: bool,
                   input_grad: bool = True, dW: np.ndarray | None = None,
                   db: np.ndarray | None = None, delta_in: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Backward through one layer: (dW (dout, din), db (dout,), delta_in (n, din) or None).

    delta: (n, dout), gradient w.r.t. this layer's pre-activation; x: (n, din), its input.
    delta_in is the gradient w.r.t. the previous layer's pre-activation (masked by x > 0
    when ``relu_in``); it is skipped when ``input_grad`` is false (the first layer).
    """
    if type(x) is _ND and type(delta) is _ND and type(W) is _ND:  # the fast path (see above)
        dt = x.dtype
        entry = _DENSE_BACKWARD.get(dt)
        xs, ds = x.shape, delta.shape
        if (entry is not None and delta.dtype is dt and W.dtype is dt and len(xs) == 2
                and len(ds) == 2 and xs[0] and xs[1] and ds[1] and ds[0] == xs[0]
                and W.shape == (ds[1], xs[1])):
            fn, cd = entry
            try:
                px, pd, pw = _FROM_BUFFER(cd, x), _FROM_BUFFER(cd, delta), _FROM_BUFFER(cd, W)
                extents = [(px, px + len(px)), (pd, pd + len(pd)), (pw, pw + len(pw))]
                gw = _fast_out(dW, dt, cd, (ds[1], xs[1]), extents)
                gb = gw and _fast_out(db, dt, cd, (ds[1],), extents)
                gi = gb and (_fast_out(delta_in, dt, cd, xs, extents) if input_grad
                             else (None, ffi.NULL))
            except _REFUSED:
                gi = None
            if gi is not None:
                status = fn(px, pd, xs[0], xs[1], ds[1], pw, 1 if relu_in else 0, gw[1], gb[1],
                            gi[1])
                if status:
                    _raise_for("dense_backward", status)
                return gw[0], gb[0], gi[0]
    return _dense_backward_checked(x, delta, W, relu_in, input_grad, dW, db, delta_in)


def _dense_backward_checked(x: Any, delta: Any, W: Any, relu_in: bool, input_grad: bool,
                            dW: Any, db: Any, delta_in: Any
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    x = _ndim("x", _array("x", x), 2)
    n, din = x.shape
    delta = _ndim("delta", _array("delta", delta, x.dtype), 2)
    dout = delta.shape[1]
    if delta.shape[0] != n:
        raise ValueError(f"delta: expected shape ({n}, dout), got {delta.shape}")
    W = _array("W", W, x.dtype, (dout, din))
    inputs = {"x": x, "delta": delta, "W": W}
    dW = _out("dW", dW, x.dtype, (dout, din), inputs)
    db = _out("db", db, x.dtype, (dout,), {**inputs, "dW": dW})
    d_in = (_out("delta_in", delta_in, x.dtype, (n, din), {**inputs, "dW": dW, "db": db})
            if input_grad else None)
    _call("dense_backward", x.dtype, x, delta, n, din, dout, W, int(bool(relu_in)), dW, db,
          ffi.NULL if d_in is None else _ptr(d_in))
    return dW, db, d_in


# ---- matrix-vector --------------------------------------------------------------------

def dense_matvec(A: np.ndarray, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """y = A x for A (m, n) row-major (BLAS gemv); returns y (m,)."""
    A = _ndim("A", _array("A", A), 2)
    m, n = A.shape
    x = _array("x", x, A.dtype, (n,))
    y = _out("out", out, A.dtype, (m,), {"A": A, "x": x})
    _call("dense_matvec", A.dtype, A, m, n, x, y)
    return y
