"""Synchronous strategies whose steps overlap gradient communication with backprop
(``strategy.pipelining``: :mod:`sim.simulated.backprop_overlap`).

The numbers and the timing are kept apart: every worker's gradient for step k+1 is
computed (on the parameters after step k) when step k's last message lands, and the
overlap decides when each layer's compute and each message happen. This is exact
because a step's backward cannot start before all of the previous step's messages
have landed (its forward needs every layer).

Summary metrics, over the steps the run completed: C = the slowest worker's compute of
each step, summed (so waiting for stragglers is not in it: ``straggler_wait_s`` is the mean
worker's compute short of C); M = ``comm_alone_s``, each message alone on the network, one
after another, per step, summed; T = ``sim_time_s``. ``iter_s`` = T / steps;
``exposed_comm_s`` = (T - C) / steps; ``pipelining_ratio`` = M / C;
``overlap_efficiency`` = (C + M - T) / min(C, M), the share of the shorter of compute and
communication hidden behind the other, in [0, 1] (clipped: CPU costs of messages beyond
the wire can make T exceed C + M); ``speedup_vs_none`` = T_none / T, with T_none = C plus
the whole-gradient message alone per step (1 exactly for ``none``; exact for an allreduce,
which starts when the slowest worker is done, and an upper bound for parameter servers with
stragglers, whose early pushes overlap the slowest worker's compute even without
pipelining). ``comm_s`` stays the
measured exposed communication of the mean worker, as for every strategy;
``overlapped_comm_s`` is the communication that ran beside its compute.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import simpy

from sim.simulated.backprop_overlap import BackpropOverlap
from sim.simulated.strategies.base import Strategy, prologue
from sim.trace import Facts
from sim.training.messages import MODES, Message, Packing, StepCosts, plan_messages, ready_times
from sim.training.workload import Worker

UNBOUNDED = 1 << 62  # steps: the run stops on the recorder, not on a step count


class PipelinedStrategy(Strategy):
    """Base: subclasses give the channel, the numerics of a step and the message time."""

    def start_overlap(self, channel: Any) -> None:
        ctx = self.ctx
        strategy = ctx.config.strategy
        self.layers = layers = ctx.layers
        batch = ctx.config.workload.batch  # how a step divides over the layers, once
        self.shares = ctx.compute.shares_of(layers, batch)
        mode = MODES[strategy.pipelining]
        # when backward produces each layer in a step of the nominal compute time (no
        # noise): what Horovod's fusion packs by
        ready = ready_times(layers.split(ctx.compute.base_s, self.shares).backward_s)
        self.messages = plan_messages(self.layers.grad_bytes, strategy.pipelining,
                                      packing=Packing(strategy.bucket_bytes,
                                                      strategy.fusion_bytes, strategy.cycle_s,
                                                      ready))
        self.slowest_compute_s = 0.0  # sum over steps of the slowest worker's compute
        self.worker_compute_s = np.zeros(ctx.n)  # each worker's, over the same steps
        self._step_compute: dict[int, np.ndarray] = {}
        charged = ctx.cpu.charged  # a host with CPU costs (not the ideal one)
        on_core = charged and ctx.compute.on_host
        self.overlap = BackpropOverlap(ctx.env, ctx.n, self.messages, channel, self.costs,
                             ctx.recorder.add_span, self.step_done,
                             busy=ctx.hosts.run if on_core else ctx.hosts.sleep,
                             prologue=self.prologue if self.has_prologue else None,
                             tag=self.tag,
                             own=ctx.hosts.own_parts,
                             cycle_s=strategy.cycle_s if mode.cycled else 0.0)
        if ctx.numerics:
            self.compute_gradients()
        self.overlap.start(UNBOUNDED)

    def tag(self, msg: Message, overlapped: bool) -> AbstractContextManager:
        """The spans recorded inside are ``msg``'s collective (for the trace)."""
        facts = Facts("collective", self.message_bytes(msg), (msg.lo, msg.hi))
        return self.ctx.recorder.tagging(facts, overlapped)

    @property
    def has_prologue(self) -> bool:
        """Whether a step does something before its forward pass: the host's per-step code
        and batch, on a host with CPU costs."""
        return self.ctx.cpu.charged

    def prologue(self, worker: int) -> Generator[simpy.Event, Any, None]:
        yield from prologue(self.ctx, self.ctx.workers[worker])

    def costs(self, worker: int, step: int) -> StepCosts:
        seconds = self.ctx.compute.duration(worker, self.ctx.env.now)
        self._step_compute.setdefault(step, np.zeros(self.ctx.n))[worker] = seconds
        return self.layers.split(seconds, self.shares)

    def step_done(self, step: int) -> None:
        compute = self._step_compute.pop(step, np.zeros(self.ctx.n))
        self.slowest_compute_s += float(compute.max())
        self.worker_compute_s += compute
        loss = self.apply_step(step) if self.ctx.numerics else math.nan
        for w in self.ctx.workers:
            w.clock = step + 1
        self.ctx.recorder.update(-1, step + 1, step, 0, loss,
                                 self.ctx.n * self.ctx.config.workload.batch)
        if self.ctx.recorder.finished:
            self.overlap.stopped = True
        elif self.ctx.numerics:
            self.compute_gradients()

    def compute_gradients(self) -> None:
        """Every worker's gradient at the current parameters (numerics of the next step)."""
        self.losses = [self.gradient(w, self.model_of_record()) for w in self.ctx.workers]

    def gradient(self, worker: Worker, params: np.ndarray) -> float:
        """``worker``'s mini-batch loss; its gradient at ``params`` left in its ``grad``."""
        return worker.gradient(params)

    def apply_step(self, step: int) -> float:
        """Apply the step's update (the messages have all landed); returns the mean loss."""
        raise NotImplementedError

    def alone_s(self, msg: Message) -> float:
        """Seconds ``msg`` takes alone on an idle network."""
        raise NotImplementedError

    def message_bytes(self, msg: Message) -> int:
        """Bytes on the wire for ``msg`` (smaller when compressed)."""
        return msg.nbytes

    def summary_extra(self) -> dict[str, Any]:
        steps = max(1, self.ctx.recorder.iteration)
        C = self.slowest_compute_s
        M = steps * sum(self.alone_s(m) for m in self.messages)
        T = float(self.ctx.env.now)
        whole = plan_messages(self.layers.grad_bytes, "none", 0)[0]
        T_none = T if self.ctx.config.strategy.pipelining == "none" \
            else C + steps * self.alone_s(whole)
        return self.pipelining_summary(C, M, T, T_none, len(self.messages))

    def pipelining_summary(self, C: float, M: float, T: float, T_none: float,
                           messages: int) -> dict[str, Any]:
        """The pipelining keys (module docstring) from C, M, T and T_none (s) and the
        ``messages`` per step."""
        rec, steps = self.ctx.recorder, max(1, self.ctx.recorder.iteration)
        hidden = (C + M - T) / min(C, M) if min(C, M) > 0 else None
        return {"pipelining": self.ctx.config.strategy.pipelining,
                "priority": self.ctx.config.strategy.priority,
                "messages_per_step": messages,
                "timing": self.layers.source + ("" if self.ctx.numerics else " (timing only)"),
                "comm_alone_s": M,
                "overlapped_comm_s": float(rec.overlapped_s.mean()),
                "straggler_wait_s": C - float(self.worker_compute_s.mean()),
                "iter_s": T / steps,
                "exposed_comm_s": (T - C) / steps,
                "pipelining_ratio": M / C if C > 0 else None,
                "overlap_efficiency": None if hidden is None else min(1.0, max(0.0, hidden)),
                "speedup_vs_none": T_none / T if T > 0 else None}
