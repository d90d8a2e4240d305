"""The model interface (sim/workloads/model_base.py) on a model written here: what the base
class derives from a subclass's layers, loss and predictions."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sim.workloads.model_base import Layer, Model
from sim.workloads.models import make_model


class TwoLayerLinear(Model):
    """Scores X @ A @ B (no nonlinearity), squared loss against one-hot labels: a model
    small enough to check by hand, with a gradient numpy computes."""

    name = "two-layer-linear"

    def __init__(self, inputs: int, hidden: int, classes: int) -> None:
        self.shape = (inputs, hidden, classes)
        a, b = inputs * hidden, hidden * classes
        self.layers = [Layer("a", slice(0, a), 2.0 * a, 4.0 * a, (hidden, inputs)),
                       Layer("b", slice(a, a + b), 2.0 * b, 4.0 * b, (classes, hidden))]

    def _split(self, params):
        i, h, c = self.shape
        return params[:i * h].reshape(i, h), params[i * h:].reshape(h, c)

    def loss_grad(self, params, X, y, out=None):
        A, B = self._split(params)
        hidden = X @ A
        diff = hidden @ B - np.eye(self.shape[2])[y]
        loss = float(0.5 * np.mean(np.sum(diff * diff, axis=1)))
        dB = hidden.T @ diff / len(X)
        dA = X.T @ (diff @ B.T) / len(X)
        grad = np.concatenate([dA.ravel(), dB.ravel()])
        if out is not None:
            out[:] = grad
            grad = out
        return loss, grad

    def predict(self, params, X):
        A, B = self._split(params)
        return np.argmax(X @ A @ B, axis=1).astype(np.int32)


def test_size_and_flops_come_from_the_layers():
    model = TwoLayerLinear(4, 3, 2)
    assert model.size == 4 * 3 + 3 * 2
    # per sample: forward 2 x weights, backward 4 x weights, summed over layers
    assert model.flops(5) == 5 * 6 * (12 + 6)
    assert np.array_equal(model.init(np.random.default_rng(0)), np.zeros(18))


def test_labels_are_class_ids_unless_the_model_is_binary():
    assert TwoLayerLinear(2, 2, 2).label_dtype == np.dtype(np.int32)
    assert make_model("logreg", 4, 2).label_dtype == np.dtype(np.float64)


def test_a_layer_is_frozen_and_dense_by_default():
    layer = Layer("w", slice(0, 6), 12.0, 24.0)
    assert layer.shape is None and layer.bias is False and layer.lookups == 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        layer.name = "v"


def test_backward_layers_yield_every_layer_last_first_with_the_gradient_ready():
    rng = np.random.default_rng(1)
    model = TwoLayerLinear(4, 3, 2)
    params = rng.normal(size=model.size)
    X, y = rng.normal(size=(6, 4)), rng.integers(0, 2, 6)
    out = np.full(model.size, np.nan)
    loss, grad = model.loss_grad(params, X, y)
    seen = []
    for got_loss, index in model.backward_layers(params, X, y, out):
        layer = model.layers[index]
        assert np.array_equal(out[layer.params], grad[layer.params])  # ready when yielded
        assert got_loss == loss
        seen.append(index)
    assert seen == [1, 0]


def test_evaluate_is_the_mean_loss_and_the_share_predicted_right():
    rng = np.random.default_rng(2)
    model = TwoLayerLinear(3, 3, 3)
    params = rng.normal(size=model.size)
    X = rng.normal(size=(50, 3))
    y = rng.integers(0, 3, 50).astype(np.int32)
    loss, accuracy = model.evaluate(params, X, y)
    A, B = params[:9].reshape(3, 3), params[9:].reshape(3, 3)
    scores = X @ A @ B
    assert loss == pytest.approx(0.5 * np.mean(np.sum((scores - np.eye(3)[y]) ** 2, axis=1)),
                                 rel=1e-12)
    assert accuracy == np.mean(np.argmax(scores, axis=1) == y)


def test_the_base_class_leaves_the_numerics_to_subclasses():
    model = Model()
    model.layers = [Layer("w", slice(0, 2), 1.0, 1.0)]
    with pytest.raises(NotImplementedError):
        model.loss_grad(np.zeros(2), None, np.zeros(1))
    with pytest.raises(NotImplementedError):
        model.predict(np.zeros(2), None)
