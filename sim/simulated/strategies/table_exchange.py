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
  with sizes per pair is :func:`sim.network.alltoall.alltoallv`. A step runs its parts in
  the real executor's order (:mod:`sim.real.executors.bsp_tables`): each owner gathers its
  rows after its batch, the forward all-to-all goes once every owner has, then the dense
  forward and backward, the backward all-to-all, the owners' scatter of the row gradients
  and the dense allreduce. On links of one rate the order would not matter; a token
  bucket (:mod:`sim.network.token_bucket`) refills while the step computes, so the forward
  exchange finds it fuller than the backward one.

Every message of these exchanges costs the ranks their CPU as the dense allreduce's do:
each rank pays its messages' costs on the collective's busiest path
(:meth:`~sim.training.host_costs.CpuCosts.collective_s`, recorded as ``overhead``) before
the exchange's wire time; on the ideal host the wire pays LogGP's o instead.

The numbers are the same in all three: every table row is stepped by the mean gradient of
the step's batches (the owners' update of their rows is the replicas' update of the same
rows), which is what the tests hold.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from sim.network.alltoall import Alltoallv, alltoallv
from sim.network.collectives import Collective, get_collective
from sim.simulated.strategies.base import block, cpu, everyone
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
        """One step's communication after backward; ``nbytes``: the whole gradient's."""
        raise NotImplementedError

    @property
    def before_forward(self) -> bool:
        """Whether a step also exchanges before its forward (:meth:`forward_part`)."""
        return False

    def forward_part(self, worker: int) -> Generator[simpy.Event, Any, None]:
        """Worker ``worker``'s part of the step's exchange before its forward pass."""
        raise NotImplementedError

    def messages_cpu_s(self, collective: Collective, nbytes: int) -> float:
        """CPU seconds a worker spends on the messages of ``collective`` of ``nbytes`` among
        the workers (its busiest path, as the dense allreduce's; 0 on the ideal host)."""
        return self.ctx.cpu.collective_s(collective.schedule(self.ctx.n, nbytes), 1.0)

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
        yield from everyone(self.ctx, "overhead", self.messages_cpu_s(self.gather, int(block)),
                            overlapped)
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
        # each worker's CPU on the forward all-to-all's messages and the backward's
        self.forward_cpu_s = self.messages_cpu_s(Alltoallv(self.forward), 0)
        self.backward_cpu_s = self.messages_cpu_s(Alltoallv(self.forward.T), 0)
        self.looked_up = np.zeros(ctx.n)  # ids each owner looked up
        self._step: _ForwardStep | None = None  # the step whose owners are gathering rows
        self._last: _ForwardStep | None = None  # the step whose forward exchange started

    @property
    def before_forward(self) -> bool:
        return True

    def forward_part(self, worker: int) -> Generator[simpy.Event, Any, None]:
        """``worker`` gathers the rows it owns for every worker's bags (the host's per-row
        costs; nothing on the ideal host), pays its CPU on the exchange's messages
        (``overhead``), waits for the other owners (``wait``), then the forward all-to-all
        (``wire``), which the last owner to arrive starts."""
        ctx = self.ctx
        if self._step is None:  # the step's first owner here: what every owner looks up
            every = [np.concatenate(ids) for ids in zip(*(self._occurrences(w) for w in
                                                           ctx.workers), strict=True)]
            self._step = _ForwardStep(self.map.lookup_work(every), ctx.env)
        step = self._step
        work = step.lookups
        yield from cpu(ctx, worker, "compute", self._rows_s(work.values[worker],
                                                           work.ids[worker]))
        yield from cpu(ctx, worker, "overhead", self.forward_cpu_s)
        step.arrived += 1
        if step.arrived == ctx.n:
            self._step, self._last = None, step
            ctx.env.process(self._forward_exchange(step))
        yield from block(ctx, worker, "wait", step.started)
        yield from block(ctx, worker, "wire", step.done)

    def _forward_exchange(self, step: _ForwardStep) -> Generator[simpy.Event, Any, None]:
        env = self.ctx.env
        step.started.succeed()
        started = env.now
        yield from alltoallv(self.ctx.network, self.forward, self.strategy.hosts)
        self.elapsed_s += env.now - started
        step.done.succeed()

    def exchange(self, nbytes: int, overlapped: bool) -> Generator[simpy.Event, Any, None]:
        ctx = self.ctx
        lookups = self._last.lookups  # this step's, from its forward part
        self.looked_up += lookups.ids
        received = float(self.forward.sum()) / ctx.n  # a worker's pooled vectors, mean
        self.count(self.touched(), received, received + self.dense_bytes)
        env = ctx.env
        yield from everyone(ctx, "overhead", self.backward_cpu_s, overlapped)
        yield from self.timed(alltoallv(ctx.network, self.forward.T, self.strategy.hosts),
                              overlapped)
        # each owner scatters the gradients it received into its rows by index
        yield simpy.AllOf(env, [env.process(cpu(ctx, w.index, "compute",
                                                self._rows_s(values, ids)))
            for w, ids, values in zip(ctx.workers, lookups.ids, lookups.values, strict=True)])
        yield from self.strategy.allreduce(self.dense_bytes, overlapped)

    def _rows_s(self, values: float, ids: float) -> float:
        """An owner's gather (or scatter) of ``ids`` rows, ``values`` values in all, on the
        host (0 on the ideal one). A replayed run's measured compute already holds it: the
        real executor times its gathers and scatters as compute (:mod:`sim.validation.
        replay` sums a step's compute spans)."""
        if self.ctx.replay is not None:
            return 0.0
        return self.ctx.cpu.table_rows_s(VALUE_BYTES * values, ids)

    def _occurrences(self, worker: Any) -> list[np.ndarray]:
        """Every id a worker's last batch looks up, per table (wide first)."""
        X = worker.last_batch[0]
        wide = np.append(X.wide.reshape(-1), np.full(len(X), self.model.cross_buckets))
        return [wide] + [X.ids[:, f, :].reshape(-1) for f in range(self.model.fields)]

    def load(self) -> float | None:
        return load_max_over_mean(self.looked_up)


class _ForwardStep:
    """A step's forward exchange: what each owner looks up, how many owners have, and
    the events of the all-to-all's start and end."""

    def __init__(self, lookups: Any, env: simpy.Environment) -> None:
        self.lookups, self.arrived = lookups, 0
        self.started, self.done = env.event(), env.event()


EXCHANGES: dict[str, type[TableExchange]] = {"replicated": Replicated, "alltoall": AllToAll}
