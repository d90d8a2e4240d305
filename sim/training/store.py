"""The parameter servers' state, as both executors hold it: pure, no SimPy, no MPI.

A :class:`ParameterStore` keeps the parameters of record, their version (updates applied),
every worker's clock (updates it contributed to), the gradients of the synchronous step in
progress, and the clock gap each worker last read at. What happens on a push or a pull is
the strategy's rule (:mod:`sim.training.rules`); the store only holds the state those rules
work on, so the simulated servers (:mod:`sim.training.server`) and the real server rank
(:mod:`sim.real.executors.ps`) follow the same rules on the same state.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim import kernels as K
from sim.training.rules import SGD, Rules, UpdateRecord


class ParameterStore:
    """Parameters of record with the bookkeeping of ``rules``; ``params`` is kept (not
    copied) and stepped in place."""

    def __init__(self, rules: Rules, params: np.ndarray, workload: Any) -> None:
        self.rules = rules
        self.sgd = SGD(params, workload)
        self.version = 0  # updates applied
        self.clocks = np.zeros(rules.n, np.int64)  # updates each worker contributed to
        self.gaps: list[int | None] = [None] * rules.n  # clock gap at each worker's last read
        self.arrived: dict[int, tuple[np.ndarray, float]] = {}  # this step: gradient, loss
        self.last_step: list[int] = []  # the workers whose gradients the last step used
        self._grads: dict[int, np.ndarray] = {}  # a buffer per worker for those gradients
        self.total = np.zeros_like(params)  # a synchronous step's mean

    @property
    def params(self) -> np.ndarray:
        return self.sgd.params

    # -- pulls --

    def may_pull(self, worker: int) -> bool:
        """Whether ``worker``'s pull may be answered now (the strategy's gate)."""
        return self.rules.may_pull(self, worker)

    def admit(self, worker: int) -> int | None:
        """``worker`` passes the gate now: note (and return) its clock gap."""
        self.gaps[worker] = self.rules.clock_gap(self, worker)
        return self.gaps[worker]

    def read(self, out: np.ndarray, rows: np.ndarray | None = None) -> int:
        """Copy the parameters (or only ``rows``) into ``out``; the version read."""
        if rows is None:
            K.copy(out, self.params)
        else:
            out[rows] = self.params[rows]
        return self.version

    # -- pushes --

    def push(self, worker: int, grad: np.ndarray, version_read: int, loss: float,
             rows: np.ndarray | None = None) -> UpdateRecord | None:
        """A gradient (decoded; with ``rows``, the values of those rows only) read at
        ``version_read``: the update it made, or None if it was accumulated or dropped.

        Raises :class:`sim.kernels.NonFiniteError` if an update gave a NaN or Inf.
        """
        return self.rules.push(self, worker, grad, version_read, loss, rows)

    def accept(self, worker: int, grad: np.ndarray, loss: float) -> None:
        """Keep a copy of ``worker``'s gradient for the step in progress."""
        if worker not in self._grads:
            self._grads[worker] = np.empty_like(self.params)
        self.arrived[worker] = (K.copy(self._grads[worker], grad), loss)

    def apply(self, grad: np.ndarray, lr: float, rows: np.ndarray | None = None) -> None:
        """One SGD step (of ``rows`` only, if given); bumps the version."""
        if rows is None:
            self.sgd.step(grad, lr)
        else:
            self.sgd.step_rows(rows, grad, lr)
        self.version += 1
