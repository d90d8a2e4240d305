"""Asynchronous training through parameter servers: ``asp`` and ``ssp``.

Each worker loops on its own: pull, compute, push; the server applies every gradient
when it arrives, scaled by lr / N so that N gradients move the model as far as one
synchronous step (with one worker this is plain sequential SGD). Staleness is the
number of updates applied between the worker's read and its own update.

``ssp`` (Ho et al. 2013, "More effective distributed ML via a stale synchronous
parallel parameter server") adds a bound s: a worker whose clock is more than s
ahead of the slowest worker's blocks until that one catches up.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from sim.training.strategies.base import Strategy
from sim.training.worker import Worker, compute


class ASP(Strategy):
    """Downpour-style asynchronous SGD (Dean et al. 2012)."""

    name = "asp"
    uses_servers = True

    def start(self) -> None:
        ctx = self.ctx
        self.decoded = np.zeros(ctx.model.size)
        for w in ctx.workers:
            ctx.env.process(self.work(w))

    def model_of_record(self) -> np.ndarray:
        return self.ctx.server.params

    def gate(self, w: Worker) -> Generator[simpy.Event, Any, int | None]:
        """Wait until ``w`` may start its next iteration; returns the clock gap, if bounded."""
        return None
        yield  # a generator that waits for nothing

    def clock_advanced(self, w: Worker) -> None:
        """Hook: ``w`` finished an iteration."""

    def work(self, w: Worker) -> Generator[simpy.Event, Any, None]:
        ctx, rec = self.ctx, self.ctx.recorder
        server = ctx.server
        replica = np.zeros(ctx.model.size)
        while not rec.finished:
            gap = yield from self.gate(w)
            if rec.finished:
                return
            if ctx.model.sparse and ctx.config.strategy.sparse_comm:
                yield from self.sparse_iteration(w, replica, gap)
                continue
            with rec.span(w.index, "comm"):
                version = yield from server.pull(w.host, replica)
            loss = w.gradient(replica)
            yield from compute(ctx, w)
            message, nbytes = w.codec.encode(w.grad)
            with rec.span(w.index, "comm"):
                yield server.push(w.host, nbytes)
            if rec.finished:
                return
            staleness = server.version - version
            w.codec.decode(message, self.decoded)
            server.apply(self.decoded, self.step_lr(staleness) / ctx.n)
            self.finish(w, version, staleness, loss, gap)

    def sparse_iteration(self, w: Worker, replica: np.ndarray,
                         gap: int | None) -> Generator[simpy.Event, Any, None]:
        """Pull only the features the batch touches, push only their gradient."""
        ctx, rec, server = self.ctx, self.ctx.recorder, self.ctx.server
        X, y = w.next_batch()
        rows = np.unique(X[1])
        with rec.span(w.index, "comm"):
            version = yield from server.pull(w.host, replica, rows)
        loss, idx, val = ctx.model.sparse_loss_grad(replica, X, y)
        yield from compute(ctx, w)
        with rec.span(w.index, "comm"):
            yield server.push(w.host, idx.nbytes + val.nbytes)
        if rec.finished:
            return
        staleness = server.version - version
        server.apply_sparse(idx, val, self.step_lr(staleness) / ctx.n)
        self.finish(w, version, staleness, loss, gap)

    def finish(self, w: Worker, version: int, staleness: int, loss: float,
               gap: int | None) -> None:
        w.clock += 1
        self.clock_advanced(w)
        self.ctx.recorder.update(w.index, w.clock, version, staleness, loss, w.batch, gap)


class SSP(ASP):
    """Stale synchronous parallel: clocks may differ by at most ``strategy.staleness``."""

    name = "ssp"

    def start(self) -> None:
        self.bound = self.ctx.config.strategy.staleness
        self.advanced = self.ctx.env.event()
        super().start()

    def slowest(self) -> int:
        return min(w.clock for w in self.ctx.workers)

    def gate(self, w: Worker) -> Generator[simpy.Event, Any, int]:
        with self.ctx.recorder.span(w.index, "wait"):
            while w.clock - self.slowest() > self.bound and not self.ctx.recorder.finished:
                yield self.advanced
        return w.clock - self.slowest()

    def clock_advanced(self, w: Worker) -> None:
        self.advanced.succeed()
        self.advanced = self.ctx.env.event()
