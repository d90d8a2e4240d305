"""Models: parameters as one flat float64 vector, gradients from the C kernels.

A flat vector makes allreduce, parameter-server shards and compression uniform;
each model also names its layers (slices of that vector, in forward order) so a
worker can send a layer's gradient as soon as backward has produced it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sim import kernels as K
from sim.names import unknown
from sim.workloads.model_base import Layer, Model
from sim.workloads.wide_deep import WideDeep


class LogReg(Model):
    """Binary logistic regression (labels 0/1 as float64)."""

    name = "logreg"
    binary = True

    def __init__(self, features: int, classes: int = 2, l2: float = 0.0, **_: object) -> None:
        self.l2 = l2
        self.layers = [Layer("w", slice(0, features), 2 * features, 2 * features,
                             shape=(1, features))]

    def loss_grad(self, params, X, y, out=None):
        return K.logreg_loss_grad(X, y, params, self.l2, out=out)

    def predict(self, params, X):
        return (X @ params > 0).astype(np.float64)


class Softmax(Model):
    """Multiclass softmax regression; W is (classes, features)."""

    name = "softmax"

    def __init__(self, features: int, classes: int, l2: float = 0.0, **_: object) -> None:
        self.l2, self.shape = l2, (classes, features)
        self.layers = [Layer("W", slice(0, classes * features), 2 * classes * features,
                             2 * classes * features, shape=(classes, features))]

    def loss_grad(self, params, X, y, out=None):
        grad = None if out is None else out.reshape(self.shape)
        loss, g = K.softmax_loss_grad(X, y, params.reshape(self.shape), self.l2, out=grad)
        return loss, g.reshape(-1)

    def predict(self, params, X):
        return np.argmax(X @ params.reshape(self.shape).T, axis=1).astype(np.int32)


class MLP(Model):
    """ReLU MLP with a softmax head; each layer is W (out, in) followed by b (out)."""

    name = "mlp"

    def __init__(self, features: int, classes: int, hidden: tuple[int, ...] = (64,),
                 **_: object) -> None:
        sizes = [features, *hidden, classes]
        self.shapes = list(zip(sizes[1:], sizes[:-1], strict=True))  # (out, in)
        self.layers, start = [], 0
        for i, (dout, din) in enumerate(self.shapes):
            stop = start + dout * din + dout
            backward = 4 * din * dout if i > 0 else 2 * din * dout  # no input grad for layer 0
            self.layers.append(Layer(f"dense{i}", slice(start, stop), 2 * din * dout, backward,
                                     shape=(dout, din), bias=True))
            start = stop

    def _views(self, flat: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        dout, din = self.shapes[i]
        part = flat[self.layers[i].params]
        return part[:dout * din].reshape(dout, din), part[dout * din:]

    def init(self, rng):
        params = np.zeros(self.size)
        for i, (dout, din) in enumerate(self.shapes):  # He initialisation for ReLU layers
            W, _ = self._views(params, i)
            W[...] = rng.standard_normal((dout, din)) * np.sqrt(2.0 / din)
        return params

    def forward(self, params: np.ndarray, X: np.ndarray) -> list[np.ndarray]:
        """Activations: the input, then every layer's output (the last one is the logits)."""
        acts = [X]
        for i in range(len(self.shapes)):
            W, b = self._views(params, i)
            acts.append(K.dense_forward(acts[-1], W, b, relu=i < len(self.shapes) - 1))
        return acts

    def backward_layers(self, params, X, y, out):
        acts = self.forward(params, X)
        loss, delta = K.softmax_xent(acts[-1], y)
        for i in reversed(range(len(self.shapes))):
            W, _ = self._views(params, i)
            dW, db = self._views(out, i)
            _, _, delta = K.dense_backward(acts[i], delta, W, relu_in=i > 0, input_grad=i > 0,
                                           dW=dW, db=db)
            yield loss, i

    def loss_grad(self, params, X, y, out=None):
        out = np.empty(self.size) if out is None else out
        *_, (loss, _) = self.backward_layers(params, X, y, out)  # run every layer
        return loss, out

    def predict(self, params, X):
        return np.argmax(self.forward(params, X)[-1], axis=1).astype(np.int32)

    def evaluate(self, params, X, y):
        logits = self.forward(params, X)[-1]
        loss, _ = K.softmax_xent(logits, y)
        return loss, float(np.mean(np.argmax(logits, axis=1) == y))


class SparseLogReg(Model):
    """Logistic regression on CSR rows; gradients touch only the rows' features."""

    name = "sparse-logreg"
    sparse = True
    binary = True

    def __init__(self, features: int, classes: int = 2, l2: float = 0.0,
                 nnz_per_row: int = 20, **_: object) -> None:
        self.l2, self.nnz_per_row = l2, nnz_per_row
        self.workspace = K.SparseWorkspace(features)
        self.layers = [Layer("w", slice(0, features), 2 * nnz_per_row, 2 * nnz_per_row)]

    def sparse_loss_grad(self, params, X, y) -> tuple[float, np.ndarray, np.ndarray]:
        """(loss, touched feature ids, gradient values there)."""
        return K.sparse_logreg_grad(*X, y, params, self.l2, workspace=self.workspace)

    def loss_grad(self, params, X, y, out=None):
        loss, idx, val = self.sparse_loss_grad(params, X, y)
        out = np.empty(self.size) if out is None else out
        out[:] = 0
        return loss, K.scatter_add(idx, val, out)

    def predict(self, params, X):
        return (K.csr_matvec(*X, params) > 0).astype(np.float64)


MODELS: dict[str, Callable[..., Model]] = {
    cls.name: cls for cls in (LogReg, Softmax, MLP, SparseLogReg, WideDeep)
}


def make_model(name: str, features: int, classes: int, **options: object) -> Model:
    """Build the named model; raises KeyError listing the known names."""
    if name not in MODELS:
        raise KeyError(unknown("model", name, sorted(MODELS)))
    return MODELS[name](features=features, classes=classes, **options)
