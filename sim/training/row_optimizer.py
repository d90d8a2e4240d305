"""The embedding tables' optimizer: row updates whose state lives with the rows.

Only the rows a batch touched are stepped, as TensorFlow's sparse apply ops and the
parameter servers of recommendation models do. ``adagrad`` is TensorFlow's Adagrad (Duchi
et al. 2011): per entry ``acc += g^2; w -= lr g / sqrt(acc)``, ``acc`` starting at
``embeddings.initial_accumulator``; ``sgd`` is ``w -= lr g``. Neither has momentum or
decay, so a row with a zero gradient stays bit for bit the same: stepping every row of a
table (an allreduced dense gradient) and stepping only the touched ones give the same bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sim import kernels as K


class TableOptimizer:
    """Row updates of ``tables`` (:class:`sim.workloads.wide_deep.Table`) in ``params``,
    stepped in place; ``embeddings`` is the config's ``[embeddings]`` and ``base_lr``
    ``workload.lr`` (the strategies' learning rates are scaled by embeddings.lr / base_lr)."""

    def __init__(self, tables: Sequence[Any], params: np.ndarray, embeddings: Any,
                 base_lr: float) -> None:
        self.tables, self.params = list(tables), params
        self.adagrad = embeddings.optimizer == "adagrad"
        self.lr_scale = 1.0 if embeddings.lr is None else embeddings.lr / base_lr
        # the sums of squares lie as the tables do in the flat vector, from its first
        # table on, so that consecutive tables of one width step together (step_block)
        self.start = self.tables[0].params.start
        stop = self.tables[-1].params.stop
        self.state = (np.full(stop - self.start, embeddings.initial_accumulator)
                      if self.adagrad else None)

    @property
    def state_bytes(self) -> int:
        """Bytes of the optimizer's state (Adagrad's sums of squares)."""
        return 0 if self.state is None else self.state.nbytes

    def step_rows(self, table: int, rows: np.ndarray, grads: np.ndarray, lr: float) -> None:
        """Step the distinct ``rows`` of table ``table`` by ``grads`` (rows, dim).

        Raises :class:`sim.kernels.NonFiniteError` on a NaN or Inf."""
        t = self.tables[table]
        self.step_block(t.params.start, t.params.stop, t.dim, rows, grads, lr)

    def step_block(self, start: int, stop: int, dim: int, rows: np.ndarray,
                   grads: np.ndarray, lr: float) -> None:
        """Step the distinct ``rows`` of the flat vector's part [start, stop) read as rows of
        ``dim`` (one table, or consecutive tables of that width) by ``grads`` (rows, dim).

        Raises :class:`sim.kernels.NonFiniteError` on a NaN or Inf."""
        view = self.params[start:stop].reshape(-1, dim)
        lr *= self.lr_scale
        if self.state is not None:
            accum = self.state[start - self.start:stop - self.start].reshape(-1, dim)
            K.adagrad_rows(view, accum, rows, grads, lr, 0.0)
        else:
            K.sgd_rows(view, rows, grads, lr)

    def step_dense(self, grad: np.ndarray, lr: float, start: int = 0) -> None:
        """Step every row of the tables inside ``grad``, which covers the flat vector from
        ``start`` on (a table only partly inside it is a ValueError)."""
        stop = start + len(grad)
        for i, table in enumerate(self.tables):
            lo, hi = table.params.start, table.params.stop
            if hi <= start or lo >= stop:
                continue
            if lo < start or hi > stop:
                raise ValueError(f"grad: covers part of table {table.name!r} "
                                 f"([{start}, {stop}) against [{lo}, {hi}))")
            rows = grad[lo - start:hi - start].reshape(table.rows, table.dim)
            # only rows with a gradient change: the others would stay bit for bit (module
            # docstring), and a step's batches touch few of a table's rows
            touched = np.flatnonzero(rows.any(axis=1))
            self.step_rows(i, touched, rows[touched], lr)
