"""Synchronous training through parameter servers: ``bsp-ps`` and ``backup``.

``bsp-ps``: every worker computes its gradient and pushes it; once every worker has
pushed, the servers average the gradients in worker order, step the parameters and send
them back, and the next step's forward begins. It runs through the overlap of communication
with backprop (:mod:`sim.simulated.backprop_overlap`), so ``strategy.pipelining`` can push
each layer or bucket as soon as backprop has produced it.

``backup`` (Chen et al. 2016, "Revisiting distributed synchronous SGD"): each worker loops
pull, compute, push; a step closes as soon as N - b gradients read at its version have
arrived, and the workers whose gradients it used pull once it has. A worker still
computing then finishes and pushes (its gradient is dropped on arrival as stale) before it
pulls, as TensorFlow's SyncReplicasOptimizer does; with ``strategy.late_gradients =
"cancel"`` it is interrupted when the step closes and pulls at once.

When a step closes, how its gradients are combined, what happens to late ones and when a
worker may pull are the rules' (:class:`sim.training.rules.BSPPS`,
:class:`~sim.training.rules.Backup`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from sim.network.network_builder import build_network, endpoint_machines, with_host_link
from sim.network.topology import place
from sim.recorder import UpdateRecord
from sim.simulated.backprop_overlap import ParameterServerChannel
from sim.simulated.server import ParameterServer
from sim.simulated.strategies.base import (
    FAILED,
    Strategy,
    cpu,
    gradient_pushed,
    pull_params,
    pull_rows,
    push,
    push_rows,
    reply_handshake,
)
from sim.simulated.strategies.pipelined import PipelinedStrategy
from sim.trace import Facts
from sim.training.messages import Message, message_slice
from sim.training.workload import Worker


class Backup(Strategy):
    """Synchronous SGD with b backup workers: each step uses the first N - b gradients."""


    def start(self) -> None:
        ctx = self.ctx
        self.store = ctx.server.store
        self.replicas = [np.zeros(ctx.model.size) for _ in ctx.workers]
        self.decoded = np.zeros(ctx.model.size)  # the store keeps its own copy
        self.closed = ctx.env.event()  # fires when the step in progress closes
        self.start_loops()

    def model_of_record(self) -> np.ndarray:
        return self.store.params

    def work(self, w: Worker) -> Generator[simpy.Event, Any, None]:
        """``w``'s loop, one gradient (or one wait for its step to close) a round."""
        while not self.ctx.recorder.finished:
            try:
                yield from self.round(w)
            except simpy.Interrupt as stop:
                if stop.cause == FAILED:
                    raise
                # cancelled: the step closed without this worker; it pulls again

    def fail_worker(self, index: int) -> None:
        """Without the dead worker the gradients arrived may be enough to close the step."""
        super().fail_worker(index)
        store = self.store
        if store.arrived and self.ctx.rules.step_full(store):
            self.close(self.ctx.rules.close(store))

    def round(self, w: Worker) -> Generator[simpy.Event, Any, None]:
        ctx, rec = self.ctx, self.ctx.recorder
        if not self.store.may_pull(w.index):  # its gradient waits in the open step
            with rec.span(w.index, "wait"):
                yield self.closed
            return
        version = yield from pull_params(ctx, w, self.replicas[w.index])
        loss = yield from gradient_pushed(ctx, w, self.replicas[w.index], ctx.cpu.kept_push_s,
                                          "wait", self.decoded)
        if loss is None:
            return
        update = self.store.push(w.index, self.decoded, version, loss)  # None: kept or dropped
        if update is not None:  # this gradient closed the step
            self.close(update)

    def close(self, update: UpdateRecord) -> None:
        """The step closed: the workers left out are cancelled if the rules say so, the
        ones waiting go on, and the update is recorded."""
        ctx = self.ctx
        for w in ctx.workers:
            w.clock = int(self.store.clocks[w.index])
        if ctx.rules.cancels_late:
            for w in ctx.workers:
                if w.index not in self.store.last_step and self.loops[w.index].is_alive:
                    self.loops[w.index].interrupt("step closed")
        closed, self.closed = self.closed, ctx.env.event()
        closed.succeed(update)
        ctx.recorder.record(update)


class BSPPS(PipelinedStrategy):
    """Synchronous SGD through sharded parameter servers: push, barrier, pull."""


    def start(self) -> None:
        self.setup_servers()
        self.start_overlap(ParameterServerChannel(self.ctx.env,
                                                   self.ctx.config.strategy.priority,
                                                   self.push, self.apply_message, self.pull))

    def setup_servers(self) -> None:
        """Where each layer's keys lie on the servers, and the step's sum."""
        ctx = self.ctx
        self.total = np.zeros(ctx.params.size)
        self.compressed_bytes: int | None = None
        offsets = np.concatenate([[0], np.cumsum(ctx.layers.grad_bytes)])
        self.key_edges = offsets / offsets[-1]  # layer boundaries as fractions of the keys
        self.alone: dict[tuple[int, int], float] = {}
        self.replicas: dict[int, np.ndarray] = {}  # workers' copies, when they cache rows

    def model_of_record(self) -> np.ndarray:
        return self.ctx.server.store.params

    def keys(self, msg: Message) -> tuple[float, float]:
        return float(self.key_edges[msg.lo]), float(self.key_edges[msg.hi + 1])

    def message_bytes(self, msg: Message) -> int:
        return self.compressed_bytes if self.compressed_bytes is not None else msg.nbytes

    def compute_gradients(self) -> None:
        """The gradients, each replaced by what the servers receive (decoded, if compressed)."""
        super().compute_gradients()
        if self.ctx.config.strategy.compression != "none":
            for w in self.ctx.workers:
                message, self.compressed_bytes = w.codec.encode(w.grad)
                w.codec.decode(message, w.grad)

    def push(self, w: int, msg: Message) -> Generator[simpy.Event, Any, None]:
        """Worker ``w`` sends the message; each shard receives its part and adds it to the
        step's sum (on its core, queued behind earlier work). After its last message of
        the step the worker sends its (held) pull request."""
        ctx, worker, lapped = self.ctx, self.ctx.workers[w], self.overlap.overlapped
        if ctx.traffic is not None:  # the rows the batch touched, not key ranges
            yield from push_rows(ctx, worker, ctx.cpu.kept_push_s, lapped)
            return
        yield from push(ctx, worker, self.message_bytes(msg), ctx.cpu.kept_push_s,
                        self.keys(msg), lapped, (msg.lo, msg.hi))
        if msg.lo == 0:
            shards = int(np.count_nonzero(ctx.server.share))
            yield from cpu(ctx, w, "overhead", ctx.cpu.message.requests_s(shards), lapped)

    def pull(self, w: int, msg: Message) -> Generator[simpy.Event, Any, None]:
        """Each shard answers ``w``'s held request with its part of the message's layers
        (uncompressed), after the work queued on its core; ``w`` receives them. With
        tables on the servers: the rows ``w``'s next batch touches (its cached ones when
        they are due) and the dense part."""
        if self.ctx.traffic is not None:
            yield from pull_rows(self.ctx, self.ctx.workers[w], None, self.overlap.overlapped)
            return
        yield from self.pull_range(w, self.ctx.workers[w].host, self.keys(msg), msg.nbytes,
                                   (msg.lo, msg.hi), self.overlap.overlapped)

    def pull_range(self, rank: int, host: int, keys: tuple[float, float], nbytes: int,
                   layers: tuple[int, int], overlapped: bool,
                   ) -> Generator[simpy.Event, Any, None]:
        """Each shard answers ``rank``'s (on network ``host``) held request with its part of
        ``keys`` (``nbytes`` in all, uncompressed; ``layers`` for the trace), after the work
        queued on its core; ``rank`` receives them."""
        ctx, server, costs = self.ctx, self.ctx.server, self.ctx.cpu
        message = costs.message
        parts = server.range_bytes(*keys, nbytes)
        owners = parts > 0
        facts = Facts("pull", nbytes, layers)
        with ctx.recorder.span(rank, "wire", overlapped, facts):
            answers = message.answer_s(parts[owners], costs.host.serve_pull_s)
            served = server.process(owners, answers, what="pull")
            if served is not None:
                yield served
            yield from ctx.hosts.wait(rank, server.send_range(host, *keys, nbytes,
                                                              facts.sends))
            yield from reply_handshake(ctx, rank, parts)
        yield from cpu(ctx, rank, "overhead", float(message.receive_s(parts[owners]).sum()),
                       overlapped)

    def apply_message(self, step: int, msg: Message) -> None:
        """The servers average the message's layers over the workers and step them (each
        shard's update of its part is queued on its core before it answers pulls; with
        tables on the servers, of the rows the step's batches touched)."""
        ctx = self.ctx
        if ctx.traffic is not None:
            union = ctx.traffic.union_push([w.last_batch[0] for w in ctx.workers])
            owners, costs = union.request > 0, ctx.cpu
            # the mean and the step of the union's rows, and of the dense part
            dense = ctx.traffic.dense_bytes[owners]
            ctx.server.process(owners, np.array([
                costs.table_step_s(b, r) + costs.closed_step_s(d)
                for b, r, d in zip(union.row_bytes[owners], union.rows[owners], dense,
                                   strict=True)]), what="apply")
        else:
            self.apply_keys(self.keys(msg), msg.nbytes)
        if self.ctx.numerics:
            self.apply_numbers(msg)

    def apply_keys(self, keys: tuple[float, float], nbytes: int) -> None:
        """The shards owning ``keys`` (``nbytes`` of gradient in all) spend the CPU of
        closing the step: their own code, the mean (a pass at the summing rate) and the step,
        queued on their cores."""
        ctx = self.ctx
        parts = ctx.server.range_bytes(*keys, nbytes)
        costs = ctx.cpu
        ctx.server.process(parts > 0, np.array([costs.closed_step_s(p)
                                                for p in parts[parts > 0]]), what="apply")

    def apply_numbers(self, msg: Message) -> None:
        """The workers' mean gradient of the message's layers, and the SGD step of them."""
        ctx = self.ctx
        keys = message_slice(msg, ctx.model)
        mean = ctx.rules.mean([w.grad[keys] for w in ctx.workers], self.total[keys])
        ctx.server.store.sgd.step(mean, ctx.rules.lr(0), keys)

    def gradient(self, worker: Worker, params: np.ndarray) -> float:
        """``worker``'s gradient, on its cached rows as it holds them if it keeps any."""
        traffic = self.ctx.traffic
        if traffic is not None and traffic.caches:
            replica = self.replicas.get(worker.index)
            if replica is None:
                replica = self.replicas[worker.index] = np.empty_like(params)
            np.copyto(replica, params)
            traffic.read(worker.index, replica)
            params = replica
        return worker.gradient(params)

    def apply_step(self, step: int) -> float:
        self.ctx.server.store.version += 1
        return float(np.mean(self.losses))

    def alone_s(self, msg: Message) -> float:
        """Every worker pushes ``msg`` at once, then the servers send it back to all.

        Pipelined steps also overlap one message's pull with the next one's push (opposite
        link directions), so with several messages T can beat this M and
        overlap_efficiency can exceed 1.
        """
        if (msg.lo, msg.hi) not in self.alone:
            ctx = self.ctx
            env = simpy.Environment()
            options = dict(ctx.network_options)
            placement = options.pop("placement")
            host_link, machines = options.pop("host_link"), options.pop("machines")
            n_hosts = ctx.n + len(ctx.server.hosts)
            network = build_network(env, ctx.network.fabric, n_hosts, **options)
            hosts = place(network.topology, n_hosts, placement)
            network = with_host_link(network, host_link,
                                     endpoint_machines(hosts, machines, n_hosts))
            server = ParameterServer(network, hosts[ctx.n:], ctx.server.store)
            server.follow(ctx.server)
            keys = self.keys(msg)
            traffic = ctx.traffic
            if traffic is not None:  # the mean push and pull of the run's batches
                _, reply, pushed = traffic.mean_parts()

            def exchange() -> Generator[simpy.Event, Any, None]:
                yield simpy.AllOf(env, [server.push_parts(h, pushed) if traffic else
                                        server.push_range(h, *keys, self.message_bytes(msg))
                                        for h in hosts[:ctx.n]])
                yield simpy.AllOf(env, [server.send_parts(h, reply) if traffic else
                                        server.send_range(h, *keys, msg.nbytes)
                                        for h in hosts[:ctx.n]])

            env.run(env.process(exchange()))
            self.alone[msg.lo, msg.hi] = float(env.now)
        return self.alone[msg.lo, msg.hi]
