"""An MPI world in one process, for driving the real rank programs directly.

Each rank is a thread; :func:`run_ranks` starts them, each with its own ``COMM_WORLD``, and
:func:`installed` puts a fake ``mpi4py`` package (just the calls the rank programs make)
where ``from mpi4py import MPI`` finds it (the programs import MPI inside their functions).

Semantics, MPI's where the programs rely on them:

- point-to-point: a send is buffered at once (the data copied, its request complete);
  receives are matched in the order they were posted, messages in the order they arrived,
  by (communicator, source or ANY_SOURCE, tag): two messages between two ranks with one tag
  never overtake each other; ``Cancel`` withdraws a posted receive;
- collectives on a communicator are matched by call order, as MPI requires of programs;
  reductions add in rank order (MPI leaves the order open: here it is fixed, so a test can
  write the sum in numpy);
- every wait gives up after ``timeout_s`` (a deadlock fails the test, it does not hang it),
  and once a rank has raised every other rank's next wait raises too.

:attr:`World.taken` records every message as it was matched to a receive: (communicator,
source, destination, tag, payload), in the order receives got them.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
import types
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ANY_SOURCE = ANY_TAG = -1


class Aborted(RuntimeError):
    """Another rank raised, or a wait outlived the world's timeout."""


class _Datatype:
    def __init__(self, name: str, dtype: Any) -> None:
        self.name, self.dtype = name, np.dtype(dtype)

    def __repr__(self) -> str:
        return f"MPI.{self.name}"


DOUBLE, INT = _Datatype("DOUBLE", np.float64), _Datatype("INT", np.int32)
SUM, LOR = "SUM", "LOR"
IN_PLACE = object()


class Status:
    def __init__(self) -> None:
        self.source, self.count = ANY_SOURCE, 0

    def Get_source(self) -> int:  # noqa: N802 - mpi4py's name
        return self.source

    def Get_count(self, datatype: Any = None) -> int:  # noqa: N802
        return self.count


def _buffer(spec: Any) -> np.ndarray:
    """The array of a buffer argument: ``[array, MPI.DOUBLE]`` or a bare array."""
    array = spec[0] if isinstance(spec, list | tuple) else spec
    if not isinstance(array, np.ndarray):
        raise TypeError(f"fake MPI: a buffer must be a numpy array, got {type(array)}")
    datatype = spec[-1] if isinstance(spec, list | tuple) else None
    if isinstance(datatype, _Datatype) and array.dtype != datatype.dtype:
        raise TypeError(f"fake MPI: a {array.dtype} buffer sent as {datatype}")
    return array


@dataclass
class _Message:
    source: int
    tag: int
    payload: Any  # a copy of the sent array, or a Python object (send/recv)


@dataclass(eq=False)  # requests are compared by identity (a posted list's remove)
class Request:
    """A posted receive, a (complete) send, or a non-blocking collective."""

    world: World
    source: int = ANY_SOURCE
    tag: int = ANY_TAG
    buffer: np.ndarray | None = None  # None: an object receive
    done: bool = False
    status_source: int = ANY_SOURCE
    count: int = 0
    obj: Any = None
    finish: Callable[[], bool] | None = None  # a collective: completes it if it can
    key: tuple[int, int] = (0, 0)  # (communicator, destination) of a posted receive

    def matches(self, message: _Message) -> bool:
        return (self.source in (ANY_SOURCE, message.source)
                and self.tag in (ANY_TAG, message.tag))

    def fill(self, message: _Message) -> None:
        if self.buffer is None:
            self.obj = message.payload
        else:
            data = message.payload
            if data.size > self.buffer.size:
                raise Aborted(f"fake MPI: a message of {data.size} values truncated to "
                              f"{self.buffer.size}")
            self.buffer.reshape(-1)[:data.size] = data
            self.count = data.size
        self.status_source, self.done = message.source, True

    def _poll(self) -> bool:
        if not self.done and self.finish is not None:
            self.done = self.finish()
        return self.done

    def _status(self, status: Status | None) -> None:
        if status is not None:
            status.source, status.count = self.status_source, self.count

    def Test(self, status: Status | None = None) -> bool:  # noqa: N802
        with self.world.cond:
            self.world.check()
            done = self._poll()
        if done:
            self._status(status)
        return done

    def Wait(self, status: Status | None = None) -> Any:  # noqa: N802
        self.world.wait_for(self._poll)
        self._status(status)
        return self.obj

    def Cancel(self) -> None:  # noqa: N802
        with self.world.cond:
            posted = self.world.posted[self.key]
            if self in posted:
                posted.remove(self)

    @staticmethod
    def Waitall(requests: list[Request]) -> None:  # noqa: N802
        for request in requests:
            request.Wait()

    @staticmethod
    def Testall(requests: list[Request]) -> bool:  # noqa: N802
        return all([request.Test() for request in requests])


class World:
    """The shared state of one run's ranks: mailboxes, collectives in progress, the log."""

    def __init__(self, size: int, timeout_s: float = 30.0) -> None:
        self.size, self.timeout_s = size, timeout_s
        self.cond = threading.Condition()
        self.posted: dict[tuple[int, int], list[Request]] = defaultdict(list)
        self.unexpected: dict[tuple[int, int], list[_Message]] = defaultdict(list)
        self.meetings: dict[tuple[int, int], dict[str, Any]] = {}
        self.contexts = itertools.count(1)  # communicator ids; 0 is COMM_WORLD's
        self.taken: list[tuple[int, int, int, int, Any]] = []
        self.failed: BaseException | None = None
        self.local = threading.local()

    def check(self) -> None:
        if self.failed is not None:
            raise Aborted(f"another rank failed: {self.failed!r}")

    def wait_for(self, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.timeout_s
        with self.cond:
            while True:
                self.check()
                if ready():
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    self.failed = self.failed or Aborted("fake MPI: a wait timed out "
                                                         "(deadlock?)")
                    self.cond.notify_all()
                    self.check()
                self.cond.wait(min(left, 0.5))

    def deliver(self, context: int, dest: int, message: _Message) -> None:
        with self.cond:
            self.check()
            posted = self.posted[(context, dest)]
            for request in posted:
                if request.matches(message):
                    posted.remove(request)
                    self._take(context, dest, request, message)
                    break
            else:
                self.unexpected[(context, dest)].append(message)
            self.cond.notify_all()

    def post(self, context: int, dest: int, request: Request) -> None:
        with self.cond:
            self.check()
            waiting = self.unexpected[(context, dest)]
            for message in waiting:
                if request.matches(message):
                    waiting.remove(message)
                    self._take(context, dest, request, message)
                    return
            request.key = (context, dest)
            self.posted[(context, dest)].append(request)

    def _take(self, context: int, dest: int, request: Request, message: _Message) -> None:
        request.fill(message)
        self.taken.append((context, message.source, dest, message.tag, message.payload))

    def probe(self, context: int, dest: int, source: int, tag: int) -> bool:
        probe = Request(self, source, tag)
        with self.cond:
            self.check()
            return any(probe.matches(m) for m in self.unexpected[(context, dest)])

    def meet(self, context: int, seq: int, size: int, rank: int, value: Any,
             combine: Callable[[list[Any]], list[Any]]) -> Callable[[], Any]:
        """Deposit ``value`` for collective ``seq`` on ``context``; a function that returns
        (None until every rank has deposited) this rank's share of ``combine(values)``."""
        key = (context, seq)
        with self.cond:
            self.check()
            meeting = self.meetings.setdefault(key, {"values": {}, "out": None, "left": size})
            meeting["values"][rank] = value
            if len(meeting["values"]) == size:
                meeting["out"] = combine([meeting["values"][r] for r in range(size)])
                self.cond.notify_all()

        def share() -> Any:
            if meeting["out"] is None:
                return None
            meeting["left"] -= 1
            if meeting["left"] == 0:
                self.meetings.pop(key, None)
            return (meeting["out"][rank],)

        return share


def _reduce(values: list[np.ndarray], op: str) -> np.ndarray:
    if op == LOR:
        out = np.zeros_like(values[0])
        for value in values:
            out = np.logical_or(out, value).astype(values[0].dtype)
        return out
    out = values[0].copy()
    for value in values[1:]:  # rank order
        out = out + value
    return out


class Comm:
    """One rank's handle on a communicator (``context``: its id; ranks numbered in it)."""

    def __init__(self, world: World, context: int, size: int, rank: int) -> None:
        self.world, self.context, self.size, self.rank = world, context, size, rank
        self.seq = 0  # collectives called on this communicator so far

    def Get_rank(self) -> int:  # noqa: N802
        return self.rank

    def Get_size(self) -> int:  # noqa: N802
        return self.size

    # -- point to point --

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Request:  # noqa: N802
        data = np.array(_buffer(buf), copy=True).reshape(-1)
        self.world.deliver(self.context, dest, _Message(self.rank, tag, data))
        return Request(self.world, done=True)

    def Irecv(self, buf: Any, source: int = ANY_SOURCE,  # noqa: N802
              tag: int = ANY_TAG) -> Request:
        request = Request(self.world, source, tag, _buffer(buf))
        self.world.post(self.context, self.rank, request)
        return request

    def Recv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG,  # noqa: N802
             status: Status | None = None) -> None:
        self.Irecv(buf, source, tag).Wait(status)

    def Iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> bool:  # noqa: N802
        return self.world.probe(self.context, self.rank, source, tag)

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        self.world.deliver(self.context, dest, _Message(self.rank, tag, obj))

    def recv(self, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Any:
        request = Request(self.world, source, tag)
        self.world.post(self.context, self.rank, request)
        return request.Wait()

    # -- collectives --

    def _collective(self, value: Any, combine: Callable[[list[Any]], list[Any]]
                    ) -> Callable[[], Any]:
        self.seq += 1
        return self.world.meet(self.context, self.seq, self.size, self.rank, value, combine)

    def _blocking(self, value: Any, combine: Callable[[list[Any]], list[Any]]) -> Any:
        share = self._collective(value, combine)
        got: list[Any] = []

        def ready() -> bool:
            if not got:
                out = share()
                if out is not None:
                    got.append(out[0])
            return bool(got)

        self.world.wait_for(ready)
        return got[0]

    def Barrier(self) -> None:  # noqa: N802
        self._blocking(None, lambda values: [None] * len(values))

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return self._blocking(obj, lambda values: [values[root]] * len(values))

    def gather(self, obj: Any, root: int = 0) -> Any:
        return self._blocking(obj, lambda values: [list(values) if r == root else None
                                                   for r in range(len(values))])

    def _reduction(self, sendbuf: Any, recvbuf: Any, op: str
                   ) -> tuple[np.ndarray, Callable[[], Any]]:
        out = _buffer(recvbuf)
        mine = (out if sendbuf is IN_PLACE else _buffer(sendbuf)).copy()
        share = self._collective(mine, lambda values: [_reduce(values, op)] * len(values))
        return out, share

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: str = SUM) -> None:  # noqa: N802
        self.Iallreduce(sendbuf, recvbuf, op).Wait()

    def Iallreduce(self, sendbuf: Any, recvbuf: Any, op: str = SUM) -> Request:  # noqa: N802
        out, share = self._reduction(sendbuf, recvbuf, op)

        def finish() -> bool:
            got = share()
            if got is None:
                return False
            out[...] = got[0]
            return True

        return Request(self.world, finish=finish)

    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:  # noqa: N802
        send, (send_counts, send_displs) = _buffer(sendbuf), sendbuf[1]
        recv, (recv_counts, recv_displs) = _buffer(recvbuf), recvbuf[1]
        chunks = [send[int(d):int(d) + int(c)].copy() for c, d in zip(send_counts, send_displs,
                                                                       strict=True)]
        got = self._blocking(chunks, lambda values: [[values[j][i] for j in range(len(values))]
                                                     for i in range(len(values))])
        for j, chunk in enumerate(got):
            if chunk.size != int(recv_counts[j]):
                raise Aborted(f"fake MPI: Alltoallv: {chunk.size} values from rank {j}, "
                              f"{int(recv_counts[j])} expected")
            recv[int(recv_displs[j]):int(recv_displs[j]) + chunk.size] = chunk

    def Split(self, color: int, key: int = 0) -> Comm:  # noqa: N802
        def combine(values: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
            groups: dict[int, list[int]] = defaultdict(list)
            for rank, (c, _) in enumerate(values):
                groups[c].append(rank)
            contexts = {c: next(self.world.contexts) for c in sorted(groups)}
            out = []
            for rank, (c, _) in enumerate(values):
                members = sorted(groups[c], key=lambda r: (values[r][1], r))
                out.append((contexts[c], len(members), members.index(rank)))
            return out

        context, size, rank = self._blocking((color, key), combine)
        return Comm(self.world, context, size, rank)

    def Dup(self) -> Comm:  # noqa: N802
        context = self._blocking(None, lambda values: [next(self.world.contexts)]
                                 * len(values))
        return Comm(self.world, context, self.size, self.rank)

    def Abort(self, code: int = 1) -> None:  # noqa: N802
        raise Aborted(f"rank {self.rank} called Abort({code})")


class _WorldComm:
    """``MPI.COMM_WORLD``: the calling thread's rank's communicator."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_current.comm, name)


_current = threading.local()


def _module() -> types.ModuleType:
    mpi = types.ModuleType("mpi4py.MPI")
    for name, value in {"ANY_SOURCE": ANY_SOURCE, "ANY_TAG": ANY_TAG, "DOUBLE": DOUBLE,
                        "INT": INT, "SUM": SUM, "LOR": LOR, "IN_PLACE": IN_PLACE,
                        "Status": Status, "Request": Request, "COMM_WORLD": _WorldComm(),
                        "Get_library_version": lambda: "fake MPI (tests/fake_mpi.py)\n"
                        }.items():
        setattr(mpi, name, value)
    package = types.ModuleType("mpi4py")
    package.MPI = mpi
    return package


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """``from mpi4py import MPI`` gives the fake module inside the block."""
    saved = {name: sys.modules.get(name) for name in ("mpi4py", "mpi4py.MPI")}
    package = _module()
    sys.modules["mpi4py"], sys.modules["mpi4py.MPI"] = package, package.MPI
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


@dataclass
class Ran:
    """What :func:`run_ranks` returns: each rank's result, and the world they ran in."""

    results: list[Any]
    world: World
    errors: list[BaseException | None] = field(default_factory=list)


def run_ranks(size: int, program: Callable[[Comm], Any], timeout_s: float = 30.0) -> Ran:
    """Run ``program(comm)`` on ``size`` ranks (threads) with the fake MPI installed; every
    rank's result, in rank order. Raises the first rank's exception (by rank) if any
    raised."""
    world = World(size, timeout_s)
    results: list[Any] = [None] * size
    errors: list[BaseException | None] = [None] * size

    def rank_main(rank: int) -> None:
        _current.comm = Comm(world, 0, size, rank)
        try:
            results[rank] = program(_current.comm)
        except BaseException as exc:  # noqa: BLE001 - handed to the test below
            errors[rank] = exc
            with world.cond:
                world.failed = world.failed or exc
                world.cond.notify_all()

    with installed():
        threads = [threading.Thread(target=rank_main, args=(r,), daemon=True,
                                    name=f"fake-rank-{r}") for r in range(size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout_s + 5)
    if any(thread.is_alive() for thread in threads):
        raise Aborted("fake MPI: a rank did not finish")
    first = next((e for e in errors if e is not None and not isinstance(e, Aborted)),
                 next((e for e in errors if e is not None), None))
    if first is not None:
        raise first
    return Ran(results, world, errors)
