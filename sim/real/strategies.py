"""Real strategies by name, what they need, and the context a rank program runs in.

Each entry names the module of the rank program and how many ranks it needs. The module has
``run(ctx) -> RankLog`` (one rank) and may have ``combine(logs, parts)``, which rank 0 calls
on the gathered logs before they are replayed. ``run`` warms up first (kernels, and one
full-size exchange with every peer, so that connection set-up and first-touch costs are not
timed: the simulator models steady state), then calls ``ctx.start_clock()``. Modules are
imported only on the ranks, so the parent process never imports mpi4py.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.config import Config
from sim.errors import UserError
from sim.real.parts import Parts
from sim.real.timing import Heartbeat, Waiter


@dataclass
class RankContext:
    """Everything a rank program works with."""

    comm: Any  # mpi4py communicator (COMM_WORLD)
    parts: Parts
    waiter: Waiter
    impl: str  # allreduce implementation: schedule or mpi
    heartbeat: Heartbeat
    t0: float = 0.0  # perf_counter() at the common start (set by start_clock)

    @property
    def config(self) -> Config:
        return self.parts.config

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
        worker = self.parts.workers[min(self.rank, self.parts.n - 1)]
        rows = worker.shard[:worker.batch]
        data = self.parts.data
        scratch = params.copy()
        self.parts.model.loss_grad(params, data.X_train[rows], data.y_train[rows], out=scratch)


@dataclass(frozen=True)
class RealStrategy:
    name: str
    module: str  # has run(ctx: RankContext) -> RankLog, optionally combine(logs, parts)
    servers: bool  # one parameter-server rank after the workers

    def ranks(self, config: Config) -> int:
        return config.cluster.workers + (1 if self.servers else 0)

    def run(self, ctx: RankContext) -> Any:
        return importlib.import_module(self.module).run(ctx)

    def combine(self, logs: list[Any], parts: Parts) -> None:
        combine: Callable[..., None] | None = getattr(importlib.import_module(self.module),
                                                      "combine", None)
        if combine is not None:
            combine(logs, parts)


REAL_STRATEGIES: dict[str, RealStrategy] = {s.name: s for s in (
    RealStrategy("bsp", "sim.real.bsp", servers=False),
    RealStrategy("bsp-ps", "sim.real.ps", servers=True),
    RealStrategy("backup", "sim.real.ps", servers=True),
    RealStrategy("asp", "sim.real.ps", servers=True),
    RealStrategy("ssp", "sim.real.ps", servers=True),
)}


def check_supported(config: Config, source: str = "config") -> RealStrategy:
    """The real strategy for ``config``, or UserError saying what real runs do not support."""
    kind = config.strategy.kind
    if kind not in REAL_STRATEGIES:
        raise UserError(f"{source}: strategy.kind {kind!r} has no real runner yet; real runs "
                        f"support {', '.join(REAL_STRATEGIES)}")
    if config.strategy.compression != "none":
        raise UserError(f"{source}: strategy.compression {config.strategy.compression!r}: "
                        "real runs send dense gradients only (use \"none\")")
    from sim.workloads.models import MODELS

    if config.strategy.pipelining != "none" and kind != "bsp":
        raise UserError(f"{source}: strategy.pipelining {config.strategy.pipelining!r}: "
                        "real runs pipeline bsp only (bsp-ps pipelining is simulated only)")
    if config.run.time_limit_s is not None:
        raise UserError(f"{source}: run.time_limit_s: real runs stop after run.iterations "
                        "updates; drop the time limit")
    if config.strategy.priority:
        raise UserError(f"{source}: strategy.priority: not run for real (the ranks would "
                        "have to agree which ready message goes next)")
    if getattr(config.workload, "profile", None) is not None or \
            not getattr(config.workload, "numerics", True):
        raise UserError(f"{source}: workload.profile / numerics = false: a timing profile "
                        "has no data or kernels to run for real")
    if MODELS[config.workload.model].sparse:
        raise UserError(f"{source}: workload.model {config.workload.model!r}: real runs "
                        "support dense models only")
    strategy = REAL_STRATEGIES[kind]
    if strategy.servers and config.cluster.servers != 1:
        raise UserError(f"{source}: cluster.servers = {config.cluster.servers}: real runs "
                        "use one parameter-server rank (set cluster.servers = 1)")
    return strategy
