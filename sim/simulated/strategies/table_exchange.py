"""How ``bsp`` moves a model's embedding tables each step, by ``embeddings.placement``.

- ``replicated``: every worker holds every table. The step allreduces the whole gradient,
  tables included, as TensorFlow's MultiWorkerMirroredStrategy does with dense gradients;
  with ``embeddings.sparse_allreduce`` it allreduces the dense part and allgathers each
  worker's touched rows as (id, row) pairs instead (Horovod's allgather of
  IndexedSlices), every worker's block padded to the largest (MPI_Allgather).
- ``alltoall``: the tables are split over the workers (``embeddings.sharding``), as DLRM
  does (Naumov et al. 2019) and TorchRec plans: each worker looks up the rows it owns for
  every worker's batch and sends each its pooled vectors, an all-to-all; backward sends
  their gradients back the same way (the transpose), the owners step their rows, and only
  the dense part is allreduced. The exchange's bytes per pair are
  :meth:`~sim.training.embedding_shards.ShardMap.alltoall_bytes`; the pairwise all-to-all
  with sizes per pair is :func:`sim.network.alltoall.alltoallv`. Without layer-wise
  pipelining a step runs its parts one after another, so the forward exchange is charged
  after the step's compute with the backward one: the step takes as long.

The numbers are the same in all three: every table row is stepped by the mean gradient of
the step's batches (the owners' update of their rows is the replicas' update of the same
rows), which is what the tests hold.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from sim.network.alltoall import alltoallv
from sim.network.collectives import get_collective
from sim.simulated.strategies.base import cpu
from sim.training.embedding_shards import ShardMap, TableSpec, load_max_over_mean
from sim.training.embedding_traffic import ID_BYTES, VALUE_BYTES


class TableExchange:
    """Base: what a step of ``strategy`` (:class:`~sim.simulated.strategies.allreduce.BSP`)
    moves for its tables, and the summary keys that count it."""

    def __init__(self, strategy: Any) -> None:
        self.strategy, self.ctx = strategy, strategy.ctx
        model = self.ctx.model
        self.model = model
        self.dense_bytes = (model.size - model.dense_start) * VALUE_BYTES
        self.steps = 0
        self.elapsed_s = 0.0  # in exchanges, summed over steps
        self.unique_ids = 0.0  # summed over workers and steps
        self.pulled = self.pushed = 0.0  # bytes, summed over workers and steps

    def exchange(self, nbytes: int, overlapped: bool) -> Generator[simpy.Event, Any, None]:
        """One step's communication; ``nbytes``: the whole gradient's."""
        raise NotImplementedError

    def timed_exchange(self, nbytes: int,
                       overlapped: bool) -> Generator[simpy.Event, Any, None]:
        """:meth:`exchange`, its duration kept for :attr:`mean_s`."""
        start = self.ctx.env.now
        yield from self.exchange(nbytes, overlapped)
        self.elapsed_s += self.ctx.env.now - start

    @property
    def mean_s(self) -> float:
        """The mean step's exchange (s)."""
        return self.elapsed_s / self.steps if self.steps else 0.0

    def touched(self) -> list[list[np.ndarray]]:
        """The distinct rows of each table each worker's last batch touched."""
        return [self.model.touched(w.last_batch[0]) for w in self.ctx.workers]

    def count(self, touched: list[list[np.ndarray]], pulled: float, pushed: float) -> None:
        """A step: the workers' touched rows, and the bytes each received (``pulled``) and
        sent (``pushed``), means over the workers."""
        self.steps += 1
        self.unique_ids += sum(len(ids) for rows in touched for ids in rows)
        self.pulled += pulled * self.ctx.n
        self.pushed += pushed * self.ctx.n

    def summary(self) -> dict[str, Any]:
        n = max(1, self.steps * self.ctx.n)
        return {"unique_ids_per_step": self.unique_ids / n,
                "pull_bytes_per_step": self.pulled / n,
                "push_bytes_per_step": self.pushed / n,
                "shard_load_max_over_mean": self.load(), "cache_hit_rate": 0.0}

    def load(self) -> float | None:
        """Rows served per owner, max over mean (None: no owners, every worker holds all)."""
        return None

    def timed(self, run: Generator[simpy.Event, Any, Any],
              overlapped: bool) -> Generator[simpy.Event, Any, None]:
        """``run`` on the network, recorded as every worker's wire time."""
        ctx = self.ctx
        start = ctx.env.now
        yield from run
        for w in ctx.workers:
            ctx.recorder.add_span(w.index, "wire", start, ctx.env.now, overlapped)


class Replicated(TableExchange):
    """Every worker holds the tables (module docstring)."""

    def __init__(self, strategy: Any) -> None:
        super().__init__(strategy)
        self.sparse = self.ctx.config.embeddings.sparse_allreduce
        self.gather = get_collective(self.ctx.config.strategy.allgather)

    def exchange(self, nbytes: int, overlapped: bool) -> Generator[simpy.Event, Any, None]:
        touched = self.touched()
        if not self.sparse:
            self.count(touched, 0.0, nbytes)
            yield from self.strategy.allreduce(nbytes, overlapped)
            return
        rows = [sum(len(ids) * (t.dim * VALUE_BYTES + ID_BYTES)
                    for ids, t in zip(worker, self.model.tables, strict=True))
                for worker in touched]
        block = max(rows)  # MPI_Allgather: every block the size of the largest
        # each worker sends its block and receives the others'
        self.count(touched, (self.ctx.n - 1) * block, self.dense_bytes + block)
        yield from self.strategy.allreduce(self.dense_bytes, overlapped)
        yield from self.timed(self.gather.run(self.ctx.network, p=self.ctx.n,
                                              nbytes=int(block),
                                              hosts=self.strategy.hosts), overlapped)


class AllToAll(TableExchange):
    """The tables split over the workers, pooled vectors exchanged (module docstring)."""

    def __init__(self, strategy: Any) -> None:
        super().__init__(strategy)
        ctx = self.ctx
        self.map = ShardMap([TableSpec(t.rows, t.dim) for t in self.model.tables], ctx.n,
                            ctx.config.embeddings.sharding)
        batch = ctx.config.workload.batch
        self.forward = self.map.alltoall_bytes([batch] * ctx.n, VALUE_BYTES)
        self.looked_up = np.zeros(ctx.n)  # ids each owner looked up

    def exchange(self, nbytes: int, overlapped: bool) -> Generator[simpy.Event, Any, None]:
        ctx = self.ctx
        touched = self.touched()
        every = [np.concatenate(ids) for ids in zip(*(self._occurrences(w) for w in
                                                       ctx.workers), strict=True)]
        lookups = self.map.lookup_work(every)
        self.looked_up += lookups.ids
        received = float(self.forward.sum()) / ctx.n  # a worker's pooled vectors, mean
        self.count(touched, received, received + self.dense_bytes)
        hosts = self.strategy.hosts
        # each owner gathers its rows for every worker's bags by index, and scatters their
        # gradients back the same way (the host's per-row costs; nothing on the ideal host)
        env, costs = ctx.env, ctx.cpu
        yield simpy.AllOf(env, [env.process(cpu(
            ctx, w.index, "compute", 2 * costs.table_rows_s(VALUE_BYTES * values, ids)))
            for w, ids, values in zip(ctx.workers, lookups.ids, lookups.values, strict=True)])
        yield from self.timed(alltoallv(ctx.network, self.forward, hosts), overlapped)
        yield from self.timed(alltoallv(ctx.network, self.forward.T, hosts), overlapped)
        yield from self.strategy.allreduce(self.dense_bytes, overlapped)

    def _occurrences(self, worker: Any) -> list[np.ndarray]:
        """Every id a worker's last batch looks up, per table (wide first)."""
        X = worker.last_batch[0]
        wide = np.append(X.wide.reshape(-1), np.full(len(X), self.model.cross_buckets))
        return [wide] + [X.ids[:, f, :].reshape(-1) for f in range(self.model.fields)]

    def load(self) -> float | None:
        return load_max_over_mean(self.looked_up)


EXCHANGES: dict[str, type[TableExchange]] = {"replicated": Replicated, "alltoall": AllToAll}
