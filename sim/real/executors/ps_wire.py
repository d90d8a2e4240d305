"""The parameter-server programs' messages, and the links that move them.

:mod:`sim.real.executors.ps` and :mod:`sim.real.executors.ps_tables` build messages, keep
the server's protocol and log time; a *link* only moves messages between a worker and its
server ranks, over MPI (:mod:`sim.real.executors.ps_mpi`) or gRPC
(:mod:`sim.real.executors.ps_grpc`), as the run's ``cluster.transport`` says
(:func:`sim.training.real_checks.real_transport`). Both links carry the same bytes.

A message is one float64 array: the 8-value header (:data:`HEADER`, 64 bytes: type,
worker, version, loss, arrival_s, grant_s, a program's own value, held) then the payload.
Over gRPC it travels as that array's bytes, little-endian (:func:`to_bytes`,
:func:`from_bytes`).

A worker's link (:class:`WorkerLink`) sends messages that need no answer (pushes), asks
(pull requests whose replies land in given arrays) and collects the replies; it logs its
own ``overhead`` (posting, serialising) and ``wire`` (blocking until a message is out) and
leaves the time of a reply to the program, which knows from the reply's header how long the
server held the pull. A server's link (:class:`ServerLink`) receives the next message from
any worker and replies to a worker's pull; it logs nothing: the server loop does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

import numpy as np

HEADER = 8  # type, worker, version, loss, arrival_s, grant_s, clock gap / ids (NaN: none), held
PULL, PARAMS, PUSH, STOP, CANCEL, WARM = 1.0, 2.0, 3.0, 4.0, 5.0, 6.0
TAG = 77  # every MPI message between two ranks: one tag, so they arrive in order
WIRE_DTYPE = np.dtype("<f8")  # a message's values on the gRPC wire: little-endian float64

Parcel = tuple[int, np.ndarray]  # (the peer's rank, a message)


class Replies(NamedTuple):
    """The replies a worker collected: values received from each peer asked (in the order
    asked), when the last one came (s) and when they were unpacked into the inboxes (s; the
    same for MPI, which receives in place)."""

    counts: list[int]
    got_s: float
    unpacked_s: float


class Received(NamedTuple):
    """A message a server received: its values, when it came (s) and when it was unpacked
    into the inbox (s; the same for MPI)."""

    count: int
    arrived_s: float
    unpacked_s: float


class WorkerLink(Protocol):
    """A worker's link to its server ranks."""

    def warm_up(self, parcels: Sequence[Parcel], inboxes: Sequence[np.ndarray]) -> None:
        """One untimed round trip with each peer: connections and buffers warm."""

    def send(self, parcels: Sequence[Parcel]) -> None:
        """Send each message and block until every one is out: posting (and serialising)
        is ``overhead``, blocking ``wire``."""

    def ask(self, parcels: Sequence[Parcel], inboxes: Sequence[np.ndarray]) -> float:
        """Send pull requests whose replies land in ``inboxes`` (one a request); logs the
        sending's ``overhead`` (and ``wire`` where it blocks); when the requests were out (s)."""

    def collect(self) -> Replies:
        """Block until the replies to the last :meth:`ask` are in its inboxes."""

    def cancelled(self, version: float) -> bool:
        """Whether a server cancelled step ``version`` (MPI only: gRPC runs refuse cancels)."""

    def close(self) -> None:
        """Training is over: let go of connections."""


class ServerLink(Protocol):
    """A server rank's link to its workers."""

    def warm_up(self, inbox: np.ndarray, replies: Sequence[np.ndarray]) -> None:
        """One untimed round trip with every worker: its message into ``inbox``, answered
        with ``replies[worker]`` whole."""

    def receive(self, inbox: np.ndarray,
                answer: Callable[[], object] = lambda: None) -> Received | None:
        """Block until a message from any worker is in ``inbox``; None if every worker
        stopped or died first (``answer()`` is called after a dead worker is dropped)."""

    def ready(self, worker: int) -> bool:
        """Block until the reply buffer of ``worker`` may be written (its last reply is
        out); whether there was a reply in flight."""

    def reply(self, worker: int, message: np.ndarray) -> None:
        """Answer ``worker``'s pull (or warm-up) with ``message``."""

    def note(self, worker: int, message: np.ndarray) -> bool:
        """Send ``worker`` a message it did not ask for (a cancel); whether it was sent
        (over gRPC, where no worker acts on a cancel, it is not)."""

    def close(self, dead: set[int]) -> None:
        """Training is over: every reply to a live worker is out; let go of connections."""


def to_bytes(message: np.ndarray) -> bytes:
    """``message`` as its little-endian float64 bytes (a copy; none but it on x86)."""
    return message.astype(WIRE_DTYPE, copy=False).tobytes()


def from_bytes(data: bytes, out: np.ndarray) -> int:
    """Copy the float64 values of ``data`` (little-endian) to the start of ``out``; how many.
    Raises ValueError if ``data`` is not whole values or does not fit."""
    values = np.frombuffer(data, WIRE_DTYPE)
    if len(values) > len(out):
        raise ValueError(f"a message of {len(values)} values for a buffer of {len(out)}")
    out[:len(values)] = values
    return len(values)
