"""Asynchronous training through parameter servers: ``asp`` and ``ssp``, in simulated time.

Each worker loops on its own: pull, compute, push. What the servers do with a push (apply
it at once, lr / N for its staleness), when a pull may go (the SSP clock bound: Ho et
al. 2013) and when a worker reads its cache instead of pulling (SSPTable's cache) are the
rules' (:class:`sim.training.rules.ASP`, :class:`~sim.training.rules.SSP`); here a worker
reads its :class:`~sim.training.store.ParameterCache` while it is fresh, else waits at the
gate until the rules let its pull through.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from sim.recorder import UpdateRecord
from sim.simulated.strategies.base import (
    Strategy,
    block,
    compute,
    cpu,
    gradient_pushed,
    pull,
    pull_params,
    push,
)
from sim.training.store import ParameterCache
from sim.training.workload import Worker


class ASP(Strategy):
    """Downpour-style asynchronous SGD (Dean et al. 2012); ``ssp`` when the rules bound the
    clocks (one class for both: the gate is the rules')."""


    def start(self) -> None:
        ctx = self.ctx
        self.store = ctx.server.store
        self.decoded = np.zeros(ctx.model.size)
        self.advanced = ctx.env.event()  # a worker's clock moved: the gate may open
        self.start_loops()

    def model_of_record(self) -> np.ndarray:
        return self.store.params

    def gate(self, w: Worker) -> Generator[simpy.Event, Any, int | None]:
        """Wait until the rules let ``w`` pull; returns its clock gap (the store notes it)."""
        with self.ctx.recorder.span(w.index, "wait"):
            while not self.store.may_pull(w.index) and not self.ctx.recorder.finished:
                yield self.advanced
        return self.store.admit(w.index)

    def fail_worker(self, index: int) -> None:
        """A dead worker no longer holds the others at the gate: it may open."""
        super().fail_worker(index)
        self.wake_gate()

    def wake_gate(self) -> None:
        if self.advanced.callbacks:  # someone waits at the gate
            self.advanced.succeed()
            self.advanced = self.ctx.env.event()

    def work(self, w: Worker) -> Generator[simpy.Event, Any, None]:
        ctx, rec = self.ctx, self.ctx.recorder
        cache = ParameterCache(ctx.rules, np.zeros(ctx.model.size))
        while not rec.finished:
            if not cache.fresh:  # pull (the cache is never filled with sparse rows)
                gap = yield from self.gate(w)
                if rec.finished:
                    return
                if ctx.model.sparse and ctx.config.strategy.sparse_comm:
                    yield from self.sparse_iteration(w, cache.params)
                    continue
                cache.pulled((yield from pull_params(ctx, w, cache.params)), gap)
            version = cache.version
            # applied once the servers have processed it; the worker's next pull would be
            # answered only after that (FIFO servers), so it waits as on a receive
            loss = yield from gradient_pushed(ctx, w, cache.params, ctx.cpu.applied_push_s,
                                              "wire", self.decoded)
            if loss is None:
                return
            self.finish(w, self.store.push(w.index, self.decoded, version, loss))
            if cache.pushed(self.decoded):  # read-my-writes: an SGD step on the worker
                yield from cpu(ctx, w.index, "update", ctx.cpu.update_s(cache.params.nbytes))

    def sparse_iteration(self, w: Worker,
                         replica: np.ndarray) -> Generator[simpy.Event, Any, None]:
        """Pull only the features the batch touches, push only their gradient."""
        ctx, rec = self.ctx, self.ctx.recorder
        X, y = w.next_batch()
        rows = np.unique(X[1])
        version = yield from pull(ctx, w, replica, rows)
        loss, idx, val = ctx.model.sparse_loss_grad(replica, X, y)
        yield from compute(ctx, w)
        processed = yield from push(ctx, w, idx.nbytes + val.nbytes, ctx.cpu.applied_push_s)
        yield from block(ctx, w.index, "wire", processed)
        if rec.finished:
            return
        self.finish(w, self.store.push(w.index, val, version, loss, rows=idx))

    def finish(self, w: Worker, update: UpdateRecord) -> None:
        """``w``'s gradient made ``update``: its clock moved, so the gate may open."""
        w.clock = update.clock
        self.wake_gate()
        self.ctx.recorder.record(update)


class SSP(ASP):
    """Stale synchronous parallel: clocks may differ by at most ``strategy.staleness``."""

