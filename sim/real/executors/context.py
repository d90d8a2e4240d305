"""The context a rank program runs in: its communicator, workload, rules and clock."""

from __future__ import annotations

import gc
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.real.executors.rank_clock import Heartbeat, Waiter
from sim.real.executors.rank_spec import RankSpec
from sim.training.rules import Rules
from sim.training.workload import Workload

if TYPE_CHECKING:
    from sim.config import Config


@dataclass
class RankContext:
    """Everything a rank program works with."""

    comm: Any  # mpi4py communicator (COMM_WORLD)
    workload: Workload
    rules: Rules  # what the strategy does: the same rules the simulator follows
    waiter: Waiter
    impl: str  # allreduce implementation: schedule or mpi
    heartbeat: Heartbeat
    spec: RankSpec  # the launcher's: the validated config, the message path, faults, ...
    t0: float = 0.0  # perf_counter() at the common start (set by start_clock)

    @property
    def config(self) -> Config:
        return self.workload.config

    @property
    def workdir(self) -> Path:
        """Shared with the launcher: markers, the runner's records."""
        return self.spec.workdir

    @property
    def faults(self) -> dict[str, Any]:
        """The spec's failures and checkpoints part (:mod:`sim.real.launch.relaunch`);
        empty without [faults] and [checkpoint]."""
        return self.spec.faults or {}

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    @property
    def transport(self) -> str:
        """How the parameter-server programs move messages: "mpi" or "grpc" (the parent
        read it from cluster.transport: :func:`sim.training.real_checks.real_transport`)."""
        return self.spec.transport

    def now(self) -> float:
        """Seconds since the common start."""
        return time.perf_counter() - self.t0

    def start_clock(self) -> None:
        """Every rank is ready (warmed up): start the common clock, as rank 0 reads it
        (a job started again after a failure keeps the first job's: the spec's origin).
        What the rank holds by now (the imported program, the workload, the links) leaves
        the cyclic collector's generations (``gc.freeze``): a full collection inside the
        timed loop walked all of it, 42-59 ms at a gRPC run's 118th call (2026-11-29), a
        pause of Python's runtime that the simulator does not model and no strategy causes."""
        gc.collect()
        gc.freeze()
        self.barrier()
        self.t0 = self.comm.bcast(time.perf_counter(), root=0)
        origin = self.faults.get("origin")
        if origin is not None:  # a job started again: one clock since the run's start
            self.t0 = float(origin)
        if self.faults and self.rank == 0:  # for the runner: when this job began
            (self.workdir / "clock.json").write_text(json.dumps(
                {"t0": self.t0, "start_s": self.now()}))

    def barrier(self) -> None:
        """Every rank got here: MPI's blocking barrier, or, where waits yield (a real-time
        rank, :mod:`sim.real.executors.rank_sched`), a nonblocking one polled by the waiter:
        MPI's spins and would keep a slower rank of the same core off it."""
        if not self.waiter.yields:
            self.comm.Barrier()
            return
        self.waiter.one(self.comm.Ibarrier())

    def warm_kernels(self, params: Any) -> None:
        """One gradient on a fixed batch, outside the worker's batch stream and the clock:
        code paths, caches and first-touch of the model's buffers are warm when it starts."""
        workload = self.workload
        worker = workload.workers[min(self.rank, workload.n - 1)]
        rows = worker.shard[:worker.batch]
        scratch = params.copy()
        workload.model.loss_grad(params, workload.data.X_train[rows],
                                 workload.data.y_train[rows], out=scratch)
