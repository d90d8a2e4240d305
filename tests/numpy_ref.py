"""numpy references for the kernel tests, computed in float64 from the inputs the kernel saw."""

from __future__ import annotations

import numpy as np


def tol(dtype, scale: float = 1.0) -> dict:
    """assert_allclose tolerances; ``scale`` is the size of the terms that were summed."""
    if np.dtype(dtype) == np.float32:
        return {"rtol": 2e-5, "atol": 2e-5 * scale}
    return {"rtol": 1e-11, "atol": 1e-12 * scale}


def wide(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float64)


def logreg_ref(X, y, w, l2):
    X, y, w = wide(X), wide(y), wide(w)
    z = X @ w
    loss = np.mean(np.logaddexp(0.0, z) - y * z) + 0.5 * l2 * w @ w
    grad = X.T @ (1.0 / (1.0 + np.exp(-z)) - y) / len(y) + l2 * w
    return loss, grad


def softmax_rows(Z):
    Z = Z - Z.max(axis=1, keepdims=True)
    P = np.exp(Z)
    return P / P.sum(axis=1, keepdims=True)


def xent_ref(Z, labels):
    Z = wide(Z)
    n = len(labels)
    m = Z.max(axis=1)
    lse = m + np.log(np.exp(Z - m[:, None]).sum(axis=1))
    loss = np.mean(lse - Z[np.arange(n), labels])
    P = softmax_rows(Z)
    P[np.arange(n), labels] -= 1.0
    return loss, P / n


def softmax_ref(X, labels, W, l2):
    X, W = wide(X), wide(W)
    loss, delta = xent_ref(X @ W.T, labels)
    return loss + 0.5 * l2 * np.sum(W * W), delta.T @ X + l2 * W


def random_csr(rng, n, d, density, dtype, duplicates=False):
    """CSR rows (sorted, unique column ids unless ``duplicates``) and the dense matrix."""
    indptr, indices, data = [0], [], []
    for _ in range(n):
        cols = np.flatnonzero(rng.random(d) < density)
        if duplicates and len(cols):
            cols = np.sort(np.concatenate([cols, rng.choice(cols, 2)]))
        indices.extend(cols)
        data.extend(rng.standard_normal(len(cols)))
        indptr.append(len(indices))
    indptr = np.array(indptr, np.int64)
    indices = np.array(indices, np.int64)
    data = np.array(data, dtype)
    dense = np.zeros((n, d))
    rows = np.repeat(np.arange(n), np.diff(indptr))
    np.add.at(dense, (rows, indices), wide(data))
    return indptr, indices, data, dense


EPS = 1e-6


def central_diff(f, params: list[np.ndarray]) -> list[np.ndarray]:
    """d f / d p for every entry of every array in ``params`` (perturbed in place)."""
    grads = []
    for p in params:
        g = np.empty_like(p)
        flat, gflat = p.reshape(-1), g.reshape(-1)
        for j in range(flat.size):
            keep = flat[j]
            flat[j] = keep + EPS
            up = f()
            flat[j] = keep - EPS
            down = f()
            flat[j] = keep
            gflat[j] = (up - down) / (2 * EPS)
        grads.append(g)
    return grads
