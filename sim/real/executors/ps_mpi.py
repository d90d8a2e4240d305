"""The parameter-server programs' links over MPI (:mod:`sim.real.executors.ps_wire`).

Every message is a float64 array sent with ``Isend`` on :data:`~sim.real.executors.ps_wire.
TAG` and received in place with ``Irecv``: messages between two ranks arrive in the order
they were sent. Waits go through the rank's :class:`~sim.real.executors.rank_clock.Waiter`
(spin in MPI, or poll and nap when ranks outnumber cores). A server replies with a
non-blocking send and waits it out only when its buffer is needed again; a cancel is a
header-only message that the worker probes for during its gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sim.real.executors.assemble import RankLog
from sim.real.executors.context import RankContext
from sim.real.executors.elastic_rank import WorkerMonitor
from sim.real.executors.ps_wire import CANCEL, HEADER, TAG, Parcel, Received, Replies


class MpiWorkerLink:
    """A worker's :class:`~sim.real.executors.ps_wire.WorkerLink` over MPI; logs on
    ``log`` as rank ``ctx.rank``."""

    def __init__(self, ctx: RankContext, log: RankLog) -> None:
        self.ctx, self.log, self.rank = ctx, log, ctx.rank
        self.receiving: list[tuple[int, np.ndarray, Any]] = []  # (peer, inbox, request)
        self.note = np.zeros(HEADER)  # where a cancel lands

    def warm_up(self, parcels: Sequence[Parcel], inboxes: Sequence[np.ndarray]) -> None:
        from mpi4py import MPI

        comm, waiter = self.ctx.comm, self.ctx.waiter
        for (peer, message), inbox in zip(parcels, inboxes, strict=True):
            waiter.one(comm.Isend([message, MPI.DOUBLE], dest=peer, tag=TAG))
            waiter.one(comm.Irecv([inbox, MPI.DOUBLE], source=peer, tag=TAG))

    def _post(self, parcels: Sequence[Parcel]) -> list[Any]:
        from mpi4py import MPI

        comm = self.ctx.comm
        return [comm.Isend([message, MPI.DOUBLE], dest=peer, tag=TAG)
                for peer, message in parcels]

    def _out(self, began: float, requests: list[Any], count: int) -> None:
        """Posting since ``began`` was overhead; block until ``requests`` are sent (wire)."""
        ctx, log = self.ctx, self.log
        posted = ctx.now()
        log.span(self.rank, "overhead", began, posted)
        ctx.waiter.all(requests)
        log.span(self.rank, "wire", posted, ctx.now())
        log.messages += count

    def send(self, parcels: Sequence[Parcel]) -> None:
        began = self.ctx.now()
        self._out(began, self._post(parcels), len(parcels))

    def ask(self, parcels: Sequence[Parcel], inboxes: Sequence[np.ndarray]) -> float:
        from mpi4py import MPI

        comm, began = self.ctx.comm, self.ctx.now()
        sends = self._post(parcels)
        self.receiving = [(peer, inbox, comm.Irecv([inbox, MPI.DOUBLE], source=peer, tag=TAG))
                          for (peer, _), inbox in zip(parcels, inboxes, strict=True)]
        self._out(began, sends, len(parcels))
        return self.ctx.now()

    def collect(self) -> Replies:
        from mpi4py import MPI

        comm, status, counts = self.ctx.comm, MPI.Status(), []
        for peer, inbox, request in self.receiving:
            while True:  # the reply; a cancel of an earlier step may come first
                self.ctx.waiter.one(request, status)
                if inbox[0] != CANCEL:
                    break
                request = comm.Irecv([inbox, MPI.DOUBLE], source=peer, tag=TAG)
            counts.append(status.Get_count(MPI.DOUBLE))
        self.receiving = []
        got = self.ctx.now()
        return Replies(counts, got, got)

    def cancelled(self, version: float) -> bool:
        """Whether the server cancelled step ``version`` (older cancels are dropped)."""
        from mpi4py import MPI

        comm, note = self.ctx.comm, self.note
        while comm.Iprobe(source=MPI.ANY_SOURCE, tag=TAG):
            comm.Recv([note, MPI.DOUBLE], source=MPI.ANY_SOURCE, tag=TAG)
            if note[0] == CANCEL and note[2] == version:
                return True
        return False

    def close(self) -> None:
        pass


class MpiServerLink:
    """A server's :class:`~sim.real.executors.ps_wire.ServerLink` over MPI to workers
    ``0 .. workers - 1``; ``monitor`` (elastic runs) drops workers that die while the
    server waits."""

    def __init__(self, ctx: RankContext, workers: int,
                 monitor: WorkerMonitor | None = None) -> None:
        from mpi4py import MPI

        self.ctx, self.n, self.monitor = ctx, workers, monitor
        self.status = MPI.Status()
        self.sending: list[Any] = [None] * workers  # the reply in flight to each worker
        self.notes: list[tuple[int, np.ndarray, Any]] = []  # cancels in flight

    def warm_up(self, inbox: np.ndarray, replies: Sequence[np.ndarray]) -> None:
        from mpi4py import MPI

        comm, waiter, status = self.ctx.comm, self.ctx.waiter, self.status
        for _ in range(self.n):
            waiter.one(comm.Irecv([inbox, MPI.DOUBLE], source=MPI.ANY_SOURCE, tag=TAG), status)
            w = status.Get_source()
            waiter.one(comm.Isend([replies[w], MPI.DOUBLE], dest=w, tag=TAG))

    def receive(self, inbox: np.ndarray,
                answer: Callable[[], object] = lambda: None) -> Received | None:
        from mpi4py import MPI

        status = self.status
        request = self.ctx.comm.Irecv([inbox, MPI.DOUBLE], source=MPI.ANY_SOURCE, tag=TAG)
        if self.monitor is None:
            self.ctx.waiter.one(request, status)
        elif not self.monitor.receive(request, status, answer):
            return None  # every worker stopped or died while the server waited
        now = self.ctx.now()
        return Received(status.Get_count(MPI.DOUBLE), now, now)

    def ready(self, worker: int) -> bool:
        if self.sending[worker] is None:
            return False
        self.ctx.waiter.one(self.sending[worker])
        return True

    def reply(self, worker: int, message: np.ndarray) -> None:
        from mpi4py import MPI

        self.sending[worker] = self.ctx.comm.Isend([message, MPI.DOUBLE], dest=worker, tag=TAG)

    def note(self, worker: int, message: np.ndarray) -> bool:
        from mpi4py import MPI

        self.notes[:] = [(w, m, r) for w, m, r in self.notes if not r.Test()]
        self.notes.append((worker, message,
                           self.ctx.comm.Isend([message, MPI.DOUBLE], dest=worker, tag=TAG)))
        return True

    def close(self, dead: set[int]) -> None:
        live = [w for w in range(self.n) if w not in dead]  # a dead one receives nothing
        self.ctx.waiter.all([self.sending[w] for w in live if self.sending[w] is not None] +
                            [r for w, _, r in self.notes if w not in dead])
