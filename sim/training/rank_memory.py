"""Bytes each rank of a run holds at its peak, for every run of a dense model or a
transformer profile: data parallel or split. One formula, the plan's
(:mod:`sim.training.parallel_plan`), for the summary keys both executors report
(:func:`memory_summary`) and for refusing a config that does not fit (``run.memory =
"refuse"``, :mod:`sim.training.validator`).

- A worker rank holds its stage's shard of the parameters, their gradients, the momentum
  buffer (when ``workload.momentum > 0``) and the stashed inputs of the microbatches in
  flight (:class:`~sim.training.parallel_plan.Memory`). A data-parallel run is the plan of
  one stage, one shard and one microbatch: the whole model and one batch's activations.
- A parameter-server rank holds its key range of the whole model's parameters (the largest
  of ``cluster.servers`` ranges, as :func:`numpy.array_split` cuts them) and their
  momentum; no gradients of its own and no activations. The buffers its rules keep for a
  synchronous step's arrived gradients are not counted, nor, on workers, a strategy's extra
  copies (error-feedback residuals, local SGD's or EASGD's reference parameters).

Every rank is held against ``compute.device``'s memory, servers included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sim.training.parallel_plan import Memory, Plan, build_plan, config_layers, plannable
from sim.training.strategies import row_of

if TYPE_CHECKING:
    from sim.config import Config


@dataclass(frozen=True)
class RunMemory:
    """A run's ranks at their peak: a worker rank of each stage (its shards hold the same),
    and the largest parameter-server rank (None without servers)."""

    stages: tuple[Memory, ...]
    server: Memory | None

    @property
    def memory_bytes_by_stage(self) -> list[int]:
        return [m.total_bytes for m in self.stages]

    @property
    def peak_memory_bytes(self) -> int:
        """The largest rank's bytes, workers and servers."""
        servers = [] if self.server is None else [self.server.total_bytes]
        return max(self.memory_bytes_by_stage + servers)


def server_memory(params: int, servers: int, momentum: bool, itemsize: int) -> Memory:
    """The largest of ``servers`` key ranges of ``params`` parameters: its parameters and,
    with ``momentum``, their momentum buffer (bytes)."""
    largest = -(-params // servers)  # array_split gives the first ranges one more
    return Memory(largest * itemsize, 0, largest * itemsize if momentum else 0, 0)


def run_memory(config: Config, plan: Plan | None = None) -> RunMemory | None:
    """The ranks' memory of a resolved config (``plan``: its plan, built if not given);
    None for a config whose layers no plan knows (a timing profile, a sparse model:
    :func:`~sim.training.parallel_plan.plannable`). ``config`` passed the validator's
    [parallel] checks (:mod:`sim.training.validator`), which it runs before this one."""
    if not plannable(config):
        return None
    layers = config_layers(config)
    plan = build_plan(config, layers) if plan is None else plan
    servers = row_of(config).server_ranks(config)
    server = None if servers == 0 else server_memory(
        sum(x.params for x in layers), servers, config.workload.momentum > 0, plan.itemsize)
    return RunMemory(tuple(stage.memory for stage in plan.stages), server)


def memory_summary(config: Config, device_bytes: float | None,
                   plan: Plan | None = None) -> dict[str, Any]:
    """summary.json's memory keys (docs/reference/results.md): ``peak_memory_bytes``,
    ``memory_bytes_by_stage``, ``device_memory_bytes`` (``device_bytes``, None where not
    known) and ``memory_fits`` (None where the device's memory is not known); none for a
    config :func:`run_memory` has no figures for."""
    memory = run_memory(config, plan)
    if memory is None:
        return {}
    peak = memory.peak_memory_bytes
    return {"peak_memory_bytes": peak,
            "memory_bytes_by_stage": memory.memory_bytes_by_stage,
            "device_memory_bytes": device_bytes,
            "memory_fits": None if device_bytes is None else peak <= device_bytes}
