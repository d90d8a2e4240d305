"""Kernel gradients against central finite differences of the kernel's own loss (float64).

The MLP is assembled from the layer kernels exactly as a worker would: dense_forward with
ReLU hidden layers, a softmax_xent head, then dense_backward from the last layer to the
first, handing delta_in down; every layer's dW and db is checked.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy_ref import central_diff

from sim import kernels as K


def assert_grad_close(analytic, numeric):
    scale = max(1.0, float(np.abs(numeric).max()))
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-7 * scale)


@pytest.mark.parametrize("l2", [0.0, 0.7])
@pytest.mark.parametrize("n,d", [(1, 3), (9, 6), (20, 37)])
def test_logreg_gradient_finite_differences(n, d, l2):
    rng = np.random.default_rng(n * d)
    X = rng.standard_normal((n, d))
    y = rng.integers(0, 2, n).astype(np.float64)
    w = rng.standard_normal(d)
    _, grad = K.logreg_loss_grad(X, y, w, l2=l2)
    (numeric,) = central_diff(lambda: K.logreg_loss_grad(X, y, w, l2=l2)[0], [w])
    assert_grad_close(grad, numeric)


@pytest.mark.parametrize("l2", [0.0, 0.4])
@pytest.mark.parametrize("n,d,k", [(1, 2, 2), (10, 5, 4), (13, 9, 7)])
def test_softmax_gradient_finite_differences(n, d, k, l2):
    rng = np.random.default_rng(n * d * k)
    X = rng.standard_normal((n, d))
    labels = rng.integers(0, k, n).astype(np.int32)
    W = rng.standard_normal((k, d))
    _, grad = K.softmax_loss_grad(X, labels, W, l2=l2)
    (numeric,) = central_diff(lambda: K.softmax_loss_grad(X, labels, W, l2=l2)[0], [W])
    assert_grad_close(grad, numeric)


@pytest.mark.parametrize("n,k", [(1, 2), (6, 5)])
def test_softmax_xent_delta_finite_differences(n, k):
    rng = np.random.default_rng(n + k)
    logits = rng.standard_normal((n, k))
    labels = rng.integers(0, k, n).astype(np.int32)
    _, delta = K.softmax_xent(logits, labels)
    (numeric,) = central_diff(lambda: K.softmax_xent(logits, labels)[0], [logits])
    assert_grad_close(delta, numeric)


def mlp_params(rng, sizes):
    return [(rng.standard_normal((dout, din)) / np.sqrt(din), 0.1 * rng.standard_normal(dout))
            for din, dout in zip(sizes[:-1], sizes[1:], strict=True)]


def mlp_loss_and_grads(params, x, labels):
    """Forward with the layer kernels, then backward one layer at a time."""
    acts = [x]
    for i, (W, b) in enumerate(params):
        hidden = i < len(params) - 1
        acts.append(K.dense_forward(acts[-1], W, b, relu=hidden))
    loss, delta = K.softmax_xent(acts[-1], labels)
    grads = [None] * len(params)
    for i in reversed(range(len(params))):
        W, _ = params[i]
        first = i == 0
        # the input of layer i came out of a ReLU unless it is the data itself
        dW, db, delta = K.dense_backward(acts[i], delta, W, relu_in=not first,
                                         input_grad=not first)
        grads[i] = (dW, db)
    assert delta is None
    return loss, grads


def numpy_mlp_loss(params, x, labels):
    """Independent numpy forward pass (the loss the gradient must belong to)."""
    h = x
    for i, (W, b) in enumerate(params):
        h = h @ W.T + b
        if i < len(params) - 1:
            h = np.maximum(h, 0.0)
    m = h.max(axis=1)
    lse = m + np.log(np.exp(h - m[:, None]).sum(axis=1))
    return float(np.mean(lse - h[np.arange(len(labels)), labels]))


@pytest.mark.parametrize("sizes", [[4, 3], [5, 8, 3], [6, 10, 7, 4]])
def test_mlp_gradients_finite_differences(sizes):
    rng = np.random.default_rng(len(sizes))
    n = 11
    x = rng.standard_normal((n, sizes[0]))
    labels = rng.integers(0, sizes[-1], n).astype(np.int32)
    params = mlp_params(rng, sizes)

    loss, grads = mlp_loss_and_grads(params, x, labels)
    np.testing.assert_allclose(loss, numpy_mlp_loss(params, x, labels), rtol=1e-12)

    # a pre-activation within EPS of the ReLU kink would make the difference meaningless
    h = x
    for W, b in params[:-1]:
        z = h @ W.T + b
        assert np.abs(z).min() > 1e-4
        h = np.maximum(z, 0)

    flat = [a for layer in params for a in layer]
    numeric = central_diff(lambda: numpy_mlp_loss(params, x, labels), flat)
    for layer, (dW, db) in enumerate(grads):
        assert dW.shape == params[layer][0].shape and db.shape == params[layer][1].shape
        assert_grad_close(dW, numeric[2 * layer])
        assert_grad_close(db, numeric[2 * layer + 1])


@pytest.mark.parametrize("k", [1, 3, 20])
def test_csr_matmat_gradients_finite_differences(k):
    """f = sum(G * (A B)) for a fixed G: df/dB = A^T G, and df/d data[p] = G[i] . B[j] for
    the non-zero p = (i, j); the kernel's own products, perturbed entry by entry."""
    rng = np.random.default_rng(k)
    m, n = 6, 9
    rows = [np.sort(rng.choice(n, size=1 + i % 4, replace=False)) for i in range(m)]
    indptr = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    indices = np.concatenate(rows).astype(np.int64)
    data = rng.standard_normal(len(indices))
    B = rng.standard_normal((n, k))
    G = rng.standard_normal((m, k))

    def f():
        return float(np.sum(G * K.csr_matmat(indptr, indices, data, B)))

    A = np.zeros((m, n))
    A[np.repeat(np.arange(m), np.diff(indptr)), indices] = data
    row_of = np.repeat(np.arange(m), np.diff(indptr))
    d_data, d_B = central_diff(f, [data, B])
    assert_grad_close(np.einsum("pk,pk->p", G[row_of], B[indices]), d_data)
    assert_grad_close(A.T @ G, d_B)
