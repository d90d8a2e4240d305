"""What a checkpoint costs and when one is due (``[checkpoint]``), for both recoveries.

A checkpoint holds the parameters and, with momentum, the velocity (``state_bytes``).
Blocking: training waits ``write_s``. Background (CheckFreq, Mohan et al. FAST 2021):
training waits only for a snapshot copy in memory (``snapshot_s``, at the host's copy
rate; and first for the previous write, if it is still going), then the write runs beside
it and the checkpoint is usable once it has ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.faults.storage import Storage, get_storage


@dataclass(frozen=True)
class CheckpointPlan:
    """When checkpoints are taken and what each costs (s), for ``writers`` ranks writing
    equal parts of ``state_bytes`` in parallel."""

    every_steps: int | None
    every_s: float | None
    background: bool
    storage: Storage
    state_bytes: float
    writers: int
    snapshot_s: float  # one writer's copy of its part into memory

    @property
    def enabled(self) -> bool:
        return self.every_steps is not None or self.every_s is not None

    @property
    def write_s(self) -> float:
        return self.storage.write_s(self.state_bytes, self.writers)

    @property
    def read_s(self) -> float:
        return self.storage.read_s(self.state_bytes, self.writers)

    def timing(self, now_s: float, previous_durable_s: float) -> tuple[float, float]:
        """(how long training waits, when the checkpoint is usable) for one begun at
        ``now_s`` after one usable from ``previous_durable_s`` (times of the same clock)."""
        if self.background:  # the snapshot first waits for the previous write
            wait = max(0.0, previous_durable_s - now_s) + self.snapshot_s
            return wait, now_s + wait + self.write_s
        return self.write_s, now_s + self.write_s

    def due(self, step: int, since_last_s: float) -> bool:
        """Whether a checkpoint follows update ``step``, ``since_last_s`` after the last one
        began (or the run's start)."""
        if self.every_steps is not None:
            return step % self.every_steps == 0
        return self.every_s is not None and since_last_s >= self.every_s


def state_bytes(ctx: Any) -> float:
    """Bytes of a checkpoint: ``checkpoint.state_bytes``, else the parameters (float32 of
    a timing profile's layers when there are no numbers) and the momentum buffer, if any."""
    if ctx.config.checkpoint.state_bytes is not None:
        return ctx.config.checkpoint.state_bytes
    params = ctx.params.nbytes if ctx.numerics else float(sum(ctx.layers.grad_bytes))
    return params * (2 if ctx.config.workload.momentum > 0 else 1)


def checkpoint_plan(ctx: Any, writers: int) -> CheckpointPlan:
    """The run's checkpoints (``ctx``: a strategy's :class:`~sim.simulated.strategies.Context`)."""
    cfg = ctx.config.checkpoint
    nbytes = state_bytes(ctx)
    return CheckpointPlan(cfg.every_steps, cfg.every_s, cfg.mode == "background",
                          get_storage(cfg.storage), nbytes, writers,
                          ctx.cpu.data_s(nbytes / writers) if nbytes else 0.0)
