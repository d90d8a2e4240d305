"""Allreduce on real ranks: the simulator's own schedules over MPI point-to-point, or MPI's.

``schedule`` runs :meth:`sim.network.collectives.Collective.schedule` (ring, rabenseifner,
recursive-doubling, tree) as MPI messages with the semantics of
:mod:`sim.network.schedule`: a rank goes through the rounds it takes part in; in each it
posts its sends (straight from its vector) and receives (into scratch buffers), and when all
of them have completed it applies what it received, in transfer order (``SUM`` adds with
:func:`sim.kernels.sum_into`, ``COPY`` overwrites). So the algorithm the simulator timed is
the one that really runs. ``mpi`` calls MPI's own ``Allreduce`` (MPICH picks the algorithm).

Both are non-blocking state machines (``start``, ``test``, ``wait``) so that a pipelined mode
can keep one collective per layer or bucket in flight while backward runs; the synchronous
strategies call ``start`` then ``wait``.

Each logs where its caller's time went (:meth:`Allreduce.take`): posting operations,
testing them and combining what arrived are the CPU part of the messages (``overhead``);
blocking until a round's messages have arrived (or in MPI's blocking ``Allreduce``) is
``wire`` (the strategy turns the part spent waiting for the slowest rank into ``wait``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from sim import kernels as K
from sim.kernels import NonFiniteError
from sim.network.collectives import get_collective
from sim.network.schedule import SUM
from sim.real.executors.rank_clock import Waiter

TAG_BASE = 1 << 12  # round r of a schedule uses tag TAG_BASE + r


@dataclass(frozen=True)
class RankRound:
    """One rank's part of a round: (peer, offset, count) of its sends and receives."""

    index: int
    sends: tuple[tuple[int, int, int], ...]
    recvs: tuple[tuple[int, int, int], ...]  # in transfer order: the order they are applied
    op: str


def rank_rounds(algorithm: str, p: int, count: int, rank: int) -> list[RankRound]:
    """The rounds of ``algorithm`` on p ranks and ``count`` elements that ``rank`` is in."""
    schedule = get_collective(algorithm).schedule(p, count)
    rounds = []
    for r in range(schedule.n_rounds):
        rnd = schedule.round(r)
        sends = tuple((int(rnd.dst[t]), int(rnd.src_off[t]), int(rnd.count[t]))
                      for t in np.flatnonzero(rnd.src == rank))
        recvs = tuple((int(rnd.src[t]), int(rnd.dst_off[t]), int(rnd.count[t]))
                      for t in np.flatnonzero(rnd.dst == rank))
        if sends or recvs:
            rounds.append(RankRound(r, sends, recvs, rnd.op))
    return rounds


class Allreduce:
    """Sums one float64 vector over every rank of ``comm``, in place."""

    name: ClassVar[str]

    def __init__(self, comm: Any, algorithm: str, count: int, waiter: Waiter) -> None:
        self.comm, self.algorithm, self.count, self.waiter = comm, algorithm, count, waiter
        self.nonfinite = False  # a NaN/Inf went through a reduction (schedule only)
        self.messages = 0  # point-to-point messages this rank has sent
        self.parts: list[tuple[str, float, float]] = []  # (kind, start, end), perf_counter

    def take(self, t0: float) -> list[tuple[str, float, float]]:
        """The spans logged since the last call, in seconds since ``t0``."""
        parts = [(kind, start - t0, end - t0) for kind, start, end in self.parts]
        self.parts = []
        return parts

    def _log(self, kind: str, start: float) -> float:
        end = time.perf_counter()
        self.parts.append((kind, start, end))
        return end

    def start(self, buf: np.ndarray) -> None:
        raise NotImplementedError

    def test(self) -> bool:
        """Progress; True once the sum is in the vector."""
        raise NotImplementedError

    def wait(self) -> None:
        raise NotImplementedError

    def __call__(self, buf: np.ndarray) -> None:
        self.start(buf)
        self.wait()


class ScheduleAllreduce(Allreduce):
    """The simulator's schedule for ``algorithm`` as MPI point-to-point messages."""

    name = "schedule"

    def __init__(self, comm: Any, algorithm: str, count: int, waiter: Waiter) -> None:
        super().__init__(comm, algorithm, count, waiter)
        if get_collective(algorithm).kind != "allreduce":  # an allgather leaves no sum
            raise ValueError(f"allreduce: {algorithm!r} is not an allreduce (real runs send "
                             "dense gradients only)")
        self.rounds = rank_rounds(algorithm, comm.Get_size(), count, comm.Get_rank())
        self.scratch = [[np.empty(n) for _, _, n in rnd.recvs] for rnd in self.rounds]
        self.buf: np.ndarray | None = None
        self.current = len(self.rounds)
        self.requests: list[Any] = []

    def start(self, buf: np.ndarray) -> None:
        if buf.dtype != np.float64 or buf.shape != (self.count,):
            raise ValueError(f"allreduce: expected {self.count} float64 values")
        began = time.perf_counter()
        self.buf, self.current = buf, 0
        self._post()
        self._log("overhead", began)

    def _post(self) -> None:
        from mpi4py import MPI

        if self.current == len(self.rounds):
            self.requests = []
            return
        rnd, buf = self.rounds[self.current], self.buf
        tag = TAG_BASE + rnd.index
        reqs = [self.comm.Irecv([scratch, MPI.DOUBLE], source=peer, tag=tag)
                for (peer, _, _), scratch in zip(rnd.recvs, self.scratch[self.current],
                                                 strict=True)]
        reqs += [self.comm.Isend([buf[off:off + n], MPI.DOUBLE], dest=peer, tag=tag)
                 for peer, off, n in rnd.sends]
        self.messages += len(rnd.sends)
        self.requests = reqs

    def _combine(self) -> None:
        """Apply the round's receives and post the next round."""
        rnd, buf = self.rounds[self.current], self.buf
        combine = K.sum_into if rnd.op == SUM else K.copy
        for (_, off, n), scratch in zip(rnd.recvs, self.scratch[self.current], strict=True):
            try:
                combine(buf[off:off + n], scratch)
            except NonFiniteError:  # written anyway: every rank ends with the same NaNs
                self.nonfinite = True
        self.current += 1
        self._post()

    def test(self) -> bool:
        from mpi4py import MPI

        began = time.perf_counter()
        try:
            while self.current < len(self.rounds):
                if not MPI.Request.Testall(self.requests):
                    return False
                self._combine()
            return True
        finally:
            self._log("overhead", began)

    def wait(self) -> None:
        while self.current < len(self.rounds):
            began = time.perf_counter()
            self.waiter.all(self.requests)
            arrived = self._log("wire", began)
            self._combine()
            self._log("overhead", arrived)


class MPIAllreduce(Allreduce):
    """MPI's own allreduce (blocking when spinning; Iallreduce polled when sleeping)."""

    name = "mpi"

    def start(self, buf: np.ndarray) -> None:
        from mpi4py import MPI

        began = time.perf_counter()
        self.buf, self.request = buf, None
        self.messages += 1  # one collective call; MPICH's messages are not visible here
        if self.waiter.mode == "spin":  # blocking: all of it is the wire
            self.comm.Allreduce(MPI.IN_PLACE, [buf, MPI.DOUBLE], op=MPI.SUM)
            self._log("wire", began)
        else:
            self.request = self.comm.Iallreduce(MPI.IN_PLACE, [buf, MPI.DOUBLE], op=MPI.SUM)
            self._log("overhead", began)

    def test(self) -> bool:
        began = time.perf_counter()
        if self.request is not None and self.request.Test():
            self.request = None
        self._log("overhead", began)
        return self.request is None

    def wait(self) -> None:
        if self.request is not None:
            began = time.perf_counter()
            self.waiter.one(self.request)
            self.request = None
            self._log("wire", began)


IMPLS: dict[str, type[Allreduce]] = {cls.name: cls for cls in (ScheduleAllreduce, MPIAllreduce)}


def make_allreduce(impl: str, comm: Any, algorithm: str, count: int,
                   waiter: Waiter) -> Allreduce:
    """An allreduce by implementation name (``schedule`` or ``mpi``). Raises ValueError."""
    if impl not in IMPLS:
        raise ValueError(f"allreduce implementation {impl!r}: expected one of "
                         f"{', '.join(IMPLS)}")
    return IMPLS[impl](comm, algorithm, count, waiter)
