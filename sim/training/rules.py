"""Strategy rules: what each strategy does, decided in one place for both executors.

Pure numerics and bookkeeping: numpy and the kernels, no SimPy, no MPI. The simulated
executor (:mod:`sim.simulated.strategies`) decides *when* things happen and the MPI executor
(:mod:`sim.real.executors`) makes them happen for real; both ask the strategy's rules

* what the servers do with a push: apply it, accumulate it for a synchronous step, or drop
  it as stale (:meth:`Rules.push`, on a :class:`~sim.training.store.ParameterStore`);
* when a pull may be answered (:meth:`Rules.may_pull`: the SSP clock bound, the step
  barrier) and the clock gap it is answered at;
* when a worker may read its cached parameters instead of pulling (:meth:`Rules.cache_fresh`:
  SSPTable's cache, Ho et al. 2013; :class:`~sim.training.store.ParameterCache`);
* whether a worker still computing when its step closes is cancelled or finishes and has
  its gradient dropped (:attr:`Rules.cancels_late`);
* when a synchronous step closes (:attr:`Rules.needed` gradients) and how its gradients are
  combined (:meth:`Rules.mean`: summed in worker order, then divided);
* the learning rate for a gradient of a given staleness (:meth:`Rules.lr`);
* when the model of record is evaluated (:meth:`Rules.evaluates_after`).

Each strategy's row in :data:`sim.training.strategies.STRATEGIES` names its rules class;
nothing branches on names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from sim import kernels as K
from sim.recorder import UpdateRecord
from sim.training.row_optimizer import TableOptimizer
from sim.training.workload import shaped_model

if TYPE_CHECKING:
    from sim.config import Config


class ParameterStore(Protocol):
    """What the rules read and change of the servers' state
    (:class:`sim.training.store.ParameterStore` is the one implementation)."""

    params: np.ndarray
    version: int
    clocks: np.ndarray
    alive: np.ndarray
    live: int
    gaps: list[int | None]
    arrived: dict[int, tuple[np.ndarray, float]]
    last_step: list[int]
    total: np.ndarray
    dropped: int
    fetched_updates: int

    def close_read(self, worker: int) -> int | None: ...

    def accept(self, worker: int, grad: np.ndarray, loss: float) -> None: ...

    def apply(self, grad: np.ndarray, lr: float, rows: np.ndarray | None = None) -> None: ...


class SGD:
    """Parameters and their momentum buffer, stepped as PyTorch's SGD does; a model's
    embedding tables (wide-deep) are stepped by their own row optimizer instead
    (:class:`sim.training.row_optimizer.TableOptimizer`: sparse Adagrad or SGD)."""

    def __init__(self, params: np.ndarray, config: Config) -> None:
        workload = config.workload
        self.params = params
        self.momentum, self.weight_decay = workload.momentum, workload.weight_decay
        self.velocity = np.zeros_like(params) if self.momentum > 0 else None
        tables = table_layout(config)
        self.tables = (TableOptimizer(tables, params, config.embeddings, workload.lr)
                       if tables and len(params) else None)
        # where the dense part starts: the tables come first in the flat vector
        self.dense_start = tables[-1].params.stop if self.tables else 0

    def step(self, grad: np.ndarray, lr: float, keys: slice = slice(None)) -> None:
        """One step of the parameters ``keys`` (``grad`` covers just those); raises
        :class:`sim.kernels.NonFiniteError` on a NaN or Inf."""
        if self.tables is not None:
            start, stop, _ = keys.indices(len(self.params))
            self.tables.step_dense(grad, lr, start)
            if stop <= self.dense_start:
                return
            grad, keys = grad[max(0, self.dense_start - start):], slice(
                max(start, self.dense_start), stop)
        velocity = None if self.velocity is None else self.velocity[keys]
        K.sgd_update(self.params[keys], grad, velocity, lr, self.momentum, self.weight_decay)

    def step_rows(self, rows: np.ndarray, values: np.ndarray, lr: float) -> None:
        """One step of ``rows`` only (momentum and decay applied lazily there)."""
        step = values + self.weight_decay * self.params[rows]
        if self.velocity is not None:
            self.velocity[rows] = self.momentum * self.velocity[rows] + step
            step = self.velocity[rows]
        self.params[rows] -= lr * step


def table_layout(config: Config) -> list[Any]:
    """The row-addressed tables of ``config``'s model (wide-deep's wide part and embedding
    tables), built from its shape alone; empty for every other model."""
    return list(shaped_model(config).tables) if config.workload.model == "wide-deep" else []


class Rules:
    """The rules every strategy shares; subclasses override what differs."""

    def __init__(self, config: Config, workers: int) -> None:
        self.config, self.n = config, workers
        self.base_lr = config.workload.lr
        self.batch = config.workload.batch

    # -- learning rate, evaluation, combining --

    def lr(self, staleness: int = 0) -> float:
        """The learning rate for a gradient of this staleness (lr / staleness with
        ``strategy.staleness_lr``, Zhang et al. 2016)."""
        if self.config.strategy.staleness_lr and staleness > 1:
            return self.base_lr / staleness
        return self.base_lr

    def evaluates_after(self, iteration: int) -> bool:
        """Whether the model of record is evaluated once ``iteration`` updates are applied."""
        run = self.config.run
        return iteration % run.eval_every == 0 or iteration == run.iterations

    @staticmethod
    def mean(grads: Sequence[np.ndarray], out: np.ndarray) -> np.ndarray:
        """``out`` = the mean of ``grads``, summed in the order given (the worker order, so
        rounding is the same whoever sums)."""
        K.copy(out, grads[0])
        for grad in grads[1:]:
            K.sum_into(out, grad)
        return K.scale(1.0 / len(grads), out)

    @staticmethod
    def mean_of_sum(total: np.ndarray, count: int) -> np.ndarray:
        """``total`` (a sum of ``count`` gradients, e.g. from an allreduce) becomes their mean."""
        return K.scale(1.0 / count, total)

    # -- the servers (strategies with uses_servers) --

    @property
    def needed(self) -> int:
        """Gradients that close a synchronous step."""
        return self.n

    @property
    def leaves_workers_out(self) -> bool:
        """Whether a step may close without some workers."""
        return self.needed < self.n

    @property
    def cancels_late(self) -> bool:
        """Whether a worker still computing when its step closes is cancelled (and pulls at
        once) rather than left to finish and push a gradient that is dropped on arrival
        (``strategy.late_gradients``)."""
        return self.leaves_workers_out and self.config.strategy.late_gradients == "cancel"

    @property
    def caches(self) -> bool:
        """Whether a worker's cached parameters can ever be read instead of pulled."""
        return False

    def cache_fresh(self, gap: int | None) -> bool:
        """Whether a worker may read its cached parameters, ``gap`` clocks behind its own
        clock, instead of pulling."""
        return False

    def may_pull(self, store: ParameterStore, worker: int) -> bool:
        """Whether ``worker``'s pull may be answered now."""
        return True

    def clock_gap(self, store: ParameterStore, worker: int) -> int | None:
        """The clock gap recorded with an update (bounded strategies only)."""
        return None

    def push(self, store: ParameterStore, worker: int, grad: np.ndarray, version_read: int,
             loss: float, rows: np.ndarray | None = None) -> UpdateRecord | None:
        """What the servers do with a (decoded) gradient; the update it made, if any."""
        raise NotImplementedError(f"{type(self).__name__} does not push to parameter servers")

    def summary(self, store: ParameterStore) -> dict[str, Any]:
        """The strategy's own summary keys, from its servers' state (both executors)."""
        return {}


class BSP(Rules):
    """Synchronous SGD over an allreduce: the mean of every worker's gradient, lr."""



class LocalSGD(Rules):
    """H local steps per worker, then the replicas are averaged (Lin et al. 2020)."""


    @staticmethod
    def average(replicas: Sequence[np.ndarray], out: np.ndarray) -> np.ndarray:
        return K.average(replicas, out=out)


class EASGD(Rules):
    """Elastic averaging (Zhang, Choromanska and LeCun 2015): every tau local steps a worker
    moves toward the center by alpha (x - center) and the center moves by as much."""


    def elastic_difference(self, x: np.ndarray, center: np.ndarray) -> np.ndarray:
        """alpha (x - center), computed in ``center``'s buffer."""
        K.scale(-1.0, center)
        K.sum_into(center, x)
        return K.scale(self.config.strategy.elasticity, center)

    @staticmethod
    def move_center(store: ParameterStore, diff: np.ndarray) -> None:
        """The center moves toward the worker by ``diff`` (one update of the center)."""
        K.sum_into(store.params, diff)
        store.version += 1


# strategy.async_lr -> the factor on lr for one asynchronous gradient of N workers
ASYNC_LR: dict[str, Callable[[int], float]] = {
    # the lab's default: N gradients move the model as far as one synchronous step of N
    # (bsp's lr per sample), so strategies compare at one learning rate
    "per-worker": lambda n: 1.0 / n,
    # Downpour (Dean et al. 2012): each gradient at the full rate (Downpour also adapted it
    # per parameter with Adagrad, which the lab does not)
    "full": lambda n: 1.0,
}


class ASP(Rules):
    """Asynchronous SGD (Dean et al. 2012): every gradient applied on arrival, at lr / N
    (``strategy.async_lr = "per-worker"``) or lr (``"full"``, as Downpour)."""


    def lr(self, staleness: int = 0) -> float:
        return super().lr(staleness) * ASYNC_LR[self.config.strategy.async_lr](self.n)

    def push(self, store: ParameterStore, worker: int, grad: np.ndarray, version_read: int,
             loss: float, rows: np.ndarray | None = None) -> UpdateRecord:
        staleness = store.version - version_read
        store.apply(grad, self.lr(staleness), rows)
        store.clocks[worker] += 1
        return UpdateRecord(worker, int(store.clocks[worker]), version_read, staleness, loss,
                            self.batch, store.close_read(worker))

    def summary(self, store: ParameterStore) -> dict[str, Any]:
        """``pulls_per_update``: the share of updates whose gradient was taken on parameters
        pulled for it (1 for asp; below 1 where workers read their cache)."""
        return {"pulls_per_update": store.fetched_updates / store.version
                if store.version else None}


class SSP(ASP):
    """Stale synchronous parallel (Ho et al. 2013): a worker more than ``staleness`` clocks
    ahead of the slowest waits.

    As in SSPTable, a worker at clock c reads its cache while the cache holds every update
    of clocks up to c - s - 1 (its gap, c minus the slowest clock at the fetch, is at most
    s) and its own updates since (read-my-writes); only then does it pull. With s = 0 the
    cache is never fresh (a push moves the worker's clock past it), so every read pulls.
    """


    @property
    def caches(self) -> bool:
        return self.config.strategy.staleness > 0

    def cache_fresh(self, gap: int | None) -> bool:
        return gap is not None and gap <= self.config.strategy.staleness

    def may_pull(self, store: ParameterStore, worker: int) -> bool:
        return self.clock_gap(store, worker) <= self.config.strategy.staleness

    def clock_gap(self, store: ParameterStore, worker: int) -> int:
        """Clocks ``worker`` is ahead of the slowest live worker (itself, at least)."""
        if store.live == self.n:
            return int(store.clocks[worker] - store.clocks.min())
        alive = store.alive.copy()
        alive[worker] = True
        return int(store.clocks[worker] - store.clocks[alive].min())


class BSPPS(Rules):
    """Synchronous SGD through parameter servers: a step closes when every worker has
    pushed; a pull waits for the step its worker pushed to."""


    def may_pull(self, store: ParameterStore, worker: int) -> bool:
        return worker not in store.arrived

    def push(self, store: ParameterStore, worker: int, grad: np.ndarray, version_read: int,
             loss: float, rows: np.ndarray | None = None) -> UpdateRecord | None:
        if version_read != store.version:
            store.dropped += 1
            return None  # a late gradient of a closed step: dropped on arrival
        store.accept(worker, grad, loss)
        return self.close(store) if self.step_full(store) else None

    def step_full(self, store: ParameterStore) -> bool:
        """Whether the gradients arrived close the step: ``needed`` of them, or as many
        as there are live workers after failures (a dead worker's arrived gradient
        counts)."""
        return len(store.arrived) >= min(self.needed, store.live)

    def close(self, store: ParameterStore) -> UpdateRecord:
        """Apply the mean of the arrived gradients (worker order) as one step."""
        step, accepted = store.version, sorted(store.arrived)
        mean = self.mean([store.arrived[w][0] for w in accepted], store.total)
        store.apply(mean, self.lr(0))
        store.clocks[accepted] += 1
        loss = float(np.mean([store.arrived[w][1] for w in accepted]))
        store.arrived.clear()
        store.last_step = accepted
        return UpdateRecord(-1, store.version, step, 0, loss, len(accepted) * self.batch)


class Backup(BSPPS):
    """Synchronous SGD with b backup workers (Chen et al. 2016): a step closes with the
    first N - b gradients; a late worker finishes its gradient, which is dropped on arrival,
    then pulls (or, with ``strategy.late_gradients = "cancel"``, stops when the step
    closes)."""


    @property
    def needed(self) -> int:
        return self.n - self.config.strategy.backup

    def summary(self, store: ParameterStore) -> dict[str, Any]:
        """``dropped_pushes``: late gradients dropped on arrival."""
        return {"dropped_pushes": store.dropped}
