"""The real rank programs run in-process: configs, a rank's context, and whole programs on
the fake MPI world of :mod:`fake_mpi`.

This is the one place the direct real-side tests build a config, a rank's spec and its
:class:`~sim.real.executors.context.RankContext`, the way the rank program does
(:func:`sim.real.executors.rank.train`): the workload, rules and strategy are built from the
config on every rank, as each MPI process builds its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from fake_mpi import Ran, run_ranks

from sim.config import Config
from sim.real.executors.assemble import RankLog
from sim.real.executors.context import RankContext
from sim.real.executors.rank_clock import Heartbeat, Waiter
from sim.real.executors.rank_spec import RankSpec
from sim.real.executors.registry import real_strategy
from sim.real.launch.real_run import RealOptions, wait_mode
from sim.training.strategies import make_rules
from sim.training.workload import build_workload


def real_config(data: dict[str, Any]) -> Config:
    """``data`` validated as ``sim real`` validates a config (checked as supported for
    real on shared memory)."""
    from sim.training.validator import validate

    config = validate(data)
    real_run(config)
    return config


def real_run(config: Config) -> tuple[int, str]:
    """(ranks, message path) of a real run of ``config``, as the launcher's check says
    (UserError for what real runs do not support)."""
    from sim.training.validator import validate_real

    real = validate_real(config, "shm")
    return real.ranks, real.transport


def rank_spec(config: Config, workdir: Path, options: RealOptions | None = None,
              faults: dict[str, Any] | None = None, repeat: int = 0) -> RankSpec:
    """What the launcher hands a rank for ``config`` (``sim.real.launch.real_run.run_once``'s
    spec), its work directory ``workdir``."""
    options = options or RealOptions()
    workdir.mkdir(parents=True, exist_ok=True)
    ranks, transport = real_run(config)
    wait = wait_mode(options.wait, ranks, config.compute.time_s is None)
    return RankSpec(config, workdir, workdir / "result.json", options.net, transport,
                    options.impl, wait, repeat, faults)


def rank_context(comm: Any, config: Config, workdir: Path, impl: str = "schedule",
                 wait: str = "spin", faults: dict[str, Any] | None = None) -> RankContext:
    """Rank ``comm.Get_rank()``'s context, built as the rank program builds it."""
    spec = rank_spec(config, workdir, RealOptions(impl=impl, wait=wait), faults)
    workload, rules = build_workload(config), make_rules(config)
    waiter = Waiter(wait)
    return RankContext(comm, workload, rules, waiter, impl, Heartbeat(None), spec)


def run_program(config: Config, workdir: Path, impl: str = "schedule", wait: str = "spin",
                faults: dict[str, Any] | None = None, combine: bool = True,
                program: Any = None) -> tuple[list[RankLog], Ran]:
    """``config``'s real program (or ``program``, a module with ``run(ctx)``) on every rank
    of a fake world; the ranks' logs, combined as rank 0 combines them (``combine``)."""
    strategy = real_strategy(config)
    ranks = strategy.ranks(config)

    def one(comm: Any) -> RankLog:
        ctx = rank_context(comm, config, workdir, impl, wait, faults)
        return (program or strategy.program(config)).run(ctx)

    ran = run_ranks(ranks, one)
    logs = ran.results
    if combine:
        combiner = getattr(program, "combine", None) if program else None
        if combiner is not None:
            combiner(logs, build_workload(config))
        elif program is None:
            strategy.combine(logs, build_workload(config))
    return logs, ran


def write_spec(path: Path, spec: RankSpec) -> Path:
    """``spec`` as the launcher writes spec.json."""
    path.write_text(spec.to_json())
    return path


def sgd_reference(config: Config, gradient: Any) -> list[np.ndarray]:
    """Synchronous SGD in numpy: the parameters before and after each update, every worker's
    gradient (``gradient(model, params, X, y)``) on its own batch stream, summed in worker
    order, scaled by 1 / workers, stepped at the config's rate (no momentum, no decay)."""
    workload = build_workload(config)
    params, out = workload.params.copy(), [workload.params.copy()]
    for _ in range(config.run.iterations):
        grads = [gradient(workload.model, params, *w.next_batch()) for w in workload.workers]
        total = grads[0].copy()
        for g in grads[1:]:
            total = total + g
        params = params - config.workload.lr * (total * (1.0 / len(grads)))
        out.append(params)
    return out


def kernel_gradient(model: Any, params: np.ndarray, X: Any, y: np.ndarray) -> np.ndarray:
    """The model's own gradient kernel."""
    grad = np.zeros_like(params)
    model.loss_grad(params, X, y, out=grad)
    return grad
