"""A collective as rounds of point-to-point transfers, and the data they move.

Semantics (shared by every network model, so results never depend on timing):

* Endpoints (ranks, plus e.g. parameter servers) go through the rounds in order. An
  endpoint enters round r once every transfer it took part in during earlier rounds has
  been delivered; rounds it has no part in cost it nothing.
* A transfer starts when both its endpoints have entered its round (rendezvous, as MPI
  does for large messages). Its payload is the sender's slice at that moment.
* When all of an endpoint's transfers of a round have been delivered, it applies the
  payloads it received, in transfer order: ``SUM`` adds (``sim.kernels.sum_into``),
  ``COPY`` overwrites (``sim.kernels.copy``). So every reduction has a fixed order.
* A transfer moves one contiguous slice, or several (its :class:`Pieces`, packed in order
  at the sender and unpacked in the same order at the receiver, as MPICH's Bruck all-to-all
  packs the blocks of one step into one message): one message either way.
* With ``send_copy`` (MPI_Alltoall's send buffer, apart from its receive buffer) each
  worker's buffer of L elements is copied before the first round; offsets in [L, 2 L)
  address that copy (offset L + x is its element x), so an in-place all-to-all never
  overwrites a block it has still to send. The copy takes no simulated time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sim import kernels

SUM = "sum"
COPY = "copy"


@dataclass(frozen=True)
class Pieces:
    """The slices transfer t of a round carries: rows ``ptr[t]:ptr[t + 1]`` of ``src_off``,
    ``dst_off`` and ``count`` (int64 arrays; elements), read in that order at the sender and
    written in that order at the receiver."""

    ptr: np.ndarray
    src_off: np.ndarray
    dst_off: np.ndarray
    count: np.ndarray


@dataclass(frozen=True)
class Round:
    """Transfers of one round: endpoint ids, element offsets and counts (int64 arrays).

    With ``pieces`` a transfer carries several slices (``count`` is then their sum, what
    the network charges; ``src_off`` and ``dst_off`` are its first slice's).
    """

    src: np.ndarray
    dst: np.ndarray
    src_off: np.ndarray
    dst_off: np.ndarray
    count: np.ndarray
    op: str  # SUM or COPY, applied at the receiver
    pieces: Pieces | None = None

    @classmethod
    def aligned(cls, src: np.ndarray, dst: np.ndarray, off: np.ndarray, count: np.ndarray,
                op: str) -> Round:
        """Transfers that land at the same offset they were read from."""
        src, dst, off, count = np.broadcast_arrays(*(np.asarray(a, np.int64)
                                                     for a in (src, dst, off, count)))
        return cls(src, dst, off, off, count, op)

    def __len__(self) -> int:
        return len(self.src)


@dataclass(frozen=True)
class Schedule:
    """``n_rounds`` rounds over ``n_endpoints`` endpoints, made on demand by ``round(r)``.

    Endpoints past the workers (ids >= n_workers) are helpers such as parameter servers;
    they get zeroed buffers of ``helper_lengths`` elements. ``send_copy``: the workers'
    buffers are copied before round 0 and offsets past a buffer's end read the copy (see
    the module's docstring).
    """

    n_endpoints: int
    n_rounds: int
    round: Callable[[int], Round]
    helper_lengths: tuple[int, ...] = ()
    send_copy: bool = False

    @classmethod
    def of(cls, n_endpoints: int, rounds: Sequence[Round],
           helper_lengths: tuple[int, ...] = (), send_copy: bool = False) -> Schedule:
        """A schedule from a list of rounds built up front."""
        return cls(n_endpoints, len(rounds), rounds.__getitem__, helper_lengths, send_copy)


def chunks(count: int, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, lengths) of ``parts`` contiguous chunks of ``count`` elements.

    The first ``count % parts`` chunks are one element longer (``numpy.array_split``'s rule).
    """
    length = np.full(parts, count // parts, dtype=np.int64)
    length[: count % parts] += 1
    return np.cumsum(length) - length, length


class Buffers:
    """The endpoints' vectors: the workers' (caller-owned) plus zeroed helper buffers, and
    with ``send_copy`` a copy of each worker's taken now (see the module's docstring)."""

    def __init__(self, workers: Sequence[np.ndarray], helper_lengths: Sequence[int],
                 send_copy: bool = False) -> None:
        dtype = workers[0].dtype
        self.arrays = list(workers) + [np.zeros(n, dtype) for n in helper_lengths]
        self.sent = [kernels.copy(np.empty_like(w), w) for w in workers] if send_copy else []

    def _slice(self, endpoint: int, start: int, count: int) -> np.ndarray:
        """Elements [start, start + count) of an endpoint's buffer, past its end the copy's."""
        array = self.arrays[endpoint]
        if start >= len(array) and endpoint < len(self.sent):
            array, start = self.sent[endpoint], start - len(array)
        return array[start:start + count]

    def _slices(self, rnd: Round, t: int, reading: bool) -> list[tuple[int, int]]:
        """(offset, count) of every slice transfer t reads (sender) or writes (receiver)."""
        if rnd.pieces is None:
            return [(int((rnd.src_off if reading else rnd.dst_off)[t]), int(rnd.count[t]))]
        rows = slice(int(rnd.pieces.ptr[t]), int(rnd.pieces.ptr[t + 1]))
        offsets = (rnd.pieces.src_off if reading else rnd.pieces.dst_off)[rows]
        return list(zip(offsets.tolist(), rnd.pieces.count[rows].tolist(), strict=True))

    def payloads(self, rnd: Round, ids: np.ndarray) -> dict[int, np.ndarray]:
        """Copies of what transfers ``ids`` carry, read now from the senders."""
        out = {}
        for t in ids.tolist():
            sender = int(rnd.src[t])
            parts = [self._slice(sender, start, n)
                     for start, n in self._slices(rnd, t, reading=True)]
            if len(parts) == 1:
                out[t] = kernels.copy(np.empty_like(parts[0]), parts[0])
            else:  # packed in order into one message
                out[t] = np.concatenate(parts)
        return out

    def apply(self, rnd: Round, ids: np.ndarray, payloads: dict[int, np.ndarray]) -> None:
        """Apply received payloads of transfers ``ids`` (in that order) at their receivers."""
        combine = kernels.sum_into if rnd.op == SUM else kernels.copy
        for t in ids.tolist():
            receiver = int(rnd.dst[t])
            payload = payloads.pop(t)
            at = 0
            for start, n in self._slices(rnd, t, reading=False):
                combine(self._slice(receiver, start, n), payload[at:at + n])
                at += n

    def run_round(self, rnd: Round) -> None:
        """Execute a whole round at once: every payload is read before any is applied."""
        ids = np.arange(len(rnd))
        self.apply(rnd, ids, self.payloads(rnd, ids))


def check_buffers(buffers: Sequence[np.ndarray], p: int) -> None:
    """Raise ValueError/TypeError unless ``buffers`` are p equal 1-D float vectors."""
    if len(buffers) != p:
        raise ValueError(f"expected {p} buffers (one per worker), got {len(buffers)}")
    first = buffers[0]
    for rank, buf in enumerate(buffers):
        if not isinstance(buf, np.ndarray) or buf.dtype not in (np.float32, np.float64):
            raise TypeError(f"buffer {rank}: expected a float32 or float64 numpy array")
        if buf.ndim != 1 or buf.shape != first.shape or buf.dtype != first.dtype:
            raise ValueError(f"buffer {rank}: expected shape {first.shape} and dtype "
                             f"{first.dtype} like buffer 0, got {buf.shape} {buf.dtype}")
        if not (buf.flags.c_contiguous and buf.flags.writeable):
            raise ValueError(f"buffer {rank}: must be C-contiguous and writable")
