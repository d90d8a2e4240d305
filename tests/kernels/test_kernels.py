"""Every C kernel against a numpy reference, for float32 and float64.

References are computed in float64 from the very inputs the kernel saw (float32 inputs are
widened), so the float32 tolerance only has to cover the kernel's own rounding.
Shapes mix sizes below, at and just past the kernels' vector/row-block widths so that both
the vectorised bodies and the scalar tails run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numpy_ref import logreg_ref, random_csr, softmax_ref, tol, wide, xent_ref

from sim import kernels as K

DTYPES = [np.float32, np.float64]
SHAPES = [(1, 1), (3, 5), (13, 37), (64, 100), (17, 300), (203, 19)]


# ---- 1-2. logistic and softmax regression ------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,d", SHAPES)
@pytest.mark.parametrize("l2", [0.0, 0.3])
def test_logreg_matches_numpy(dtype, n, d, l2):
    rng = np.random.default_rng(n * 1000 + d)
    X = rng.standard_normal((n, d)).astype(dtype)
    y = rng.integers(0, 2, n).astype(dtype)
    w = (rng.standard_normal(d) / np.sqrt(d)).astype(dtype)
    loss, grad = K.logreg_loss_grad(X, y, w, l2=l2)
    ref_loss, ref_grad = logreg_ref(X, y, w, l2)
    assert grad.dtype == dtype and grad.shape == (d,)
    np.testing.assert_allclose(loss, ref_loss, **tol(dtype))
    np.testing.assert_allclose(grad, ref_grad, **tol(dtype, 1.0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_logreg_extreme_margins_stay_finite(dtype):
    # |z| = 200 overflows exp() in a naive sigmoid/softplus (float32 overflows at 88)
    X = np.array([[200.0], [-200.0], [200.0], [-200.0]], dtype)
    y = np.array([1, 0, 0, 1], dtype)
    w = np.ones(1, dtype)
    loss, grad = K.logreg_loss_grad(X, y, w)
    ref_loss, ref_grad = logreg_ref(X, y, w, 0.0)
    assert np.isfinite(loss) and np.isfinite(grad).all()
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,d", SHAPES)
@pytest.mark.parametrize("k,l2", [(2, 0.0), (5, 0.1), (10, 0.0)])
def test_softmax_matches_numpy(dtype, n, d, k, l2):
    rng = np.random.default_rng(n * 1000 + d + k)
    X = rng.standard_normal((n, d)).astype(dtype)
    labels = rng.integers(0, k, n).astype(np.int32)
    W = (rng.standard_normal((k, d)) / np.sqrt(d)).astype(dtype)
    loss, grad = K.softmax_loss_grad(X, labels, W, l2=l2)
    ref_loss, ref_grad = softmax_ref(X, labels, W, l2)
    assert grad.dtype == dtype and grad.shape == (k, d)
    np.testing.assert_allclose(loss, ref_loss, **tol(dtype))
    np.testing.assert_allclose(grad, ref_grad, **tol(dtype))


# ---- 3. MLP layers -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,din", SHAPES)
@pytest.mark.parametrize("dout", [1, 7, 40])
@pytest.mark.parametrize("relu", [False, True])
def test_dense_forward_matches_numpy(dtype, n, din, dout, relu):
    rng = np.random.default_rng(n + din + dout)
    x = rng.standard_normal((n, din)).astype(dtype)
    W = rng.standard_normal((dout, din)).astype(dtype)
    b = rng.standard_normal(dout).astype(dtype)
    out = K.dense_forward(x, W, b, relu)
    ref = wide(x) @ wide(W).T + wide(b)
    if relu:
        ref = np.maximum(ref, 0.0)
        assert (out >= 0).all()
        assert (out[ref == 0] == 0).all()
    assert out.dtype == dtype and out.shape == (n, dout)
    np.testing.assert_allclose(out, ref, **tol(dtype, np.sqrt(din)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", [(1, 2), (7, 3), (64, 10), (5, 100)])
def test_softmax_xent_matches_numpy(dtype, n, k):
    rng = np.random.default_rng(n * k)
    logits = (3 * rng.standard_normal((n, k))).astype(dtype)
    labels = rng.integers(0, k, n).astype(np.int32)
    loss, delta = K.softmax_xent(logits, labels)
    ref_loss, ref_delta = xent_ref(logits, labels)
    np.testing.assert_allclose(loss, ref_loss, **tol(dtype))
    np.testing.assert_allclose(delta, ref_delta, **tol(dtype, 1.0 / n))
    # each row of softmax - onehot sums to zero
    np.testing.assert_allclose(delta.sum(axis=1), 0.0, atol=tol(dtype)["rtol"])


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_xent_large_logits_stay_finite(dtype):
    logits = np.array([[1000.0, 0.0, -1000.0], [0.0, 1000.0, 999.0]], dtype)
    labels = np.array([0, 2], np.int32)
    loss, delta = K.softmax_xent(logits, labels)
    ref_loss, ref_delta = xent_ref(logits, labels)
    # lse(z) - z_label cancels: the absolute error scales with |z| * eps
    np.testing.assert_allclose(loss, ref_loss, rtol=0, atol=4 * 1000 * np.finfo(dtype).eps)
    np.testing.assert_allclose(delta, ref_delta, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,din", SHAPES)
@pytest.mark.parametrize("dout", [1, 7, 40])
@pytest.mark.parametrize("relu_in", [False, True])
def test_dense_backward_matches_numpy(dtype, n, din, dout, relu_in):
    rng = np.random.default_rng(7 * n + din + dout)
    x = rng.standard_normal((n, din)).astype(dtype)
    if relu_in:  # x came out of a ReLU: about half exact zeros
        x = np.maximum(x, 0)
    delta = rng.standard_normal((n, dout)).astype(dtype)
    W = rng.standard_normal((dout, din)).astype(dtype)
    dW, db, d_in = K.dense_backward(x, delta, W, relu_in)
    np.testing.assert_allclose(dW, wide(delta).T @ wide(x), **tol(dtype, np.sqrt(n)))
    np.testing.assert_allclose(db, wide(delta).sum(axis=0), **tol(dtype, np.sqrt(n)))
    ref_in = wide(delta) @ wide(W)
    if relu_in:
        ref_in = ref_in * (x > 0)
        assert (d_in[x <= 0] == 0).all()
    np.testing.assert_allclose(d_in, ref_in, **tol(dtype, np.sqrt(dout)))

    dW2, db2, none = K.dense_backward(x, delta, W, relu_in, input_grad=False)
    assert none is None
    np.testing.assert_array_equal(dW2, dW)
    np.testing.assert_array_equal(db2, db)


# ---- 4. sparse logistic regression --------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,d,density", [(1, 5, 0.5), (8, 50, 0.1), (40, 200, 0.03),
                                         (6, 30, 0.0)])
@pytest.mark.parametrize("duplicates", [False, True])
def test_sparse_logreg_matches_dense(dtype, n, d, density, duplicates):
    rng = np.random.default_rng(n + d)
    indptr, indices, data, X = random_csr(rng, n, d, density, dtype, duplicates)
    y = rng.integers(0, 2, n).astype(dtype)
    w = rng.standard_normal(d).astype(dtype)
    ws = K.SparseWorkspace(d, dtype)
    loss, idx, val = K.sparse_logreg_grad(indptr, indices, data, y, w, workspace=ws)
    ref_loss, ref_grad = logreg_ref(X, y, w, 0.0)

    touched = np.unique(indices)
    np.testing.assert_array_equal(idx, touched)  # sorted, unique, exactly the touched ids
    assert val.dtype == dtype and idx.dtype == np.int64
    np.testing.assert_allclose(loss, ref_loss, **tol(dtype))
    np.testing.assert_allclose(val, ref_grad[touched], **tol(dtype))
    untouched = np.setdiff1d(np.arange(d), touched)
    assert (ref_grad[untouched] == 0).all()  # the dense gradient lives on touched ids only
    assert not ws.acc.any() and not ws.mark.any()  # scratch handed back all zero

    # the workspace is reusable, and l2 applies lazily to the touched features only
    l2 = 0.25
    loss2, idx2, val2 = K.sparse_logreg_grad(indptr, indices, data, y, w, l2=l2, workspace=ws)
    np.testing.assert_array_equal(idx2, touched)
    wt = wide(w)[touched]
    np.testing.assert_allclose(val2, ref_grad[touched] + l2 * wt, **tol(dtype))
    np.testing.assert_allclose(loss2, ref_loss + 0.5 * l2 * wt @ wt, **tol(dtype))
    assert not ws.acc.any() and not ws.mark.any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_sparse_workspace_stays_zero_after_errors(dtype):
    rng = np.random.default_rng(3)
    indptr, indices, data, _ = random_csr(rng, 5, 20, 0.3, dtype)
    y, w = np.ones(5, dtype), np.ones(20, dtype)
    ws = K.SparseWorkspace(20, dtype)
    bad_data = data.copy()
    bad_data[0] = np.nan
    with pytest.raises(K.NonFiniteError):
        K.sparse_logreg_grad(indptr, indices, bad_data, y, w, workspace=ws)
    assert not ws.acc.any() and not ws.mark.any()
    bad_idx = indices.copy()
    bad_idx[-1] = 20
    with pytest.raises(ValueError):
        K.sparse_logreg_grad(indptr, bad_idx, data, y, w, workspace=ws)
    assert not ws.acc.any() and not ws.mark.any()
    loss, idx, val = K.sparse_logreg_grad(indptr, indices, data, y, w, workspace=ws)
    loss2, idx2, val2 = K.sparse_logreg_grad(indptr, indices, data, y, w)
    assert loss == loss2
    np.testing.assert_array_equal(idx, idx2)
    np.testing.assert_array_equal(val, val2)


# ---- 5. vector ops -----------------------------------------------------------------------

VEC_SIZES = [1, 7, 33, 1000, 4099]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", VEC_SIZES)
def test_sum_into_axpy_scale_copy(dtype, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(dtype)
    y0 = rng.standard_normal(n).astype(dtype)
    # elementwise ops round exactly like numpy's (one IEEE op per element, no contraction)
    y = y0.copy()
    assert K.sum_into(y, x) is y
    np.testing.assert_array_equal(y, y0 + x)
    y = y0.copy()
    assert K.axpy(-0.75, x, y) is y
    np.testing.assert_allclose(y, wide(y0) - 0.75 * wide(x), **tol(dtype, 2.0))
    y = y0.copy()
    assert K.scale(2.5, y) is y
    np.testing.assert_allclose(y, wide(y0) * 2.5, **tol(dtype))
    y = y0.copy()
    assert K.copy(y, x) is y
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_vector_ops_take_any_shape(dtype):
    x = np.arange(12, dtype=dtype).reshape(3, 4)
    y = np.ones((3, 4), dtype)
    K.sum_into(y, x)
    np.testing.assert_array_equal(y, x + 1)
    K.scale(0.5, y)
    np.testing.assert_array_equal(y, (x + 1) / 2)


def sgd_reference(w, grads, lr, momentum, weight_decay):
    """torch.optim.SGD semantics (dampening 0, no Nesterov), step by step in float64."""
    w = wide(w).copy()
    buf = None
    for g in grads:
        d_p = wide(g) + weight_decay * w
        if momentum != 0:
            buf = d_p.copy() if buf is None else momentum * buf + d_p
            d_p = buf
        w = w - lr * d_p
    return w


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.0, 0.01), (0.9, 0.0),
                                                   (0.9, 5e-4)])
@pytest.mark.parametrize("n", [1, 37, 1000])
def test_sgd_update_matches_pytorch_semantics(dtype, momentum, weight_decay, n):
    rng = np.random.default_rng(n)
    w0 = rng.standard_normal(n).astype(dtype)
    grads = [rng.standard_normal(n).astype(dtype) for _ in range(6)]
    w = w0.copy()
    v = np.zeros(n, dtype) if momentum else None
    for g in grads:
        assert K.sgd_update(w, g, v, lr=0.1, momentum=momentum, weight_decay=weight_decay) is w
    ref = sgd_reference(w0, grads, 0.1, momentum, weight_decay)
    np.testing.assert_allclose(w, ref, **tol(dtype, 4.0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_sgd_update_without_momentum_leaves_buffer_alone(dtype):
    w, g = np.ones(5, dtype), np.full(5, 2.0, dtype)
    v = np.full(5, 7.0, dtype)
    K.sgd_update(w, g, v, lr=0.5)
    np.testing.assert_array_equal(v, 7.0)
    np.testing.assert_array_equal(w, 0.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 3, 4, 5, 8])
@pytest.mark.parametrize("n", [1, 33, 2048, 5000])
def test_average(dtype, k, n):
    rng = np.random.default_rng(k * n)
    bufs = [rng.standard_normal(n).astype(dtype) for _ in range(k)]
    before = [b.copy() for b in bufs]
    out = K.average(bufs)
    ref = np.zeros(n)
    for b in bufs:  # index order, as documented
        ref += wide(b)
    np.testing.assert_allclose(out, ref / k, **tol(dtype, 2.0))
    for b, b0 in zip(bufs, before, strict=True):
        np.testing.assert_array_equal(b, b0)  # inputs untouched
    if k == 1:
        np.testing.assert_array_equal(out, bufs[0])


# ---- 7. matrix-vector ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,density", [(1, 1, 1.0), (20, 37, 0.2), (100, 300, 0.01),
                                         (9, 40, 0.0)])
def test_csr_and_dense_matvec(dtype, m, n, density):
    rng = np.random.default_rng(m + n)
    indptr, indices, data, A = random_csr(rng, m, n, density, dtype)
    x = rng.standard_normal(n).astype(dtype)
    ref = A @ wide(x)
    y = K.csr_matvec(indptr, indices, data, x)
    np.testing.assert_allclose(y, ref, **tol(dtype, np.sqrt(n)))
    y_dense = K.dense_matvec(A.astype(dtype), x)
    np.testing.assert_allclose(y_dense, ref, **tol(dtype, np.sqrt(n)))
    assert y.dtype == y_dense.dtype == dtype


# k: below, at and past the register chunks (VL = 8 or 16 elements, up to 4 vectors per
# pass) and the row-in-L1 path (from 16 vectors: 128 float64, 256 float32)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,density", [(1, 1, 1.0), (20, 37, 0.2), (33, 300, 0.01),
                                         (9, 40, 0.0)])
@pytest.mark.parametrize("k", [1, 3, 16, 40, 64, 129, 300])
def test_csr_matmat_matches_numpy(dtype, m, n, density, k):
    rng = np.random.default_rng(m + n + k)
    indptr, indices, data, A = random_csr(rng, m, n, density, dtype, duplicates=True)
    B = rng.standard_normal((n, k)).astype(dtype)
    Y = K.csr_matmat(indptr, indices, data, B)
    assert Y.dtype == dtype and Y.shape == (m, k)
    np.testing.assert_allclose(Y, A @ wide(B), **tol(dtype, np.sqrt(n)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_csr_matmat_columns_do_not_depend_on_k(dtype):
    """Every element is the same sum in the same order (the row's non-zeros, from 0),
    whichever path the width k takes (register chunks or a row in L1): bitwise equal."""
    rng = np.random.default_rng(1)
    indptr, indices, data, _ = random_csr(rng, 25, 60, 0.3, dtype)
    B = rng.standard_normal((60, 300)).astype(dtype)
    wide = K.csr_matmat(indptr, indices, data, B)
    for k in (1, 5, 8, 16, 40, 64, 100, 129):
        narrow = K.csr_matmat(indptr, indices, data, np.ascontiguousarray(B[:, :k]))
        np.testing.assert_array_equal(narrow, wide[:, :k], err_msg=f"k={k}")
    x = np.ascontiguousarray(B[:, 0])
    np.testing.assert_allclose(wide[:, 0], K.csr_matvec(indptr, indices, data, x),
                               **tol(dtype, np.sqrt(60)))


# ---- BLAS: threads, and the library found without LD_LIBRARY_PATH ---------------------------

def test_blas_threads_default_to_one_and_can_be_set():
    assert K.blas_threads() == 1  # SGD_BLAS_THREADS unset: one thread, as a simulated worker
    rng = np.random.default_rng(0)
    x, W, b = rng.standard_normal((300, 200)), rng.standard_normal((150, 200)), np.zeros(150)
    one = K.dense_forward(x, W, b, False)
    try:
        K.set_blas_threads(2)
        assert K.blas_threads() == 2
        np.testing.assert_allclose(K.dense_forward(x, W, b, False), one, rtol=1e-12,
                                   atol=1e-12)
    finally:
        K.set_blas_threads(1)
    assert K.blas_threads() == 1


@pytest.mark.parametrize("bad,exc", [(0, ValueError), (-3, ValueError), (1.5, TypeError),
                                     ("2", TypeError), (True, TypeError)])
def test_set_blas_threads_refuses_bad_counts(bad, exc):
    with pytest.raises(exc, match="^n: "):
        K.set_blas_threads(bad)
    assert K.blas_threads() == 1


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parents[2]
    clean = {k: v for k, v in os.environ.items()
             if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "SGD_BLAS_THREADS")}
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, timeout=120, env={**clean, **env})


def test_library_finds_openblas_without_ld_library_path():
    """Both ways in: sim.kernels (which preloads the wheel's OpenBLAS) and sim._native alone
    (its rpath)."""
    for code in ("import sim.kernels as K; print(K.blas_threads())",
                 "import sim._native as n; print(n.lib.sgd_blas_threads() >= 1)"):
        done = _python(code)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() in ("1", "True"), done.stdout


def test_sgd_blas_threads_environment_variable():
    done = _python("import sim.kernels as K; print(K.blas_threads())", SGD_BLAS_THREADS="2")
    assert (done.returncode, done.stdout.strip()) == (0, "2"), done.stderr[-2000:]
    done = _python("import sim.kernels", SGD_BLAS_THREADS="none")
    assert done.returncode != 0 and "SGD_BLAS_THREADS: expected an integer >= 1" in done.stderr
