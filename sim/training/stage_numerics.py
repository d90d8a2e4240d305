"""What a split replica computes: one rank's layers run forward and backward on real
microbatch activations with the C kernels, for either executor.

A rank (stage s, shard k of t) runs its :class:`ShardRunner`. Its passes are generators
that yield at each tensor-parallel allreduce point the partial array to be summed over the
tensor group and take the sum back (Megatron-LM's g and f operators, Shoeybi et al. 2019,
Sec. 3): the simulator sums in shard order in one process (:func:`replica_loss_grad`), the
real ranks call MPI. Between stages a pass takes the previous stage's whole activation (or
the next stage's whole gradient) and returns its own.

The layers of a column/row pair (sim.training.parallel_plan):

- column: shard k holds rows k of W and b (its outputs); forward needs no communication;
  backward's input gradient is a partial sum over the shards (allreduced, unless the layer
  is the model's first: the data needs no gradient).
- row: shard k holds columns k of W (its inputs, the column layer's outputs on that shard)
  and the whole bias; forward's output is a partial sum (allreduced, then the bias and the
  ReLU are applied once); backward needs no communication. Every shard computes the same
  bias gradient; shard 0's is the one kept.
- whole (a stage's odd last layer with t > 1): every shard computes all of it, the same;
  shard 0's gradient is the one kept.

Microbatches: the batch's rows are cut into m equal consecutive parts; each part's loss is
its mean, and its output gradient is scaled by 1/m, so the gradients summed over the parts
(in microbatch order, as both schedules run the backwards) are the batch's mean gradient.
With m = 1 and t = 1 every kernel call is the unsplit model's (same bits as
``MLP.loss_grad``); otherwise the sums are reassociated (1e-12 relative, float64).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import numpy as np

from sim import kernels as K
from sim.training.parallel_plan import Plan, ShardLayer
from sim.workloads.models import MLP, Model

#: A pass: yields partial sums for the tensor group, is sent their sums, returns its output.
Pass = Generator[np.ndarray, np.ndarray, Any]


class ShardRunner:
    """The layers one rank of ``plan`` holds (``stage``, ``shard``) of an MLP ``model``
    (interleaved: ``stage`` is a virtual stage, one chunk of a rank's).

    ``forward`` keeps each microbatch's layer inputs until its ``backward``. Parameters and
    gradients are the model's flat vectors; a runner reads and writes only its own part.
    Entries every shard of the stage holds alike (a whole layer, a row layer's bias) get
    their gradient from shard 0 only, so that the shards of one process can share one
    gradient vector; with ``own_copies`` every shard writes them too (a real rank, with a
    gradient vector of its own, steps its own copies). With ``packed`` the parameters and
    gradients passed in are the shard's own packed vector (``flat[held()]``, the layers one
    after another) rather than the model's: every layer's weights contiguous, a row layer's
    columns included, so nothing is gathered, copied or scattered (a real rank). Raises
    TypeError for a model without dense layers to split (not an MLP)."""

    def __init__(self, model: Model, plan: Plan, stage: int, shard: int,
                 own_copies: bool = False, packed: bool = False) -> None:
        if not isinstance(model, MLP):
            raise TypeError(f"a split replica needs an MLP, got {model.name!r}")
        self.model, self.plan, self.shard = model, plan, shard
        self.own_copies = own_copies or packed
        self.stage = plan.virtual_stage(stage)  # the stage itself with one chunk
        self.last_layer = len(model.shapes) - 1
        self._stash: dict[int, list[np.ndarray]] = {}
        self._packed: dict[int, tuple[int, tuple[int, int], int, int]] | None = None
        if packed:
            self._packed = self._packed_layout()

    def _packed_layout(self) -> dict[int, tuple[int, tuple[int, int], int, int]]:
        """Where each layer's (W, b) of this shard lie in its packed vector (``flat[held()]``):
        layer -> (W's offset, W's shape, b's offset, b's length). The held entries ascend
        layer by layer, W (row-major, a row layer's columns included) before b, so the
        packed vector is the shard's layers one after another."""
        index, layout, at, order = np.arange(self.model.size), {}, 0, []
        for layer in self.stage.layers:
            W, b = self._in_model(index, layer)
            layout[layer.layer] = (at, W.shape, at + W.size, b.size)
            at += W.size + b.size
            order += [W.ravel(), b]
        if not np.array_equal(np.concatenate(order), self.held()):
            raise RuntimeError("the packed layout is not the held entries' order")
        return layout

    # -- the parameters of one layer as this shard holds them -----------------------------

    def _rows(self, layer: ShardLayer) -> slice:
        """The output rows of a column layer's W and b this shard holds."""
        dout = self.model.shapes[layer.layer][0] // self.plan.tensor
        return slice(self.shard * dout, (self.shard + 1) * dout)

    def _cols(self, layer: ShardLayer) -> slice:
        """The input columns of a row layer's W this shard holds."""
        din = self.model.shapes[layer.layer][1] // self.plan.tensor
        return slice(self.shard * din, (self.shard + 1) * din)

    def _weights(self, flat: np.ndarray, layer: ShardLayer) -> tuple[np.ndarray, np.ndarray]:
        """(W, b) of ``layer`` in ``flat`` (the model's vector, or with ``packed`` the
        shard's) as this shard computes with them (C-contiguous)."""
        if self._packed is not None:
            return self._packed_views(flat, layer)
        return self._in_model(flat, layer)

    def _in_model(self, flat: np.ndarray, layer: ShardLayer) -> tuple[np.ndarray, np.ndarray]:
        """(W, b) of ``layer`` as this shard holds them, in the model's flat vector."""
        W, b = self.model._views(flat, layer.layer)
        if layer.role == "column":
            rows = self._rows(layer)
            return W[rows], b[rows]
        if layer.role == "row":
            return np.ascontiguousarray(W[:, self._cols(layer)]), b
        return W, b

    def _packed_views(self, flat: np.ndarray, layer: ShardLayer
                      ) -> tuple[np.ndarray, np.ndarray]:
        w_at, shape, b_at, b_len = self._packed[layer.layer]
        return flat[w_at:b_at].reshape(shape), flat[b_at:b_at + b_len]

    def held(self) -> np.ndarray:
        """The flat indices (ascending) of the parameters this shard holds and computes
        with: its own part and its copies of the entries every shard holds, as many as the
        plan's ``Stage.params``; the entries its data-parallel allreduce sums."""
        index = np.arange(self.model.size)
        parts = [a.ravel() for layer in self.stage.layers for a in self._in_model(index, layer)]
        return np.sort(np.concatenate(parts))

    # -- forward --------------------------------------------------------------------------

    def forward(self, params: np.ndarray, microbatch: int, x: np.ndarray) -> Pass:
        """The stage's layers on ``x`` (the microbatch's input rows, or the previous stage's
        activation); returns the stage's whole output (the logits on the last stage)."""
        inputs = []
        for layer in self.stage.layers:
            W, b = self._weights(params, layer)
            relu = layer.layer < self.last_layer
            if layer.role == "row":
                inputs.append(x)
                partial = K.dense_forward(x, W, np.zeros_like(b), relu=False)
                x = _bias_relu((yield partial), b, relu)
            else:
                inputs.append(x)
                x = K.dense_forward(x, W, b, relu=relu)
        self._stash[microbatch] = inputs
        return x

    def loss(self, microbatch: int, logits: np.ndarray, labels: np.ndarray
             ) -> tuple[float, np.ndarray]:
        """The last stage's loss of one microbatch (its mean) and the gradient of the batch's
        mean loss with respect to these logits (the microbatch's, over m)."""
        loss, delta = K.softmax_xent(logits, labels)
        if self.plan.microbatches > 1:
            K.scale(1.0 / self.plan.microbatches, delta)
        return loss, delta

    # -- backward -------------------------------------------------------------------------

    def backward(self, params: np.ndarray, grad: np.ndarray, microbatch: int,
                 delta: np.ndarray) -> Pass:
        """Backward through the stage for one microbatch, ``delta`` the gradient with respect
        to its output; adds the layers' gradients into this shard's part of ``grad`` (the
        first microbatch writes it) and returns the gradient with respect to the stage's input
        (None on the first stage)."""
        inputs = self._stash.pop(microbatch)
        first = microbatch == 0
        for layer, x in zip(reversed(self.stage.layers), reversed(inputs), strict=True):
            W, _ = self._weights(params, layer)
            index = layer.layer
            needs_input = index > 0
            gW, gb = self._grad_views(grad, layer)
            # the first microbatch writes its gradient in place (no copy; m = 1 is the unsplit
            # model's call), the others add theirs
            direct = first and gW is not None and gb is not None and gW.flags.c_contiguous
            dW, db, delta = K.dense_backward(x, delta, W, relu_in=index > 0,
                                             input_grad=needs_input,
                                             dW=gW if direct else None,
                                             db=gb if direct else None)
            if not direct:
                if gW is not None:
                    _put(gW, dW, first)
                if gb is not None:
                    _put(gb, db, first)
            if layer.role == "column" and needs_input:
                delta = yield delta
        return delta if self.stage.index > 0 else None

    def _grad_views(self, grad: np.ndarray, layer: ShardLayer
                    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Where this shard's dW and db of ``layer`` go in ``grad``; None for an entry whose
        gradient shard 0 keeps (a copy every shard computes alike)."""
        if self._packed is not None:  # every entry of its own, contiguous
            return self._packed_views(grad, layer)
        gW, gb = self.model._views(grad, layer.layer)
        copy = self.shard > 0 and not self.own_copies
        if layer.role == "whole":
            return (None, None) if copy else (gW, gb)
        if layer.role == "column":
            rows = self._rows(layer)
            return gW[rows], gb[rows]
        # row: its input columns; every shard has the same bias gradient
        return gW[:, self._cols(layer)], None if copy else gb


def _bias_relu(summed: np.ndarray, b: np.ndarray, relu: bool) -> np.ndarray:
    """The row layer's output: the tensor group's sum, plus the bias, then the ReLU (+0 for
    v <= 0, as the dense kernel gives)."""
    out = summed + b
    if relu:
        np.maximum(out, 0.0, out=out)
        out += 0.0  # -0.0 -> +0.0
    return out


def _put(dst: np.ndarray, src: np.ndarray, first: bool) -> None:
    if first:
        dst[...] = src
    elif dst.flags.c_contiguous:
        K.sum_into(dst, src)
    else:  # a row layer's columns: a strided view of the flat gradient
        dst += src


# -- one replica in one process: the simulator's numerics, and the tests' reference --------


def sum_in_order(parts: Sequence[np.ndarray]) -> np.ndarray:
    """An allreduce's result as one process takes it: the parts added in shard order."""
    total = parts[0].copy()
    for part in parts[1:]:
        K.sum_into(total, part)
    return total


def lockstep(passes: Sequence[Pass]) -> list[Any]:
    """Run the passes of one tensor group together: at each yield the partial arrays are
    summed in shard order and the sum sent to every pass; returns each pass's result.
    Raises RuntimeError if they do not yield the same number of times."""
    summed = None
    while True:
        partials, results = [], []
        for p in passes:
            try:
                partials.append(p.send(summed))
            except StopIteration as stop:
                results.append(stop.value)
        if results and partials:
            raise RuntimeError("the shards of a tensor group reached different allreduces")
        if results:
            return results
        summed = sum_in_order(partials)


def replica_loss_grad(model: Model, plan: Plan, params: np.ndarray, X: Any, y: np.ndarray,
                      out: np.ndarray) -> float:
    """The loss of one replica's batch (mean over its microbatches) and, in ``out``, the
    gradient its ranks compute between them, as the split replica computes it: microbatch
    by microbatch, stage by stage, each tensor group's sums in shard order.

    Without a split (one stage, one shard) each microbatch goes through ``model.loss_grad``
    (any model); with one microbatch too, that is exactly the unsplit call."""
    m, rows = plan.microbatches, plan.microbatch_rows
    if len(y) != m * rows:
        raise ValueError(f"a replica's batch has {len(y)} rows, the plan {m} x {rows}")
    if plan.pipeline == 1 and plan.tensor == 1:
        return _microbatched(model, m, rows, params, X, y, out)
    groups = [[ShardRunner(model, plan, s, k) for k in range(plan.tensor)]
              for s in range(plan.pipeline * plan.chunks)]  # virtual stages, in order
    total = 0.0
    for mb in range(m):
        x = X[mb * rows:(mb + 1) * rows]
        for group in groups:
            x = lockstep([r.forward(params, mb, x) for r in group])[0]
        loss, delta = groups[-1][0].loss(mb, x, y[mb * rows:(mb + 1) * rows])
        total += loss
        for group in reversed(groups):
            delta = lockstep([r.backward(params, out, mb, delta) for r in group])[0]
    return total / m


def _microbatched(model: Model, m: int, rows: int, params: np.ndarray, X: Any,
                  y: np.ndarray, out: np.ndarray) -> float:
    """One rank's whole model over m microbatches: the mean of their gradients in ``out``."""
    if m == 1:
        loss, _ = model.loss_grad(params, X, y, out=out)
        return loss
    part, total = np.empty_like(out), 0.0
    for mb in range(m):
        loss, _ = model.loss_grad(params, X[mb * rows:(mb + 1) * rows],
                                  y[mb * rows:(mb + 1) * rows], out=out if mb == 0 else part)
        if mb > 0:
            K.sum_into(out, part)
        total += loss
    K.scale(1.0 / m, out)
    return total / m
