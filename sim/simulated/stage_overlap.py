"""A stage's data-parallel allreduce overlapped with its last backward
(``parallel.dp_overlap``): Megatron-LM's ``overlap_grad_reduce`` with gradient buckets
(Narayanan et al. 2021, Sec. 4; PyTorch DDP's buckets, Li et al. 2020) on a split replica.

A stage's shard's gradient is cut into messages as plain bsp's (:func:`sim.training.messages.
plan_messages`: one per layer under wfbp, buckets of strategy.bucket_bytes), within each
chunk. A layer's gradient is whole once the stage's last backward pass through it (the last
microbatch's, of its chunk) is done; a message may go once every layer it carries is whole
on every rank of the data group. The messages then queue on bsp's channel
(:class:`sim.simulated.backprop_overlap.AllreduceChannel`: one allreduce at a time, in the
order they became ready, or lowest layer first with strategy.priority) while the rest of
the backward runs; :class:`GroupOverlap` is what the channel drives, one per data group.
A rank whose passes are done waits for its group's last message: ``wait`` until every rank
of the group had produced it, ``wire`` (the exposed, non-overlapped tail) after.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import simpy

from sim.simulated.backprop_overlap import AllreduceChannel
from sim.training.messages import Message, plan_messages
from sim.training.stage_schedule import Op

# steps the channel is started for: the rank loops end the run, not the channel
_FOREVER = 1 << 62


def stage_messages(weight_bytes: np.ndarray, chunks: tuple[tuple[int, int], ...], mode: str,
                   bucket_bytes: float) -> list[Message]:
    """A stage's gradient messages (positions in its layers), each chunk's planned on its
    own as bsp plans a model's, the last chunk's first (its backward ends first)."""
    out = []
    for lo, hi in reversed(chunks):
        out += [Message(x.lo + lo, x.hi + lo, x.nbytes)
                for x in plan_messages(weight_bytes[lo:hi].astype(int).tolist(), mode,
                                       bucket_bytes)]
    return out


def final_backwards(ops: tuple[Op, ...]) -> frozenset[Op]:
    """Each chunk's last backward pass in ``ops``: the one that completes its gradients."""
    last: dict[int, Op] = {}
    for op in ops:
        if op.kind == "B":
            last[op.chunk] = op
    return frozenset(last.values())


class GroupOverlap:
    """One data group's messages on an :class:`AllreduceChannel`: the members (their index
    in the group) say when a message is produced (:meth:`produced`), and wait for the
    step's last allreduce (:meth:`finished`). ``reduce(message)`` runs one allreduce."""

    def __init__(self, env: simpy.Environment, size: int, messages: list[Message],
                 priority: bool,
                 reduce: Callable[[Message], Generator[simpy.Event, Any, Any]]) -> None:
        self.env, self.workers, self.messages = env, size, messages
        self.at = {msg.lo: m for m, msg in enumerate(messages)}  # lowest position -> message
        # what AllreduceChannel reads and writes (sim.simulated.backprop_overlap)
        self.comm_start = np.zeros((size, len(messages)))
        self.blocked = np.zeros((size, len(messages), 2))
        self.overlapped, self.stopped = True, False
        self.done: dict[int, simpy.Event] = {}
        self.channel = AllreduceChannel(env, priority, lambda step, msg: reduce(msg))
        env.process(self.channel.run(self, _FOREVER))

    def tag(self, message: Message, overlapped: bool) -> AbstractContextManager:
        return nullcontext()  # the allreduce records its own spans

    def landed(self, w: int, m: int) -> None:
        """Nothing waits per message: a rank's next step waits for the whole step."""

    def step_done(self, step: int) -> None:
        self.finished(step).succeed()

    def finished(self, step: int) -> simpy.Event:
        """Fires once every message of ``step`` is allreduced."""
        if step not in self.done:
            self.done[step] = self.env.event()
        return self.done[step]

    def produced(self, member: int, step: int, position: int) -> None:
        """Member ``member`` has finished the last backward of the layer at ``position``;
        the message it is the lowest layer of is ready there."""
        m = self.at.get(position)
        if m is not None:
            self.channel.ready(self, member, step, m)

    def last_ready_s(self) -> float:
        """When the current step's last message was ready on every member."""
        return float(self.blocked[0, :, 1].max()) if len(self.messages) else 0.0

    def wait(self, recorder: Any, rank: int, step: int) -> Generator[simpy.Event, Any, None]:
        """``rank`` (its passes done) waits for the step's last allreduce: ``wait`` while a
        member had not produced the last message, ``wire`` after."""
        start, done = self.env.now, self.finished(step)
        if not done.processed:
            yield done
        ready = min(max(start, self.last_ready_s()), self.env.now)
        recorder.add_span(rank, "wait", start, ready)
        recorder.add_span(rank, "wire", ready, self.env.now)
