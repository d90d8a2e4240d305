"""The sums a split replica's passes ask of their tensor group, on real ranks.

A pass of :class:`sim.training.stage_numerics.ShardRunner` yields, at each tensor-parallel
allreduce point, the partial array its shards sum (Megatron-LM's f and g operators) and
takes the sum back. Here each yield is answered by an allreduce over the tensor group's
communicator (the shards of one stage of one replica), by the run's implementation (the
simulator's schedule for ``strategy.collective`` over point-to-point messages, or MPI's
``Allreduce``), one allreduce object per point the plan lists
(:attr:`sim.training.parallel_plan.Stage.tensor_allreduces`), sized by it.

A NaN or Inf makes a kernel raise and ends a pass early. Its rank still takes part in the
rest of the pass's sums, with NaN, because its peers wait for them, and the pass's output is
NaN: the NaN travels on to every rank of the replica, so that they all see the step diverge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from sim.kernels import NonFiniteError
from sim.real.executors.assemble import Part
from sim.real.executors.rank_clock import Waiter
from sim.real.executors.rank_collectives import Allreduce, make_allreduce
from sim.training.parallel_plan import Stage
from sim.training.stage_numerics import Pass


class TensorGroup:
    """The allreduces of one rank's passes, forward's and backward's in the order the passes
    yield (``itemsize``: bytes per value, to size them from the plan's bytes)."""

    def __init__(self, comm: Any, stage: Stage, itemsize: int, impl: str, algorithm: str,
                 waiter: Waiter) -> None:
        def sized(phase: str) -> list[Allreduce]:
            return [make_allreduce(impl, comm, algorithm, point.nbytes // itemsize, waiter)
                    for point in stage.tensor_allreduces if point.phase == phase]

        self.phases = {"forward": sized("forward"), "backward": sized("backward")}

    def run(self, pass_: Pass, phase: str, fallback: Callable[[], Any]) -> tuple[Any, bool]:
        """Run ``pass_`` (of ``phase``), answering its i-th yield with the i-th sum:
        (its result, True); after a NaN or Inf, (``fallback()``, False)."""
        reducers, done = self.phases[phase], 0
        try:
            partial = next(pass_)
            while True:
                flat = np.ascontiguousarray(partial).reshape(-1)
                reducers[done](flat)
                done += 1
                partial = pass_.send(flat.reshape(partial.shape))
        except StopIteration as stop:
            return stop.value, True
        except NonFiniteError:
            pass_.close()
        return self.lost(phase, fallback, done), False

    def lost(self, phase: str, fallback: Callable[[], Any], done: int = 0) -> Any:
        """A pass that cannot go on: its sums from the ``done``-th on, with NaN; then
        ``fallback()``."""
        for reducer in self.phases[phase][done:]:
            reducer(np.full(reducer.count, np.nan))
        return fallback()

    def take(self, t0: float) -> list[Part]:
        """The sums' spans since the last call (posting and combining: overhead; blocked:
        wire), in seconds since ``t0`` (perf_counter at the run's start)."""
        return [p for reducers in self.phases.values() for r in reducers for p in r.take(t0)]

    @property
    def messages(self) -> int:
        return sum(r.messages for reducers in self.phases.values() for r in reducers)
