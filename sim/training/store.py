"""The parameter servers' state, as both executors hold it: pure, no SimPy, no MPI.

A :class:`ParameterStore` keeps the parameters of record, their version (updates applied),
every worker's clock (updates it contributed to), the gradients of the synchronous step in
progress, and the clock gap each worker last read at. What happens on a push or a pull is
the strategy's rule (:mod:`sim.training.rules`); the store only holds the state those rules
work on, so the simulated servers (:mod:`sim.simulated.server`) and the real server rank
(:mod:`sim.real.executors.ps`) follow the same rules on the same state.

A :class:`ParameterCache` is the workers' side: the parameters a worker holds, which it
reads instead of pulling while its rules say they are fresh (SSP).
"""

from __future__ import annotations

import numpy as np

from sim import kernels as K
from sim.training.rules import SGD, Rules, UpdateRecord


class ParameterStore:
    """Parameters of record with the bookkeeping of ``rules``; ``params`` is kept (not
    copied) and stepped in place."""

    def __init__(self, rules: Rules, params: np.ndarray) -> None:
        self.rules = rules
        self.sgd = SGD(params, rules.config)
        self.version = 0  # updates applied
        self.clocks = np.zeros(rules.n, np.int64)  # updates each worker contributed to
        # the clock gap of each worker's read in progress (a cached read: one more per push)
        self.gaps: list[int | None] = [None] * rules.n
        self.fetched = np.zeros(rules.n, bool)  # whether each worker pulled since its push
        self.fetched_updates = 0  # updates whose gradient was taken on pulled parameters
        self.dropped = 0  # pushes dropped on arrival as stale
        self.arrived: dict[int, tuple[np.ndarray, float]] = {}  # this step: gradient, loss
        self.last_step: list[int] = []  # the workers whose gradients the last step used
        self._grads: dict[int, np.ndarray] = {}  # a buffer per worker for those gradients
        self.total = np.zeros_like(params)  # a synchronous step's mean
        self.alive = np.ones(rules.n, bool)  # workers not dropped after a failure
        self.live = rules.n  # how many (an int: the rules read it on every push)

    # -- membership (elastic recovery, sim.faults) --

    def drop(self, worker: int) -> None:
        """``worker`` failed: the rules count only the others (its pull in progress, if
        any, no longer counts as a read)."""
        self.live -= int(self.alive[worker])
        self.alive[worker] = False
        self.fetched[worker] = False

    def rejoin(self, worker: int) -> None:
        """``worker`` is back, its clock at the slowest live worker's (it holds no one up and
        is ahead of no one)."""
        if self.live:
            self.clocks[worker] = self.clocks[self.alive].min()
        self.live += int(not self.alive[worker])
        self.alive[worker] = True

    @property
    def params(self) -> np.ndarray:
        return self.sgd.params

    # -- pulls --

    def may_pull(self, worker: int) -> bool:
        """Whether ``worker``'s pull may be answered now (the strategy's gate)."""
        return self.rules.may_pull(self, worker)

    def admit(self, worker: int) -> int | None:
        """``worker``'s pull passes the gate now: note (and return) its clock gap."""
        self.gaps[worker] = self.rules.clock_gap(self, worker)
        self.fetched[worker] = True
        return self.gaps[worker]

    def close_read(self, worker: int) -> int | None:
        """``worker``'s read made an update: count it if it was pulled, and return its clock
        gap; the worker's next read, if from its cache, is one clock further behind."""
        gap = self.gaps[worker]
        self.fetched_updates += int(self.fetched[worker])
        self.fetched[worker] = False
        if gap is not None:
            self.gaps[worker] = gap + 1
        return gap

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


class ParameterCache:
    """The parameters a worker holds, read instead of pulling while the rules say they are
    fresh (SSPTable's client cache, Ho et al. 2013); ``params`` is kept (not copied) and
    written in place.

    ``gap``: clocks the copy is behind the worker's clock (a pull's gap, one more for each
    push since, as :meth:`ParameterStore.close_read` counts it on the servers' side).
    ``version``: the updates it holds (the version pulled, one more for each own push).
    The worker's own updates go into the copy as it pushes them (read-my-writes): the
    servers' SGD step at lr(0) with the copy's own momentum buffer (the servers' holds every
    worker's gradients; with one worker the two agree bit for bit).
    """

    def __init__(self, rules: Rules, params: np.ndarray) -> None:
        self.rules = rules
        self.sgd = SGD(params, rules.config)
        self.version: int | None = None  # None: nothing pulled yet
        self.gap: int | None = None

    @property
    def params(self) -> np.ndarray:
        return self.sgd.params

    @property
    def fresh(self) -> bool:
        """Whether the worker may read the copy now instead of pulling."""
        return self.version is not None and self.rules.cache_fresh(self.gap)

    def pulled(self, version: int, gap: int | None) -> None:
        """``params`` now hold the servers' parameters at ``version``, pulled ``gap``
        clocks behind the worker's clock."""
        self.version, self.gap = version, gap

    def pushed(self, grad: np.ndarray) -> bool:
        """The worker pushed ``grad`` (as the servers decode it): apply it to the copy;
        whether that took an SGD step (the worker's ``update`` time). A step to a NaN or
        Inf spoils the copy: the next read pulls (the servers see the divergence)."""
        if self.version is None:
            return False
        if not self.rules.caches:  # it will never be fresh: the next read pulls
            self.version = self.gap = None
            return False
        try:
            self.sgd.step(grad, self.rules.lr(0))
        except K.NonFiniteError:
            self.version = self.gap = None
            return True
        self.version += 1
        if self.gap is not None:
            self.gap += 1
        return True
