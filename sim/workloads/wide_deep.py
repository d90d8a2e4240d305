"""Wide & Deep (Cheng et al. 2016): a wide linear part on crossed features plus a deep part,
embedding tables pooled per field and fed with the dense features to a ReLU MLP.

The parameters are one flat float64 vector, as every model's are, laid out as::

    [ wide: cross_buckets weights, then the bias | table 0: vocab[0] x dim | ... |
      table F-1 | MLP: each layer's W (out, in) then b (out), the last with one output ]

The wide weights and the embedding tables are *tables* (:class:`Table`): a batch touches a
few of their rows, which is what parameter servers pull and push; the wide part is a table
of one column whose last row is the bias (every row touches it). The MLP is dense.

logit = wide bias + sum of the wide weights at the row's crossed ids + MLP(concat(pooled
embeddings, dense features)); the loss is the mean logistic loss (labels 0/1). Lookups,
pooling and their backward (a scatter-add of row gradients) are C kernels
(:func:`sim.kernels.embedding_bag_forward` and ``_backward``), one call for every field:
the tables are consecutive and one width, so they are one block of rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sim import kernels as K
from sim.workloads.model_base import Layer, Model

_TOUCHED_KEPT = 64  # batches whose touched rows are remembered


@dataclass(frozen=True)
class Table:
    """Rows of ``dim`` parameters at ``params`` (a slice of the flat vector)."""

    name: str
    params: slice
    rows: int
    dim: int

    def view(self, flat: np.ndarray) -> np.ndarray:
        """The table as (rows, dim), a view of ``flat``."""
        return flat[self.params].reshape(self.rows, self.dim)


@dataclass(frozen=True)
class TableGrad:
    """A table's gradient for one batch: the distinct rows touched and their gradients."""

    rows: np.ndarray   # (u,) int64, sorted
    grads: np.ndarray  # (u, dim)


@dataclass(frozen=True)
class SparseGrad:
    """One batch's gradient as parameter servers exchange it: per table the touched rows,
    and the dense part's gradient (the MLP's slice of the flat vector)."""

    loss: float
    tables: list[TableGrad]
    dense: np.ndarray


def vocab_list(vocab: int | list[int] | tuple[int, ...], fields: int) -> tuple[int, ...]:
    """Rows of each field's table: one value for all, or one per field (a list of another
    length the validator refuses: :mod:`sim.training.validator`)."""
    if isinstance(vocab, int):
        return (vocab,) * fields
    if len(vocab) == 1:
        return tuple(vocab) * fields
    assert len(vocab) == fields, f"{len(vocab)} vocab sizes for {fields} fields"
    return tuple(int(v) for v in vocab)


class WideDeep(Model):
    """Wide & Deep on click-through-rate rows (:class:`sim.workloads.ctr.CtrRows`)."""

    name = "wide-deep"
    binary = True
    tabular = True  # takes CtrRows

    def __init__(self, features: int, classes: int = 2, hidden: tuple[int, ...] = (64,),
                 fields: int = 8, vocab: int | tuple[int, ...] = 1000, embedding_dim: int = 8,
                 cross_buckets: int = 4096, pooling: str = "sum", ids_per_field: int = 1,
                 **_: object) -> None:
        self.fields, self.dim, self.dense_features = fields, embedding_dim, features
        self.vocab, self.cross_buckets = vocab_list(vocab, fields), cross_buckets
        self.mean, self.ids_per_field = pooling == "mean", ids_per_field
        self._touched: dict[int, tuple[Any, list[np.ndarray]]] = {}
        self._written: dict[int, tuple[np.ndarray, list[np.ndarray]]] = {}
        crosses = max(fields - 1, 0)
        self.tables = [Table("wide", slice(0, cross_buckets + 1), cross_buckets + 1, 1)]
        start = cross_buckets + 1
        for f, rows in enumerate(self.vocab):
            self.tables.append(Table(f"emb{f}", slice(start, start + rows * embedding_dim),
                                     rows, embedding_dim))
            start += rows * embedding_dim
        bag = ids_per_field * embedding_dim
        self.layers = [Layer("wide", self.tables[0].params, 2.0 * (crosses + 1),
                             2.0 * (crosses + 1), lookups=crosses + 1.0)]
        self.layers += [Layer(t.name, t.params, float(bag), float(bag),
                              lookups=float(ids_per_field)) for t in self.tables[1:]]
        # where each field's rows start in the block of embedding tables (bags)
        self.field_offsets = np.cumsum([0, *self.vocab[:-1]]).astype(np.int64)
        sizes = [fields * embedding_dim + features, *hidden, 1]
        self.shapes = list(zip(sizes[1:], sizes[:-1], strict=True))  # (out, in)
        self.dense_start = start
        for i, (dout, din) in enumerate(self.shapes):  # the input's gradient feeds the tables
            stop = start + dout * din + dout
            self.layers.append(Layer(f"dense{i}", slice(start, stop), 2.0 * din * dout,
                                     4.0 * din * dout, shape=(dout, din), bias=True))
            start = stop

    @property
    def dense_params(self) -> slice:
        """The MLP's part of the flat vector."""
        return slice(self.dense_start, self.size)

    def _views(self, flat: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        dout, din = self.shapes[i]
        part = flat[self.layers[len(self.tables) + i].params]
        return part[:dout * din].reshape(dout, din), part[dout * din:]

    def init(self, rng: np.random.Generator) -> np.ndarray:
        """Tables uniform in +-sqrt(1 / rows) (DLRM's initialisation, Naumov et al. 2019),
        wide weights zero, MLP layers He-initialised."""
        params = np.zeros(self.size)
        for table in self.tables[1:]:
            bound = np.sqrt(1.0 / table.rows)
            params[table.params] = rng.uniform(-bound, bound, table.rows * table.dim)
        for i, (dout, din) in enumerate(self.shapes):
            W, _ = self._views(params, i)
            W[...] = rng.standard_normal((dout, din)) * np.sqrt(2.0 / din)
        return params

    # -- forward --

    def bags(self, X) -> np.ndarray:
        """Every field's bags as rows of the embedding tables laid end to end (they are
        consecutive in the flat vector and one width: one block of rows): (n x fields,
        ids_per_field), sample by sample, a field's ids offset by the rows before its table.
        One kernel call then looks up (or scatters) every field; a row's bags still come in
        sample order, so every sum is the per-field one, bit for bit."""
        return (X.ids + self.field_offsets[None, :, None]).reshape(-1, self.ids_per_field)

    def block(self, params: np.ndarray) -> np.ndarray:
        """The embedding tables as one (sum of rows, dim) array, a view of ``params``."""
        return params[self.tables[1].params.start:self.dense_start].reshape(-1, self.dim)

    def _inputs(self, params: np.ndarray, X, bags: np.ndarray) -> np.ndarray:
        """concat(pooled embeddings per field, dense features): (n, fields x dim + dense)."""
        n, width = len(X), self.fields * self.dim
        x = np.empty((n, width + self.dense_features))
        pooled = K.embedding_bag_forward(self.block(params), bags, self.mean)
        x[:, :width] = pooled.reshape(n, width)
        x[:, width:] = X.dense
        return x

    def _wide(self, params: np.ndarray, X) -> np.ndarray:
        wide = params[self.tables[0].params]
        return wide[X.wide].sum(axis=1) + wide[self.cross_buckets]

    def _forward(self, params: np.ndarray, X,
                 bags: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """(the MLP's activations, input first, and the logits (n,))."""
        acts = [self._inputs(params, X, bags)]
        for i in range(len(self.shapes)):
            W, b = self._views(params, i)
            acts.append(K.dense_forward(acts[-1], W, b, relu=i < len(self.shapes) - 1))
        return acts, acts[-1][:, 0] + self._wide(params, X)

    @staticmethod
    def _logistic(z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        """(mean logistic loss, its gradient with respect to the logits)."""
        loss = float(np.mean(np.logaddexp(0.0, z) - y * z))
        return loss, (0.5 * (1.0 + np.tanh(0.5 * z)) - y) / len(z)  # sigmoid, overflow-free

    # -- gradients --

    def sparse_loss_grad(self, params: np.ndarray, X, y: np.ndarray) -> SparseGrad:
        """The batch's loss and gradient: per table its distinct rows and their gradients
        (sorted by row), and the MLP's gradient."""
        bags = self.bags(X)
        loss, dz, dense, delta = self.head_loss_grad(params, self._inputs(params, X, bags),
                                                     self._wide(params, X), y)
        width = self.fields * self.dim
        rows, inverse = np.unique(bags, return_inverse=True)
        grads = K.embedding_bag_backward(
            bags, np.ascontiguousarray(delta[:, :width]).reshape(-1, self.dim), self.mean,
            inverse.astype(np.int64), len(rows))
        # back to each table's own rows: the block's rows are sorted, tables in order
        cut = np.searchsorted(rows, self.field_offsets)
        ends = [*cut[1:], len(rows)]
        tables = [self.wide_grad(X.wide, dz)] + [
            TableGrad((rows[lo:hi] - offset).astype(np.int64), grads[lo:hi])
            for lo, hi, offset in zip(cut, ends, self.field_offsets, strict=True)]
        return SparseGrad(loss, tables, dense)

    def head_loss_grad(self, params: np.ndarray, x: np.ndarray, wide: np.ndarray,
                       y: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """The loss and gradients past the lookups, for MLP inputs ``x`` (pooled embeddings
        then dense features, (n, fields x dim + dense)) and the wide part's logits ``wide``
        (n,): (loss, its gradient with respect to the logits (n,), the MLP's gradient, the
        gradient with respect to ``x``). What a model-parallel placement runs once the
        pooled vectors have been exchanged (:mod:`sim.real.executors.bsp_tables`)."""
        acts = [x]
        for i in range(len(self.shapes)):
            W, b = self._views(params, i)
            acts.append(K.dense_forward(acts[-1], W, b, relu=i < len(self.shapes) - 1))
        loss, dz = self._logistic(acts[-1][:, 0] + wide, y)
        dense = np.empty(self.size - self.dense_start)
        offset, delta = self.dense_start, dz[:, None]
        for i in reversed(range(len(self.shapes))):
            W, _ = self._views(params, i)
            part = self.layers[len(self.tables) + i].params
            dout, din = self.shapes[i]
            grad = dense[part.start - offset:part.stop - offset]
            _, _, delta = K.dense_backward(acts[i], delta, W, relu_in=i > 0, input_grad=True,
                                           dW=grad[:dout * din].reshape(dout, din),
                                           db=grad[dout * din:])
        return loss, dz, dense, delta

    def wide_grad(self, crossed: np.ndarray, dz: np.ndarray) -> TableGrad:
        """The wide part's rows for a batch's crossed ids ``crossed`` (n, crosses) and its
        logits' gradient ``dz``: every crossed id of the batch, and the bias."""
        rows, inverse = np.unique(crossed, return_inverse=True)
        grads = np.zeros(len(rows) + 1)
        np.add.at(grads, inverse.reshape(len(dz), -1), dz[:, None])
        grads[-1] = dz.sum()
        return TableGrad(np.append(rows, self.cross_buckets).astype(np.int64), grads[:, None])

    def touched(self, X) -> list[np.ndarray]:
        """The distinct rows of each table (wide first) a batch reads: what a pull asks for.
        (Remembered for the last few batches: a pull, a push and a step all ask.)"""
        key = id(X)
        found = self._touched.get(key)
        if found is not None and found[0] is X:
            return found[1]
        wide = np.append(np.unique(X.wide), self.cross_buckets).astype(np.int64)
        block = np.unique(self.bags(X))
        cut = [*np.searchsorted(block, self.field_offsets), len(block)]
        rows = [wide] + [(block[cut[f]:cut[f + 1]] - self.field_offsets[f]).astype(np.int64)
                         for f in range(self.fields)]
        if len(self._touched) >= _TOUCHED_KEPT:
            self._touched.pop(next(iter(self._touched)))
        self._touched[key] = (X, rows)
        return rows

    def scatter(self, grad: SparseGrad, out: np.ndarray) -> np.ndarray:
        """``grad`` written into the flat vector ``out`` (zeros where no row was touched).

        Only the rows this call wrote into ``out`` last time are cleared first (a table is
        far larger than a batch's rows), so ``out`` must not be written elsewhere between
        calls; a new ``out`` is cleared whole."""
        written = self._written.get(id(out))
        if written is None or written[0] is not out:
            out[:self.dense_start] = 0.0
        else:
            for table, rows in zip(self.tables, written[1], strict=True):
                table.view(out)[rows] = 0.0
        for table, part in zip(self.tables, grad.tables, strict=True):
            table.view(out)[part.rows] = part.grads
        out[self.dense_start:] = grad.dense
        self._written[id(out)] = (out, [part.rows for part in grad.tables])
        return out

    def loss_grad(self, params, X, y, out=None):
        grad = self.sparse_loss_grad(params, X, y)
        out = np.empty(self.size) if out is None else out
        return grad.loss, self.scatter(grad, out)

    def evaluate(self, params, X, y):
        _, z = self._forward(params, X, self.bags(X))
        loss, _ = self._logistic(z, y)
        return loss, float(np.mean((z > 0) == (y > 0.5)))

    def predict(self, params, X):
        return (self._forward(params, X, self.bags(X))[1] > 0).astype(np.float64)
