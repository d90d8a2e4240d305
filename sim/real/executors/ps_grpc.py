"""The parameter-server programs' links over gRPC (``cluster.transport = "grpc"``).

MPI still launches the ranks and sets the run up; the pushes and pulls between workers and
server ranks go over grpcio. Each server rank starts a ``grpc.server`` on 127.0.0.1, port 0
(the kernel picks a free one), and every rank learns the ports with one ``allgather`` over
MPI (:func:`exchange_ports`); each worker opens one channel to each server rank.

Service ``sgdlab.ParameterServer``, two unary methods on raw bytes (generic handlers, no
protobuf): every request and reply is the message of :mod:`sim.real.executors.ps_wire` as
its little-endian float64 bytes (64-byte header, then the payload; ids of a sparse pull are
int64 carried in float64 slots, so their 8 bytes pass unchanged).

* ``/sgdlab.ParameterServer/Push``: a message that needs no answer (a push, a sparse run's
  BYE). The handler queues it for the server's main loop and acknowledges at once with an
  empty reply; a worker's next call starts after the acknowledgement, so the main loop sees
  each worker's messages in the order it sent them, as MPI's one tag guarantees.
* ``/sgdlab.ParameterServer/Pull``: a pull request (or the warm-up's). The handler thread
  queues it with a one-slot queue and blocks on that slot until the main loop answers:
  a pull the rules hold (the step barrier, the SSP bound) simply blocks the RPC.

The main loop is the MPI path's (:class:`~sim.real.executors.ps.ServerProtocol` and the
loop of :mod:`sim.real.executors.ps`); only :meth:`GrpcServerLink.receive` and
:meth:`GrpcServerLink.reply` differ. Time: turning an array into bytes and bytes into the
receive buffer (a copy each way) is ``overhead``; blocking in a call is ``wire``, or
``wait`` while the server held the pull (the reply's header has the server's arrival and
grant times, as over MPI).

Not over gRPC (refused with one line naming ``cluster.transport``,
:func:`sim.training.real_checks.check_transport`): cancelling late gradients
(``strategy.late_gradients = "cancel"`` needs a server-to-worker call during the gradient),
failures and checkpoints, the emulated network (``--net emulate:RATE``: 127.0.0.1 is not
shared by its namespaces), and the strategies that are not parameter-server ones.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from sim.real.executors.assemble import RankLog
from sim.real.executors.context import RankContext
from sim.real.executors.ps_wire import Parcel, Received, Replies, from_bytes, to_bytes

SERVICE = "sgdlab.ParameterServer"
PULL_METHOD, PUSH_METHOD = f"/{SERVICE}/Pull", f"/{SERVICE}/Push"
HOST = "127.0.0.1"
# whole models in one message (gRPC refuses messages over 4 MiB by default), and no HTTP
# proxy from the environment for a loopback address
OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1),
           ("grpc.enable_http_proxy", 0)]
STOP_GRACE_S = 30.0  # at the end, how long replies still going out may take


def exchange_ports(ctx: RankContext, port: int | None) -> dict[int, int]:
    """Every server rank's gRPC port, by rank (a collective: every rank calls it with its
    own port, None on a worker)."""
    ports = ctx.comm.allgather(port)
    return {rank: p for rank, p in enumerate(ports) if p is not None}


class GrpcWorkerLink:
    """A worker's :class:`~sim.real.executors.ps_wire.WorkerLink` over gRPC: one channel
    to each server rank in ``ports`` (rank -> port); logs on ``log`` as rank ``ctx.rank``.

    To one server the calls are grpcio's blocking ones. To several (a sparse run's shards)
    they are its asyncio ones on an event loop of the link's own, run while the worker
    blocks, so that the calls to every shard go out together from the one thread: a
    blocking callable's ``future()`` starts grpcio's polling thread whenever none is running
    (~0.9 ms a call on this machine), and the event loop costs ~0.5 ms a call more than a
    blocking call (asp with one worker: 3.0-3.5 against 2.0-2.7 ms per update, two calls
    each), so one server does without it."""

    def __init__(self, ctx: RankContext, log: RankLog, ports: dict[int, int]) -> None:
        import grpc  # only gRPC runs load grpcio

        self.ctx, self.log, self.rank = ctx, log, ctx.rank
        self.loop = asyncio.new_event_loop() if len(ports) > 1 else None
        self.channels = {rank: grpc.insecure_channel(f"{HOST}:{port}", options=OPTIONS)
                         if self.loop is None else self.loop.run_until_complete(_channel(port))
                         for rank, port in ports.items()}
        # no (de)serialisers: requests and replies are the raw bytes
        self.pull = {rank: c.unary_unary(PULL_METHOD) for rank, c in self.channels.items()}
        self.push = {rank: c.unary_unary(PUSH_METHOD) for rank, c in self.channels.items()}
        self.asked: list[tuple[Any, bytes, np.ndarray]] = []  # (method, request, inbox)

    def _calls(self, calls: Sequence[tuple[Any, bytes]], ready: bool = False) -> list[bytes]:
        """Make every call at once and block until all are answered; the replies."""
        if self.loop is None:  # one server: one call at a time
            return [method(data, wait_for_ready=ready) for method, data in calls]

        async def together() -> list[bytes]:
            return list(await asyncio.gather(*(method(data, wait_for_ready=ready)
                                               for method, data in calls)))

        return self.loop.run_until_complete(together())

    def warm_up(self, parcels: Sequence[Parcel], inboxes: Sequence[np.ndarray]) -> None:
        # waits for the connections: the servers started before the ports were exchanged
        replies = self._calls([(self.pull[peer], to_bytes(message))
                               for peer, message in parcels], ready=True)
        for data, inbox in zip(replies, inboxes, strict=True):
            from_bytes(data, inbox)

    def _serialise(self, methods: dict[int, Any],
                   parcels: Sequence[Parcel]) -> tuple[list[tuple[Any, bytes]], float]:
        """Each message's bytes (``overhead``), with its call's method; when done (s)."""
        began = self.ctx.now()
        calls = [(methods[peer], to_bytes(message)) for peer, message in parcels]
        done = self.ctx.now()
        self.log.span(self.rank, "overhead", began, done)
        self.log.messages += len(parcels)
        return calls, done

    def send(self, parcels: Sequence[Parcel]) -> None:
        calls, posted = self._serialise(self.push, parcels)
        self._calls(calls)  # acknowledged once each server has the message queued
        self.log.span(self.rank, "wire", posted, self.ctx.now())

    def ask(self, parcels: Sequence[Parcel], inboxes: Sequence[np.ndarray]) -> float:
        calls, posted = self._serialise(self.pull, parcels)
        self.asked = [(method, data, inbox)
                      for (method, data), inbox in zip(calls, inboxes, strict=True)]
        return posted  # the calls go out in collect() (to several shards: all together)

    def collect(self) -> Replies:
        replies = self._calls([(method, data) for method, data, _ in self.asked])
        got = self.ctx.now()
        counts = [from_bytes(data, inbox)
                  for data, (_, _, inbox) in zip(replies, self.asked, strict=True)]
        self.asked = []
        return Replies(counts, got, self.ctx.now())

    def cancelled(self, version: float) -> bool:
        return False  # cancels are refused over gRPC (real_checks.check_transport)

    def close(self) -> None:
        for channel in self.channels.values():
            if self.loop is None:
                channel.close()
            else:
                self.loop.run_until_complete(channel.close())
        if self.loop is not None:
            self.loop.close()


async def _channel(port: int) -> Any:
    """An asyncio channel to ``port`` on 127.0.0.1, made on the running loop (an asyncio
    channel belongs to the loop it was made on)."""
    import grpc  # only gRPC runs load grpcio

    return grpc.aio.insecure_channel(f"{HOST}:{port}", options=OPTIONS)


class GrpcServerLink:
    """A server's :class:`~sim.real.executors.ps_wire.ServerLink` over gRPC, serving
    ``workers`` workers on a port of 127.0.0.1 (:attr:`port`)."""

    def __init__(self, ctx: RankContext, workers: int) -> None:
        import grpc  # only gRPC runs load grpcio

        self.ctx, self.n = ctx, workers
        # (request bytes, the slot its reply goes to; None for a push), in arrival order
        self.arrivals: queue.Queue[tuple[bytes, queue.Queue[bytes] | None]] = queue.Queue()
        self.answers: dict[int, queue.Queue[bytes]] = {}  # worker -> its pull's slot
        handler = grpc.method_handlers_generic_handler(SERVICE, {
            "Pull": grpc.unary_unary_rpc_method_handler(self._pull),
            "Push": grpc.unary_unary_rpc_method_handler(self._push)})
        # a worker has at most one call in flight to a server: a thread for each, and one
        # spare, so a held pull never keeps another worker's push waiting for a thread
        self.server = grpc.server(ThreadPoolExecutor(max_workers=workers + 1),
                                  handlers=[handler], options=OPTIONS)
        self.port = self.server.add_insecure_port(f"{HOST}:0")
        self.server.start()

    # ---- handler threads --------------------------------------------------------------

    def _pull(self, request: bytes, context: Any) -> bytes:
        slot: queue.Queue[bytes] = queue.Queue(maxsize=1)
        self.arrivals.put((request, slot))
        return slot.get()  # held here while the rules hold the pull

    def _push(self, request: bytes, context: Any) -> bytes:
        self.arrivals.put((request, None))
        return b""

    # ---- the main loop's side ---------------------------------------------------------

    def warm_up(self, inbox: np.ndarray, replies: Sequence[np.ndarray]) -> None:
        for _ in range(self.n):
            self.receive(inbox)
            w = int(inbox[1])
            self.reply(w, replies[w])

    def receive(self, inbox: np.ndarray,
                answer: Callable[[], object] = lambda: None) -> Received | None:
        data, slot = self.arrivals.get()
        arrived = self.ctx.now()
        count = from_bytes(data, inbox)
        if slot is not None:
            self.answers[int(inbox[1])] = slot
        return Received(count, arrived, self.ctx.now())

    def ready(self, worker: int) -> bool:
        return False  # a reply is copied out as bytes: its buffer is free at once

    def reply(self, worker: int, message: np.ndarray) -> None:
        self.answers.pop(worker).put(to_bytes(message))

    def note(self, worker: int, message: np.ndarray) -> bool:
        # a backup step that closes without some workers makes cancels; a worker that does
        # not cancel (late_gradients = "drop", the only choice over gRPC) skips them unread
        # over MPI, so here they are not sent at all
        return False

    def close(self, dead: set[int]) -> None:
        # new calls are refused; the replies handed to handler threads still go out
        self.server.stop(grace=STOP_GRACE_S).wait()
