"""``out=`` arguments: filled in place (the same object comes back, nothing of its size is
allocated) and checked like every other argument."""

from __future__ import annotations

import numpy as np
import pytest
from numpy_ref import logreg_ref, random_csr, softmax_ref, tol, wide, xent_ref

from sim import kernels as K

DTYPES = [np.float32, np.float64]


def _out_cases(dtype):
    """(name, call(out), reference value) for every kernel with an ``out=`` argument."""
    rng = np.random.default_rng(11)
    n, d, k = 6, 9, 4
    X = rng.standard_normal((n, d)).astype(dtype)
    y = rng.integers(0, 2, n).astype(dtype)
    w = rng.standard_normal(d).astype(dtype)
    labels = rng.integers(0, k, n).astype(np.int32)
    W = rng.standard_normal((k, d)).astype(dtype)
    b = rng.standard_normal(k).astype(dtype)
    logits = rng.standard_normal((n, k)).astype(dtype)
    bufs = [rng.standard_normal(d).astype(dtype) for _ in range(3)]
    indptr, indices, data, A = random_csr(rng, n, d, 0.4, dtype)
    levels = rng.integers(-4, 5, d).astype(np.int32)
    norms = np.array([2.0, 1.0, 4.0], dtype)  # buckets of 4: entries 0-3, 4-7 and 8
    return [
        ("logreg", lambda o: K.logreg_loss_grad(X, y, w, out=o)[1], logreg_ref(X, y, w, 0)[1],
         (d,)),
        ("softmax", lambda o: K.softmax_loss_grad(X, labels, W, out=o)[1],
         softmax_ref(X, labels, W, 0)[1], (k, d)),
        ("dense_forward", lambda o: K.dense_forward(X, W, b, False, out=o),
         wide(X) @ wide(W).T + wide(b), (n, k)),
        ("softmax_xent", lambda o: K.softmax_xent(logits, labels, out=o)[1],
         xent_ref(logits, labels)[1], (n, k)),
        ("average", lambda o: K.average(bufs, out=o), sum(wide(q) for q in bufs) / 3, (d,)),
        ("qsgd_dequantize", lambda o: K.qsgd_dequantize(levels, norms, 4, out=o, bucket=4),
         np.repeat(wide(norms) / 4, 4)[:d] * levels, (d,)),
        ("csr_matvec", lambda o: K.csr_matvec(indptr, indices, data, w, out=o),
         A @ wide(w), (n,)),
        ("csr_matmat", lambda o: K.csr_matmat(indptr, indices, data, W.T.copy(), out=o),
         A @ wide(W).T, (n, k)),
        ("dense_matvec", lambda o: K.dense_matvec(X, w, out=o), wide(X) @ wide(w), (n,)),
    ]


CASE_NAMES = [c[0] for c in _out_cases(np.float64)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASE_NAMES)
def test_out_is_filled_in_place_and_checked(dtype, case):
    name, call, ref, shape = next(c for c in _out_cases(dtype) if c[0] == case)
    out = np.full(shape, np.nan, dtype)
    assert call(out) is out
    np.testing.assert_allclose(out, ref, **tol(dtype, 3.0))
    other = np.float64 if dtype == np.float32 else np.float32
    bad = {
        "wrong dtype": (np.empty(shape, other), TypeError),
        "wrong shape": (np.empty((shape[0] + 1,) + shape[1:], dtype), ValueError),
        "not contiguous": (np.empty((2 * shape[0],) + shape[1:], dtype)[::2], ValueError),
        "list": (np.empty(shape, dtype).tolist(), TypeError),
    }
    readonly = np.empty(shape, dtype)
    readonly.setflags(write=False)
    bad["read-only"] = (readonly, ValueError)
    for why, (o, exc) in bad.items():
        with pytest.raises(exc) as info:
            call(o)
        assert "out" in str(info.value), why


@pytest.mark.parametrize("dtype", DTYPES)
def test_dense_backward_out_arrays_in_place(dtype):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 6)).astype(dtype)
    delta = rng.standard_normal((4, 3)).astype(dtype)
    W = rng.standard_normal((3, 6)).astype(dtype)
    dW, db, d_in = np.empty((3, 6), dtype), np.empty(3, dtype), np.empty((4, 6), dtype)
    got = K.dense_backward(x, delta, W, False, dW=dW, db=db, delta_in=d_in)
    assert got[0] is dW and got[1] is db and got[2] is d_in
    np.testing.assert_allclose(d_in, wide(delta) @ wide(W), **tol(dtype))
    for name, kw in [("dW", {"dW": np.empty((6, 3), dtype)}), ("db", {"db": np.empty(4, dtype)}),
                     ("delta_in", {"delta_in": np.empty((4, 6), np.int64)})]:
        with pytest.raises((TypeError, ValueError), match=name):
            K.dense_backward(x, delta, W, False, **kw)


def test_out_allocates_nothing():
    """With out= the result array is the caller's: no allocation of its size happens."""
    import tracemalloc

    rng = np.random.default_rng(0)
    n = 1 << 18  # 2 MiB of float64
    bufs = [rng.standard_normal(n) for _ in range(3)]
    out = np.empty(n)
    x = rng.standard_normal((4, n // 4))
    W = rng.standard_normal((8, n // 4))
    b = np.zeros(8)
    out2 = np.empty((4, 8))
    A = rng.standard_normal((64, n // 64))
    v = rng.standard_normal(n // 64)
    out3 = np.empty(64)
    K.average(bufs, out=out)  # warm up (cffi type caches)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        K.average(bufs, out=out)
        K.dense_forward(x, W, b, True, out=out2)
        K.dense_matvec(A, v, out=out3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, peak
