"""Activations and their gradients between the stages of a split replica, on real ranks.

A rank of stage s talks to the same shard of stages s - 1 and s + 1 of its replica
(:meth:`sim.training.parallel_plan.Plan.prev_rank` and ``next_rank``): forward F(k)'s output
goes to the next stage, backward B(k)'s input gradient to the previous one, as
point-to-point messages on a communicator of their own. At a step's start every receive of
the step is posted, into a buffer per microbatch that is reused every step (a pass is done
with its input before the next step); a pass then waits for its own. Sends are
non-blocking and completed at the step's end, their arrays kept alive until then. Tags:
2k for microbatch k's activation, 2k + 1 for its gradient; MPI keeps the messages of one
tag between two ranks in order, so step j + 1's never overtake step j's.

Each receive's blocked interval and each send's posting time are logged, so that after the
run a receive's blocked time can be cut into waiting for the sender (before it posted the
message: the pipeline's bubble) and the message's own time (after).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from sim.real.executors.assemble import Part
from sim.real.executors.rank_clock import Waiter
from sim.training.parallel_plan import Plan

Sent = tuple[int, int, float]  # destination rank, tag, posted at (s)
Received = tuple[int, int, float, float]  # source rank, tag, blocked from, to (s)


def activation_tag(microbatch: int) -> int:
    return 2 * microbatch


def gradient_tag(microbatch: int) -> int:
    return 2 * microbatch + 1


def pass_of(tag: int) -> str:
    """The pass whose output a message of ``tag`` carries, and which takes it up on the
    receiving stage: "F3" for microbatch 3's activation, "B3" for its gradient."""
    return f"{'FB'[tag % 2]}{tag // 2}"


class StageLinks:
    """One rank's messages to and from its neighbouring stages, step by step.

    ``in_width`` and ``out_width``: the widths of the stage's input and output rows (its
    first layer's inputs, its last layer's outputs); ``now()``: seconds since the run's
    start. Ranks are numbered in ``comm`` as in the plan (a duplicate of the world)."""

    def __init__(self, comm: Any, plan: Plan, rank: int, in_width: int, out_width: int,
                 waiter: Waiter, now: Callable[[], float]) -> None:
        self.comm, self.waiter, self.now = comm, waiter, now
        self.prev, self.next = plan.prev_rank(rank), plan.next_rank(rank)
        rows, m = plan.microbatch_rows, plan.microbatches
        self.activations = ([np.empty((rows, in_width)) for _ in range(m)]
                            if self.prev is not None else [])
        self.gradients = ([np.empty((rows, out_width)) for _ in range(m)]
                          if self.next is not None else [])
        self.pending: dict[int, Any] = {}  # tag -> the posted receive
        self.sending: list[tuple[Any, np.ndarray]] = []  # (request, the array it sends)
        self.parts: list[Part] = []  # posting (overhead), completing the sends (wire)
        self.sent: list[Sent] = []
        self.received: list[Received] = []
        self.messages = 0

    def post(self) -> None:
        """Post every receive of a step (call at its start)."""
        from mpi4py import MPI

        began = self.now()
        for k, buf in enumerate(self.activations):
            self.pending[activation_tag(k)] = self.comm.Irecv([buf, MPI.DOUBLE], self.prev,
                                                              activation_tag(k))
        for k, buf in enumerate(self.gradients):
            self.pending[gradient_tag(k)] = self.comm.Irecv([buf, MPI.DOUBLE], self.next,
                                                            gradient_tag(k))
        self.parts.append(("overhead", began, self.now()))

    def activation(self, microbatch: int) -> np.ndarray:
        """Microbatch ``microbatch``'s input from the previous stage (waits for it)."""
        return self._receive(activation_tag(microbatch), self.prev,
                             self.activations[microbatch])

    def gradient(self, microbatch: int) -> np.ndarray:
        """The gradient of this stage's output for ``microbatch``, from the next stage."""
        return self._receive(gradient_tag(microbatch), self.next, self.gradients[microbatch])

    def _receive(self, tag: int, source: int | None, buf: np.ndarray) -> np.ndarray:
        began = self.now()
        self.waiter.one(self.pending.pop(tag))
        self.received.append((source, tag, began, self.now()))
        return buf

    def send_activation(self, microbatch: int, x: np.ndarray) -> None:
        self._send(x, self.next, activation_tag(microbatch))

    def send_gradient(self, microbatch: int, delta: np.ndarray) -> None:
        self._send(delta, self.prev, gradient_tag(microbatch))

    def _send(self, x: np.ndarray, dest: int | None, tag: int) -> None:
        from mpi4py import MPI

        began = self.now()
        x = np.ascontiguousarray(x)
        self.sending.append((self.comm.Isend([x, MPI.DOUBLE], dest, tag), x))
        self.messages += 1
        self.sent.append((dest, tag, began))
        self.parts.append(("overhead", began, self.now()))

    def finish(self) -> None:
        """Complete the step's sends (their receivers have them, or MPI has buffered them).
        Raises RuntimeError if a posted receive was never waited for."""
        if self.pending:
            raise RuntimeError(f"receives posted but not taken: tags {sorted(self.pending)}")
        began = self.now()
        self.waiter.all([request for request, _ in self.sending])
        self.sending = []
        self.parts.append(("wire", began, self.now()))

    def take(self) -> tuple[list[Part], list[Sent], list[Received]]:
        """What was logged since the last call: (parts, sends, receives)."""
        out = (self.parts, self.sent, self.received)
        self.parts, self.sent, self.received = [], [], []
        return out
