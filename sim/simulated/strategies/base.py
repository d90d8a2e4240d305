"""What every simulated strategy shares: the run context and the strategy interface.

A strategy here decides *when* things happen (SimPy processes on the simulated network);
*what* happens (apply, accumulate or drop a push, the pull gate, combining, learning rates)
is its rules' (:mod:`sim.training.rules`), which the real executor follows too.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import simpy

from sim.network.message_cost import ShardCosts, shard_costs
from sim.recorder import Recorder
from sim.simulated.hosts import Hosts
from sim.simulated.server import ParameterServer
from sim.trace import Facts
from sim.training.compute_model import ComputeModel
from sim.training.embedding_traffic import EmbeddingTraffic, Parts
from sim.training.host_costs import CpuCosts
from sim.training.messages import LayerCosts
from sim.training.parallel_plan import Plan
from sim.training.rules import Rules
from sim.training.strategies import row_of
from sim.training.workload import Worker, Workload
from sim.workloads.models import Model

if TYPE_CHECKING:
    from sim.config import Config


@dataclass
class Context:
    """Everything a strategy works with, built by :mod:`sim.simulated.engine`."""

    env: simpy.Environment
    config: Config
    network: Any  # FlowNetwork or AnalyticalNetwork
    workload: Workload
    rules: Rules
    recorder: Recorder
    done: simpy.Event  # fires when the recorder has every update
    server: ParameterServer | None  # for strategies whose rules use servers
    network_options: dict[str, Any]  # topology, model, placement...: to rebuild the network
    hosts: Hosts  # the cores every rank's CPU work runs on (ranks: workers, then servers)
    cpu: CpuCosts  # seconds of CPU per activity
    recovery: Any = None  # what the run does about failures (sim.simulated.recovery)
    # the parallelism plan a model-parallel strategy runs (None: none, or a model the plan
    # cannot split, timed by a profile)
    plan: Plan | None = None
    placed: np.ndarray | None = None  # the network host of every rank (workers, then servers)
    # wide-deep's tables on the servers: the bytes per shard of every pull and push, from
    # the ids touched (None: a model without tables, or tables not on the servers)
    traffic: EmbeddingTraffic | None = None
    # the CPU side of each kind of message to or from the shards (see message_costs)
    message_memo: dict[tuple, ShardCosts] = field(default_factory=dict, repr=False)
    # a real run's own compute, data and update times (sim.simulated.replayed; None: modelled)
    replay: Any = None

    @property
    def model(self) -> Model | None:
        return self.workload.model

    @property
    def params(self) -> np.ndarray:
        """The initial parameters."""
        return self.workload.params

    @property
    def workers(self) -> list[Worker]:
        return self.workload.workers

    @property
    def compute(self) -> ComputeModel:
        return self.workload.compute

    @property
    def layers(self) -> LayerCosts:
        return self.workload.layers

    @property
    def numerics(self) -> bool:
        """False: timing only (a profile, no data and no parameters)."""
        return self.workload.numerics

    @property
    def n(self) -> int:
        return len(self.workers)


FAILED = "failed"  # the cause of the interrupt that stops a failed worker's loop


class Strategy(ABC):
    """A training strategy: starts its SimPy processes and names its model of record.

    Strategies whose workers loop on their own (the parameter-server ones) start them with
    :meth:`start_loops`; elastic recovery (:mod:`sim.simulated.elastic_recovery`) then stops a
    failed worker (:meth:`fail_worker`) and starts it again (:meth:`rejoin_worker`).
    """

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.loops: list[simpy.Process] = []

    def work(self, w: Worker) -> Generator[simpy.Event, Any, None]:
        """Worker ``w``'s loop, for strategies that :meth:`start_loops`."""
        raise NotImplementedError(f"{type(self).__name__} has no per-worker loop")

    def start_loops(self) -> None:
        """Start every worker's :meth:`work`."""
        self.loops = [self.ctx.env.process(self._loop(w)) for w in self.ctx.workers]

    def _loop(self, w: Worker) -> Generator[simpy.Event, Any, None]:
        try:
            yield from self.work(w)
        except simpy.Interrupt as stop:
            if stop.cause != FAILED:
                raise

    def fail_worker(self, index: int) -> None:
        """Worker ``index`` fails now: its loop stops where it is (what it was sending or
        computing is lost)."""
        if self.loops[index].is_alive:
            self.loops[index].interrupt(FAILED)

    def rejoin_worker(self, index: int) -> None:
        """Worker ``index`` starts again (its loop pulls first)."""
        self.loops[index] = self.ctx.env.process(self._loop(self.ctx.workers[index]))

    @abstractmethod
    def start(self) -> None:
        """Start the SimPy processes that train until ``ctx.recorder.finished``."""

    @abstractmethod
    def model_of_record(self) -> np.ndarray:
        """The parameters that evaluations measure."""

    def summary_extra(self) -> dict[str, Any]:
        """Strategy-specific summary keys (by default the rules', from the servers' state)."""
        server = self.ctx.server
        return {} if server is None else self.ctx.rules.summary(server.store)


def cpu(ctx: Context, rank: int, kind: str, seconds: float,
        overlapped: bool = False) -> Generator[simpy.Event, Any, None]:
    """``seconds`` of CPU work on worker ``rank``'s core, recorded as ``kind``
    (``overlapped``: for pipelined communication, which runs beside the worker's compute).

    Overlapped communication's CPU still runs on the rank's one thread, so it is the rank's
    time, charged as ``kind`` like any other's (not as communication beside its compute):
    over the interval it held the thread, which :meth:`sim.simulated.hosts.Hosts.own_parts`
    leaves out of the worker's own compute and waits."""
    if seconds <= 0:  # nothing to run (the ideal host): no span either, it would be empty
        return
    if ctx.replay is not None:
        seconds = ctx.replay.scaled(rank, kind, seconds)
    message = kind == "overhead"  # the rank's end of a message
    if not overlapped:
        with ctx.recorder.span(rank, kind):
            yield from ctx.hosts.run(rank, seconds, message=message)
        return
    tag = ctx.recorder.notes.tag  # the message's, for the trace (a collective's)
    facts = tag[0] if tag is not None and tag[1] else None
    held = [math.inf, math.inf]  # [start, end] on the thread, filled in by run
    try:
        yield from ctx.hosts.run(rank, seconds, beside=held, message=message)
    finally:  # interrupted: up to now (nothing if it never held the thread)
        held[1] = min(held[1], ctx.env.now)
        held[0] = min(held[0], held[1])
        ctx.recorder.add_span(rank, kind, held[0], held[1], facts=facts)


def everyone(ctx: Context, kind: str, seconds: float,
             overlapped: bool = False) -> Generator[simpy.Event, Any, None]:
    """Every worker spends ``seconds`` of CPU on ``kind`` (the parts of a collective that
    run on each rank); ends when the last has."""
    yield from together(ctx, [w.index for w in ctx.workers], kind, seconds, overlapped)


def together(ctx: Context, ranks: Sequence[int], kind: str, seconds: float,
             overlapped: bool = False) -> Generator[simpy.Event, Any, None]:
    """Each of ``ranks`` spends ``seconds`` of CPU on ``kind`` (a group's collective);
    ends when the last has."""
    if seconds <= 0:
        return
    env = ctx.env
    yield simpy.AllOf(env, [env.process(cpu(ctx, rank, kind, seconds, overlapped))
                            for rank in ranks])


def block(ctx: Context, rank: int, kind: str, event: simpy.Event | None,
          overlapped: bool = False, facts: Facts | None = None,
          ) -> Generator[simpy.Event, Any, Any]:
    """Wait for ``event`` (recorded as ``kind``: wire or wait, with ``facts`` for the
    trace); returns its value. None: nothing to wait for."""
    if event is None:
        return None
    with ctx.recorder.span(rank, kind, overlapped, facts):
        return (yield from ctx.hosts.wait(rank, event))


def prologue(ctx: Context, worker: Worker) -> Generator[simpy.Event, Any, None]:
    """What ``worker`` does before each gradient: the framework's per-step code and
    gathering its batch."""
    yield from cpu(ctx, worker.index, "overhead", ctx.cpu.step_s)
    yield from cpu(ctx, worker.index, "data",
                   ctx.cpu.data_s(worker.batch_bytes, worker.batch))


def compute(ctx: Context, worker: Worker) -> Generator[simpy.Event, Any, float]:
    """One step of ``worker``'s loop: :func:`prologue`, then its gradient; returns the
    gradient's duration (s)."""
    yield from prologue(ctx, worker)
    duration = ctx.compute.duration(worker.index, ctx.env.now)
    if ctx.compute.on_host:
        yield from cpu(ctx, worker.index, "compute", duration)
    else:  # a modelled time or an accelerator: no host core
        with ctx.recorder.span(worker.index, "compute"):
            yield from ctx.hosts.sleep(worker.index, duration)
    return duration


class Endpoint(NamedTuple):
    """A rank as :func:`push` sees it: its number and its network host (a
    :class:`~sim.training.workload.Worker` is one; so is a model-parallel rank)."""

    index: int
    host: int


def push(ctx: Context, worker: Worker | Endpoint, nbytes: float,
         apply_s: Callable[[float], float],
         keys: tuple[float, float] = (0.0, 1.0), overlapped: bool = False,
         layers: tuple[int, int] | None = None,
         ) -> Generator[simpy.Event, Any, simpy.Event | None]:
    """``worker`` sends a gradient of ``nbytes`` (for ``keys``, fractions of the vector;
    ``layers``, first and last, for the trace) to the shards that own them; returns the
    event of the shards having received and processed it (message CPU + ``apply_s(bytes)``
    each; None when that costs no CPU): the worker does not wait for that, the update
    happens then."""
    server = ctx.server
    costs = message_costs(ctx, keys, nbytes, apply_s)
    yield from cpu(ctx, worker.index, "overhead", costs.sender_s, overlapped)
    facts = Facts("push", nbytes, layers)
    first = ctx.network.sent
    delivered = server.push(worker.host, nbytes, keys)
    facts.sends.extend(range(first, ctx.network.sent))  # the flows' ids on the trace
    return (yield from taken(ctx, worker, delivered, costs.owners, costs.owned, costs.shard_s,
                             overlapped, facts))


def taken(ctx: Context, worker: Worker | Endpoint, delivered: simpy.Event,
          owners: np.ndarray, owned: np.ndarray, shard_s: np.ndarray, overlapped: bool,
          facts: Facts) -> Generator[simpy.Event, Any, simpy.Event | None]:
    """``worker`` waits (``wire``) until the shards have its push (``owned`` bytes to each
    of ``owners``), and, over a transport whose calls are answered, until their handlers
    have taken it and their responses are in (:func:`answered`). Returns the event of the
    shards having spent ``shard_s`` on it (None when that costs no CPU)."""
    if ctx.cpu.message.answered_calls:
        call = ctx.env.process(answered(ctx, worker, delivered, owners, owned, shard_s,
                                        facts.sends))
        applied = yield from block(ctx, worker.index, "wire", call, overlapped, facts)
        yield from cpu(ctx, worker.index, "overhead",
                       len(owned) * ctx.cpu.message.receive_s(0.0), overlapped)
        return applied
    yield from block(ctx, worker.index, "wire", delivered, overlapped, facts)
    if not np.any(shard_s > 0):  # the servers would take no CPU: nothing to wait for
        return None
    return ctx.server.process(owners, shard_s, worker.index, owned, sends=facts.sends)


def answered(ctx: Context, worker: Worker | Endpoint, delivered: simpy.Event,
             owners: np.ndarray, owned: np.ndarray, shard_s: np.ndarray,
             sends: list[int]) -> Generator[simpy.Event, Any, simpy.Event | None]:
    """A push as a call (gRPC's unary call): once delivered, each shard's handler takes it
    and sends an empty response (on the shard's core, :meth:`MessageCpu.handled_s`); its main
    loop then unpacks and applies it (``shard_s``, queued behind the handler) while the
    responses travel. Returns the event of that work (None: no CPU) once the responses are
    in."""
    server = ctx.server
    yield delivered
    handled = server.process(owners, ctx.cpu.message.handled_s(owned), worker.index, owned,
                             what="call", sends=sends)
    if handled is not None:
        yield handled
    applied = server.process(owners, shard_s, what="push") if np.any(shard_s > 0) else None
    yield server.answer(worker.host, owners, sends)
    return applied


def gradient_pushed(ctx: Context, worker: Worker, params: np.ndarray,
                    apply_s: Callable[[float], float], waits_as: str,
                    decoded: np.ndarray) -> Generator[simpy.Event, Any, float | None]:
    """``worker``'s gradient at ``params``: computed, pushed, waited for (as ``waits_as``)
    until the servers have processed it, then decoded into ``decoded``. Returns its
    mini-batch loss, or None when the run finished meanwhile (nothing decoded)."""
    loss = worker.gradient(params)
    yield from compute(ctx, worker)
    message, nbytes = worker.codec.encode(worker.grad)
    if ctx.traffic is not None:  # the rows the batch touched, not key ranges
        processed = yield from push_rows(ctx, worker, apply_s)
    else:
        processed = yield from push(ctx, worker, nbytes, apply_s)
    yield from block(ctx, worker.index, waits_as, processed)
    if ctx.recorder.finished:
        return None
    worker.codec.decode(message, decoded)
    return loss


def pull(ctx: Context, worker: Worker, out: np.ndarray,
         rows: np.ndarray | None = None) -> Generator[simpy.Event, Any, int]:
    """``worker`` asks the shards for the parameters (or ``rows``) and copies them into
    ``out``; each shard answers after the work queued on it. Returns the version read."""
    server = ctx.server
    params = server.store.params
    nbytes = params.nbytes if rows is None else rows.size * params.itemsize
    costs = message_costs(ctx, (0.0, 1.0), nbytes, None)
    yield from cpu(ctx, worker.index, "overhead", costs.request_s)
    facts = Facts("pull", nbytes)
    with ctx.recorder.span(worker.index, "wire", facts=facts):
        version = yield from server.pull(worker.host, out, rows,
                                         costs.shard_s if costs.shards_busy else None,
                                         lambda reply: ctx.hosts.wait(worker.index, reply),
                                         sends=facts.sends)
        facts.version_read = version
        yield from reply_handshake(ctx, worker.index, costs.parts)
    yield from cpu(ctx, worker.index, "overhead", costs.sender_s)
    return version


def pull_params(ctx: Context, worker: Worker,
                out: np.ndarray) -> Generator[simpy.Event, Any, int]:
    """``worker`` pulls the parameters its next gradient reads into ``out``: all of them,
    or, for a model whose tables are on the servers, the rows its next batch touches
    (:func:`pull_rows`). Returns the version read."""
    if ctx.traffic is None:
        return (yield from pull(ctx, worker, out))
    version = yield from pull_rows(ctx, worker, out)
    ctx.traffic.read(worker.index, out)  # its cached rows, if it keeps any
    return version


def pull_rows(ctx: Context, worker: Worker | Endpoint, out: np.ndarray | None,
              overlapped: bool = False) -> Generator[simpy.Event, Any, int]:
    """``worker`` asks each shard for the rows of its next batch that the shard owns (and
    its part of the dense parameters) and receives exactly those
    (:meth:`sim.training.embedding_traffic.EmbeddingTraffic.pull`); each shard answers
    after the work queued on it. The numbers read are the store's (into ``out`` unless
    None): a gradient reads only its batch's rows. Returns the version read."""
    server, costs = ctx.server, ctx.cpu
    message = costs.message
    X, _ = ctx.workers[worker.index].peek_batch()
    # the worker finds the batch's distinct ids (of every table) to ask for
    yield from cpu(ctx, worker.index, "data", costs.unique_s(X.ids.size + X.wide.size),
                   overlapped)
    parts = ctx.traffic.pull(worker.index, X)
    owners = parts.request > 0
    request, reply = parts.request[owners], parts.reply[owners]
    # each shard gathers the rows asked for into its reply, the worker scatters them out
    moved = np.array([costs.table_rows_s(b, r) for b, r in zip(parts.row_bytes[owners],
                                                               parts.rows[owners],
                                                               strict=True)])
    yield from cpu(ctx, worker.index, "overhead", float(message.send_s(request).sum()),
                   overlapped)
    facts = Facts("pull", parts.nbytes)
    with ctx.recorder.span(worker.index, "wire", overlapped, facts):
        yield server.push_parts(worker.host, parts.request, facts.sends)
        served = server.process(owners, message.receive_s(request) + message.send_s(reply)
                                + moved, what="pull")
        if served is not None:
            yield served
        version = server.store.read(out) if out is not None else server.store.version
        facts.version_read = version
        yield from ctx.hosts.wait(worker.index, server.send_parts(worker.host, parts.reply,
                                                                  facts.sends))
        yield from reply_handshake(ctx, worker.index, parts.reply)
    yield from cpu(ctx, worker.index, "overhead",
                   float(message.receive_s(reply).sum() + moved.sum()), overlapped)
    return version


def push_rows(ctx: Context, worker: Worker, apply_s: Callable[[float], float],
              overlapped: bool = False) -> Generator[simpy.Event, Any, simpy.Event | None]:
    """``worker`` sends each shard the (id, row gradient) pairs of the rows its last batch
    touched that the shard owns, and its part of the dense gradient; returns the event of
    the shards having processed them (as :func:`push`'s)."""
    parts: Parts = ctx.traffic.push(worker.last_batch[0])
    costs = ctx.cpu
    owners = parts.request > 0
    owned = parts.request[owners]
    # the worker gathers the rows' gradients into each shard's part; a shard of a
    # synchronous strategy scatters them into the step's sum (the step is charged when it
    # closes), an asynchronous one steps its rows at once
    rows, row_bytes = parts.rows[owners], parts.row_bytes[owners]
    moved = np.array([costs.table_rows_s(b, r) for b, r in zip(row_bytes, rows, strict=True)])
    message = costs.message
    yield from cpu(ctx, worker.index, "overhead",
                   float(message.send_s(owned).sum() + moved.sum()), overlapped)
    facts = Facts("push", parts.nbytes)
    delivered = ctx.server.push_parts(worker.host, parts.request, facts.sends)
    on_rows = moved if row_of(ctx.config).synchronous else np.array(
        [costs.table_step_s(b, r) for b, r in zip(row_bytes, rows, strict=True)])
    dense = ctx.traffic.dense_bytes[owners]
    shard_s = np.array([message.unpacked_s(p) + apply_s(d) for p, d in zip(owned, dense,
                                                                          strict=True)]) + on_rows
    return (yield from taken(ctx, worker, delivered, owners, owned, shard_s, overlapped,
                             facts))


_MESSAGE_KINDS_KEPT = 4096  # sparse batches vary in size: remember the first ones


def message_costs(ctx: Context, keys: tuple[float, float], nbytes: float,
                  apply_s: Callable[[float], float] | None) -> ShardCosts:
    """The costs of a push of ``nbytes`` for ``keys`` (``apply_s``: a shard's CPU to
    apply its part) or, with ``apply_s`` None, of a pull of ``nbytes``
    (:func:`sim.network.message_cost.shard_costs`), the same for every such message, so
    computed once (numpy on a few shards costs more than the rest of a message)."""
    key = (keys, nbytes, apply_s)
    found = ctx.message_memo.get(key)
    if found is not None:
        return found
    parts = ctx.server.range_bytes(*keys, nbytes)
    found = shard_costs(ctx.cpu.message, parts, apply_s, ctx.cpu.host.serve_pull_s)
    if len(ctx.message_memo) < _MESSAGE_KINDS_KEPT:
        ctx.message_memo[key] = found
    return found


def reply_handshake(ctx: Context, rank: int,
                    parts: np.ndarray) -> Generator[simpy.Event, Any, None]:
    """Worker ``rank`` finishes receiving the shards' ``parts`` (bytes per shard): the
    largest part's rendezvous, if any (:meth:`sim.simulated.hosts.Hosts.handshake_s`)."""
    if not ctx.hosts.handshakes:  # no rank sleeps on a shared host (numpy costs ~4 us)
        return
    owners = np.flatnonzero(parts > 0)
    handshake = ctx.hosts.slowest_handshake_s(ctx.server.first_rank + owners, rank,
                                              parts[owners])
    if handshake > 0:
        yield ctx.env.timeout(handshake)
