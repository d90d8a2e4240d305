"""The context a rank program runs in: its communicator, workload, rules and clock."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sim.config import Config
from sim.real.executors.timing import Heartbeat, Waiter
from sim.training.rules import Rules
from sim.workloads.workload import Workload


@dataclass
class RankContext:
    """Everything a rank program works with."""

    comm: Any  # mpi4py communicator (COMM_WORLD)
    workload: Workload
    rules: Rules  # what the strategy does: the same rules the simulator follows
    waiter: Waiter
    impl: str  # allreduce implementation: schedule or mpi
    heartbeat: Heartbeat
    t0: float = 0.0  # perf_counter() at the common start (set by start_clock)

    @property
    def config(self) -> Config:
        return self.workload.config

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    def now(self) -> float:
        """Seconds since the common start."""
        return time.perf_counter() - self.t0

    def start_clock(self) -> None:
        """Every rank is ready (warmed up): start the common clock, as rank 0 reads it."""
        self.comm.Barrier()
        self.t0 = self.comm.bcast(time.perf_counter(), root=0)

    def warm_kernels(self, params: Any) -> None:
        """One gradient on a fixed batch, outside the worker's batch stream and the clock:
        code paths, caches and first-touch of the model's buffers are warm when it starts."""
        workload = self.workload
        worker = workload.workers[min(self.rank, workload.n - 1)]
        rows = worker.shard[:worker.batch]
        scratch = params.copy()
        workload.model.loss_grad(params, workload.data.X_train[rows],
                                 workload.data.y_train[rows], out=scratch)
