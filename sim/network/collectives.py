"""Collectives on real buffers: ring, Rabenseifner, recursive doubling, tree, broadcast, PS,
the ring and recursive-doubling allgathers, and the pairwise and Bruck all-to-alls.

Each algorithm is a :class:`~sim.network.schedule.Schedule` of rounds (what moves where,
and whether the receiver adds or overwrites) plus its closed-form time. Running one inside
a SimPy process, on either network model::

    ring = get_collective("ring")
    elapsed_s = yield from ring.run(network, buffers)          # buffers: one array per rank
    elapsed_s = yield from ring.run(network, p=1024, nbytes=10**8)   # timing only

or ``env.process(ring.run(...))`` for an event. Afterwards every rank's buffer holds the
sum (allreduce) or rank 0's vector (broadcast); all ranks hold the same bits.

An allgather's ``nbytes`` is each rank's contribution n (MPI_Allgather's sendcount, and what a
compressed gradient is); each rank's buffer holds p blocks of n, its own at offset rank x n,
and ends with every rank's block. nccl-tests' size S (for algbw) is then p n
(:meth:`Collective.total_bytes`).

An all-to-all's ``nbytes`` is what a rank sends to each rank, m (MPI_Alltoall's sendcount
times the type's size); each rank's buffer holds p blocks of m, block j for rank j, and
afterwards block j of rank i holds rank j's block i (the blocks transposed). nccl-tests'
size S, the whole of what a rank sends, is p m (:meth:`Collective.total_bytes`); the block
a rank keeps stays where it is. Variable sizes (MPI_Alltoallv, timing only):
:mod:`sim.network.alltoall`.

Closed forms use alpha (one message: sim.network.message_cost) and beta (s/byte); they are
exact for the flow model on one switch when every chunk has the same size (p, or the
power of two below p, divides the element count). Non-powers of two: recursive doubling
and Rabenseifner fold the extra ranks in and out as MPICH does (the first 2r ranks pair
up; evens hand their vector to the odd neighbour before, and get the result after), which
adds 2 (alpha + n beta); ring, tree and broadcast take any p natively. The
recursive-doubling allgather folds the same way (see its class).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from sim.names import unknown
from sim.network.hierarchical import two_level_s, two_level_schedule
from sim.network.schedule import COPY, SUM, Buffers, Pieces, Round, Schedule, check_buffers, chunks

if TYPE_CHECKING:
    import simpy  # the simulated network's events; real ranks use the schedules only

# busbw = algbw * factor (nccl-tests' doc/PERFORMANCE.md, with algbw = S / t and S the
# result's size on a rank); the bandwidth lower bound is factor * S / B for the same reason:
# factor * S is what the busiest NIC must carry (an allgather's rank receives (p - 1) n).
BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "allreduce": lambda p: 2 * (p - 1) / p,
    "broadcast": lambda p: 1.0 if p > 1 else 0.0,
    "allgather": lambda p: (p - 1) / p,
    "alltoall": lambda p: (p - 1) / p,  # a rank sends and receives (p - 1) m of its S = p m
}


@dataclass(frozen=True)
class Plan:
    """A collective ready to run: its schedule, where endpoints live, and the data."""

    collective: Collective
    p: int
    nbytes: int
    schedule: Schedule
    hosts: np.ndarray
    buffers: Buffers | None
    itemsize: int


class Collective(ABC):
    """A collective algorithm; subclasses give the schedule and the closed form."""

    name: ClassVar[str]
    kind: ClassVar[str] = "allreduce"
    # what a run passes its constructor (keyword -> the config key it comes from): the
    # hierarchical allreduces need where ranks sit and the algorithm across hosts
    takes: ClassVar[dict[str, str]] = {}

    def n_endpoints(self, p: int) -> int:
        """Endpoints taking part for p workers (more when it adds servers)."""
        return p

    @abstractmethod
    def schedule(self, p: int, count: int) -> Schedule:
        """The rounds for p workers and vectors of ``count`` elements."""

    @abstractmethod
    def closed_form_s(self, p: int, nbytes: float, alpha_s: float, beta_s: float) -> float:
        """Time on one uncontended switch, alpha s per message and beta s per byte."""

    def check_ranks(self, p: int) -> None:
        """Raise ValueError unless the algorithm runs on p ranks (any p, here)."""
        return None

    def blocks(self, p: int) -> int:
        """Blocks of ``nbytes`` in each rank's buffer: 1 here, p for an allgather or an
        all-to-all."""
        return 1

    def total_bytes(self, p: int, nbytes: float) -> float:
        """nccl-tests' size S of a collective of ``nbytes``: the result on one rank (bytes)."""
        return self.blocks(p) * nbytes

    def bus_factor(self, p: int) -> float:
        return BUS_FACTORS[self.kind](p)

    def lower_bound_s(self, p: int, nbytes: float, bandwidth_Bps: float) -> float:
        """No schedule can beat this on hosts injecting at most bandwidth_Bps (s)."""
        return self.bus_factor(p) * self.total_bytes(p, nbytes) / bandwidth_Bps

    def plan(self, buffers: Sequence[np.ndarray] | None = None, *, p: int | None = None,
             nbytes: int | None = None, hosts: np.ndarray | None = None) -> Plan:
        """Check the arguments (see :meth:`run`) and build the plan. Raises ValueError."""
        if buffers is not None:
            if p is not None or nbytes is not None:
                raise ValueError("give either buffers or p and nbytes, not both")
            p = len(buffers)
            check_buffers(buffers, p)
            itemsize = buffers[0].itemsize
            count, rest = divmod(len(buffers[0]), self.blocks(p))
            if rest:
                raise ValueError(f"{self.name}: each buffer holds p = {p} equal blocks (rank "
                                 f"i's at i x count), got {len(buffers[0])} elements")
            nbytes = count * itemsize
        elif p is None or nbytes is None:
            raise ValueError("timing only needs both p and nbytes")
        else:
            itemsize, count = 1, int(nbytes)  # timing only: a vector of bytes
        if p < 1 or count < 0:
            raise ValueError(f"need p >= 1 workers and nbytes >= 0, got p={p}, nbytes={nbytes}")
        schedule = self.schedule(p, count)
        endpoints = schedule.n_endpoints
        hosts = np.arange(endpoints) if hosts is None else np.asarray(hosts, np.int64)
        if hosts.shape != (endpoints,):
            raise ValueError(f"{self.name}: expected {endpoints} hosts, got {hosts.shape}")
        data = None if buffers is None else Buffers(buffers, schedule.helper_lengths,
                                                    schedule.send_copy)
        return Plan(self, p, int(nbytes), schedule, hosts, data, itemsize)

    def run(self, network: Any, buffers: Sequence[np.ndarray] | None = None, *,
            p: int | None = None, nbytes: int | None = None,
            hosts: np.ndarray | None = None) -> Generator[simpy.Event, Any, float]:
        """SimPy process body: run on ``network`` and return the elapsed simulated time (s).

        With ``buffers`` (one float32/float64 vector per rank, reduced, gathered or exchanged
        in place) the data moves; with ``p`` and ``nbytes`` instead only the time is simulated.
        ``hosts[e]`` is the host of endpoint e (default: endpoint e on host e). Raises
        ValueError.
        """
        plan = self.plan(buffers, p=p, nbytes=nbytes, hosts=hosts)
        return (yield from network.run_plan(plan))


class Ring(Collective):
    """Reduce-scatter then allgather around the ring, the vector cut into p chunks."""

    name = "ring"

    def schedule(self, p: int, count: int) -> Schedule:
        offset, length = chunks(count, p)
        ranks = np.arange(p)
        right = (ranks + 1) % p

        def step(r: int) -> Round:
            if r < p - 1:  # reduce-scatter: pass chunk i - r on, adding ours
                chunk, op = (ranks - r) % p, SUM
            else:  # allgather: rank i now owns chunk i + 1 and passes chunks on
                chunk, op = (ranks + 1 - (r - (p - 1))) % p, COPY
            return Round.aligned(ranks, right, offset[chunk], length[chunk], op)

        return Schedule(p, 2 * (p - 1), step)

    def closed_form_s(self, p: int, nbytes: float, alpha_s: float, beta_s: float) -> float:
        return 2 * (p - 1) * alpha_s + 2 * (p - 1) / p * nbytes * beta_s


class RecursiveDoubling(Collective):
    """lg p rounds; in round k rank i swaps its whole vector with rank i xor 2^k."""

    name = "recursive-doubling"

    def schedule(self, p: int, count: int) -> Schedule:
        pof2, extra, real = _fold(p)
        new = np.arange(pof2)
        rounds = [Round.aligned(real[new], real[new ^ mask], 0, count, SUM)
                  for mask in _masks(pof2)]
        return Schedule.of(p, _with_fold(rounds, extra, count))

    def closed_form_s(self, p: int, nbytes: float, alpha_s: float, beta_s: float) -> float:
        return _steps(p) * (alpha_s + nbytes * beta_s)


class Rabenseifner(Collective):
    """Reduce-scatter by recursive halving, then allgather by recursive doubling."""

    name = "rabenseifner"

    def schedule(self, p: int, count: int) -> Schedule:
        pof2, extra, real = _fold(p)
        new = np.arange(pof2)
        lo, hi = np.zeros(pof2, np.int64), np.full(pof2, count, np.int64)
        halving, kept = [], []
        for mask in _masks(pof2):
            # the lower rank of each pair keeps the lower half and sends the upper one
            mid = lo + (hi - lo) // 2
            lower = (new & mask) == 0
            send_lo, send_hi = np.where(lower, mid, lo), np.where(lower, hi, mid)
            halving.append(Round.aligned(real[new], real[new ^ mask], send_lo,
                                         send_hi - send_lo, SUM))
            lo, hi = np.where(lower, lo, mid), np.where(lower, mid, hi)
            kept.append((lo, hi))
        doubling = [Round.aligned(real[new], real[new ^ mask], lo, hi - lo, COPY)
                    for mask, (lo, hi) in reversed(list(zip(_masks(pof2), kept, strict=True)))]
        return Schedule.of(p, _with_fold(halving + doubling, extra, count))

    def closed_form_s(self, p: int, nbytes: float, alpha_s: float, beta_s: float) -> float:
        pof2 = 1 << (p.bit_length() - 1)
        folded = _steps(p) - _lg(pof2)  # 2 when p is not a power of two
        return (2 * _lg(pof2) * alpha_s + 2 * (pof2 - 1) / pof2 * nbytes * beta_s
                + folded * (alpha_s + nbytes * beta_s))


class Tree(Collective):
    """Binomial-tree reduce to rank 0, then binomial-tree broadcast from it."""

    name = "tree"

    def schedule(self, p: int, count: int) -> Schedule:
        return Schedule.of(p, _binomial_reduce(p, count) + _binomial_broadcast(p, count))

    def closed_form_s(self, p: int, nbytes: float, alpha_s: float, beta_s: float) -> float:
        return 2 * _ceil_lg(p) * (alpha_s + nbytes * beta_s)


class Broadcast(Collective):
    """Binomial-tree broadcast of rank 0's vector."""

    name = "broadcast"
    kind = "broadcast"

    def schedule(self, p: int, count: int) -> Schedule:
        return Schedule.of(p, _binomial_broadcast(p, count))

    def closed_form_s(self, p: int, nbytes: float, alpha_s: float, beta_s: float) -> float:
        return _ceil_lg(p) * (alpha_s + nbytes * beta_s)


class ParameterServer(Collective):
    """Push to and pull from S servers, each owning one key range (contiguous shard).

    Servers are extra endpoints p..p+S-1 on their own hosts. Every worker pushes shard s
    to server s, which adds the pushes in worker order; then every worker pulls every
    shard back. A server's NIC carries p shards each way, a worker's carries the vector.
    """

    name = "ps"

    def __init__(self, servers: int = 1) -> None:
        if not (isinstance(servers, int) and servers >= 1):
            raise ValueError(f"servers must be a positive integer, got {servers!r}")
        self.servers = servers

    def n_endpoints(self, p: int) -> int:
        return p + self.servers

    def schedule(self, p: int, count: int) -> Schedule:
        offset, length = chunks(count, self.servers)
        shard = np.repeat(np.arange(self.servers), p)  # transfers ordered by (server, worker)
        worker, server = np.tile(np.arange(p), self.servers), p + shard
        push = Round(worker, server, offset[shard], np.zeros_like(shard), length[shard], SUM)
        pull = Round(server, worker, np.zeros_like(shard), offset[shard], length[shard], COPY)
        return Schedule.of(p + self.servers, [push, pull], tuple(length.tolist()))

    def closed_form_s(self, p: int, nbytes: float, alpha_s: float, beta_s: float) -> float:
        # each phase is limited by the busier NIC: a worker's (n) or a server's (p n / S)
        return 2 * (alpha_s + max(1.0, p / self.servers) * nbytes * beta_s)


class Allgather(Collective):
    """Every rank ends with every rank's block; ``nbytes`` is one rank's block n."""

    kind = "allgather"

    def blocks(self, p: int) -> int:
        return p


class RingAllgather(Allgather):
    """Allgather in p - 1 rounds: in round r rank i passes block i - r to rank i + 1."""

    name = "ring-allgather"

    def schedule(self, p: int, count: int) -> Schedule:
        ranks = np.arange(p)
        right = (ranks + 1) % p
        return Schedule(p, p - 1, lambda r: Round.aligned(ranks, right, (ranks - r) % p * count,
                                                          count, COPY))

    def closed_form_s(self, p: int, nbytes: float, alpha_s: float, beta_s: float) -> float:
        # Thakur, Rabenseifner and Gropp 2005, sec. 4.1: (p - 1) alpha + (p - 1) / p (p n) beta
        return (p - 1) * (alpha_s + nbytes * beta_s)


class RecursiveDoublingAllgather(Allgather):
    """Allgather in lg p rounds: in round k rank i swaps all it holds with rank i xor 2^k.

    Non-powers of two fold as :class:`RecursiveDoubling` does (MPICH does not: it uses
    ring or Bruck there): the first 2r ranks pair up, each even hands its block to its odd
    neighbour, the pof2 survivors double (a survivor that took a block holds two, so the
    groups' sizes differ; survivor 0's pair moves the most), and each odd sends the
    whole gathered vector, p n (the even's own block included: one message), back.
    """

    name = "recursive-doubling-allgather"

    def schedule(self, p: int, count: int) -> Schedule:
        pof2, extra, real = _fold(p)
        new = np.arange(pof2)
        # survivor j holds the contiguous blocks [first[j], end[j]); groups stay contiguous
        first = np.where(new < extra, 2 * new, new + extra)
        end = first + np.where(new < extra, 2, 1)
        rounds = []
        for mask in _masks(pof2):
            group = new - new % mask  # the first survivor of j's group of mask survivors
            lo, hi = first[group], end[group + mask - 1]
            rounds.append(Round.aligned(real[new], real[new ^ mask], lo * count,
                                        (hi - lo) * count, COPY))
        if extra:
            evens = 2 * np.arange(extra)
            rounds = ([Round.aligned(evens, evens + 1, evens * count, count, COPY)] + rounds
                      + [Round.aligned(evens + 1, evens, 0, p * count, COPY)])
        return Schedule.of(p, rounds)

    def closed_form_s(self, p: int, nbytes: float, alpha_s: float, beta_s: float) -> float:
        # powers of two: lg p alpha + (p - 1) n beta (Thakur, Rabenseifner and Gropp 2005,
        # sec. 4.1). Folded: each round ends with its largest exchange, the group of
        # survivor 0 (mask blocks, plus one for each folded survivor among them), and the
        # fold adds alpha + n beta in and alpha + p n beta out.
        pof2 = 1 << _lg(p)
        extra = p - pof2
        blocks = sum(mask + min(extra, mask) for mask in _masks(pof2))
        fold = 2 * alpha_s + (1 + p) * nbytes * beta_s if extra else 0.0
        return _lg(pof2) * alpha_s + blocks * nbytes * beta_s + fold


class Alltoall(Collective):
    """Every rank sends block j of its buffer to rank j; ``nbytes`` is one block m.

    The rounds read from a copy of each buffer (MPI_Alltoall's send buffer, see
    :mod:`sim.network.schedule`) and write the received blocks into the buffer itself.
    """

    kind = "alltoall"

    def blocks(self, p: int) -> int:
        return p


class PairwiseAlltoall(Alltoall):
    """All-to-all in p - 1 rounds: in round k = 1..p-1 rank i sends its block for i + k and
    receives rank i - k's (mod p); MPICH's algorithm for long messages."""

    name = "pairwise-alltoall"

    def schedule(self, p: int, count: int) -> Schedule:
        ranks = np.arange(p)
        sent = p * count  # where the send copy starts

        def step(r: int) -> Round:
            dst = (ranks + r + 1) % p
            return Round(ranks, dst, sent + dst * count, ranks * count,
                         np.full(p, count, np.int64), COPY)

        return Schedule(p, p - 1, step, send_copy=True)

    def closed_form_s(self, p: int, nbytes: float, alpha_s: float, beta_s: float) -> float:
        # Thakur, Rabenseifner and Gropp 2005, sec. 4: (p - 1) alpha + (p - 1) / p S beta,
        # each round one message of m = S / p each way on every NIC
        return (p - 1) * (alpha_s + nbytes * beta_s)


class BruckAlltoall(Alltoall):
    """All-to-all in ceil(lg p) rounds (Bruck et al. 1997); MPICH's algorithm for short
    messages, any p.

    MPICH rotates each buffer so that position q holds the block for rank i + q; in round
    k rank i packs every position with bit k set into one message to rank i + 2^k, which
    keeps them at the same positions; a block has reached its rank after the round of its
    position's highest bit, and a last inverse rotation puts it at its source's block.
    Here the rotations are offsets, not copies: position q lives in the send copy at block
    i + q, and a block's last round writes it straight to block i - q of the buffer. Round k
    carries c_k = #{q < p: bit k of q set} blocks, p / 2 for a power of two.
    """

    name = "bruck-alltoall"

    def schedule(self, p: int, count: int) -> Schedule:
        ranks = np.arange(p)[:, None]
        sent = p * count  # where the send copy starts

        def step(k: int) -> Round:
            shift = 1 << k
            q = np.flatnonzero(np.arange(p) & shift)  # the positions this round moves
            dst = (ranks + shift) % p
            home = q < 2 * shift  # bit k is q's highest: the block arrives at its rank
            src_off = sent + (ranks + q) % p * count
            dst_off = np.where(home, (dst - q) % p * count, sent + (dst + q) % p * count)
            blocks = len(q)
            pieces = Pieces(np.arange(p + 1) * blocks, src_off.ravel(), dst_off.ravel(),
                            np.full(p * blocks, count, np.int64))
            return Round(ranks[:, 0], dst[:, 0], src_off[:, 0], dst_off[:, 0],
                         np.full(p, blocks * count, np.int64), COPY, pieces)

        return Schedule(p, _ceil_lg(p), step, send_copy=True)

    def closed_form_s(self, p: int, nbytes: float, alpha_s: float, beta_s: float) -> float:
        # Thakur, Rabenseifner and Gropp 2005, sec. 4: lg p alpha + S / 2 lg p beta for a
        # power of two (S = p m). Any p: round k is one message of c_k m each way on every
        # NIC (a shift by 2^k < p pairs distinct ranks), so ceil(lg p) alpha + sum c_k m beta
        rounds = _ceil_lg(p)
        blocks = sum(_with_bit(p, k) for k in range(rounds))
        return rounds * alpha_s + blocks * nbytes * beta_s


class Hierarchical(Collective):
    """Reduce inside each host to its local rank 0, allreduce across hosts among those,
    broadcast inside each host (Goyal et al. 2017, sec. 4).

    The rounds and the closed form: :mod:`sim.network.hierarchical`. ``ranks_per_host``
    g: consecutive ranks share a host; ``inter``: the allreduce across hosts (one of
    :data:`INTER_ALLREDUCES`).
    :meth:`closed_form_s` is for one alpha and beta on both levels (no host link: a rank's
    messages to a rank beside it take the fabric too); :meth:`two_level_s` for two.
    """

    name = "hierarchical"
    takes = {"ranks_per_host": "cluster.ranks_per_host", "inter": "strategy.inter_collective"}
    leaders_only = True

    def __init__(self, ranks_per_host: int = 1, inter: str = "ring") -> None:
        if not (isinstance(ranks_per_host, int) and ranks_per_host >= 1):
            raise ValueError(f"ranks_per_host must be a positive integer, got "
                             f"{ranks_per_host!r}")
        if inter not in INTER_ALLREDUCES:
            raise ValueError(f"{self.name}: across hosts: "
                             + unknown("allreduce", inter, INTER_ALLREDUCES))
        self.ranks_per_host, self.inter = ranks_per_host, REGISTRY[inter]()

    def check_ranks(self, p: int) -> None:
        g = self.ranks_per_host
        if not self.leaders_only and p > g and p % g:
            raise ValueError(f"{self.name}: every host needs g = {g} ranks (local rank i "
                             f"allreduces piece i across hosts), got p = {p}")

    def schedule(self, p: int, count: int) -> Schedule:
        self.check_ranks(p)
        return two_level_schedule(p, count, self.ranks_per_host, Ring().schedule,
                                  self.inter.schedule, self.leaders_only)

    def closed_form_s(self, p: int, nbytes: float, alpha_s: float, beta_s: float) -> float:
        return self.two_level_s(p, nbytes, (alpha_s, beta_s), (alpha_s, beta_s))

    def two_level_s(self, p: int, nbytes: float, intra: tuple[float, float],
                    inter: tuple[float, float]) -> float:
        """Seconds with (alpha s, beta s/byte) ``intra`` inside a host and ``inter`` across."""
        return two_level_s(p, nbytes, self.ranks_per_host, intra, inter,
                           self.inter.closed_form_s, self.leaders_only)


class HierarchicalRS(Hierarchical):
    """Reduce-scatter inside each host, local rank i allreduces its 1/g of the vector with
    local rank i of every other host (on g NICs at once), allgather inside each host
    (Horovod's NCCLHierarchicalAllreduce).

    The rounds and the closed form: :mod:`sim.network.hierarchical`. Needs g ranks on every
    host (ValueError otherwise)."""

    name = "hierarchical-rs"
    leaders_only = False


REGISTRY: dict[str, type[Collective]] = {
    cls.name: cls for cls in (Ring, Rabenseifner, RecursiveDoubling, Tree, Broadcast,
                              ParameterServer, RingAllgather, RecursiveDoublingAllgather,
                              PairwiseAlltoall, BruckAlltoall, Hierarchical, HierarchicalRS)
}
# what a hierarchical allreduce may run across hosts: a flat allreduce among the ranks
INTER_ALLREDUCES = ("ring", "rabenseifner", "recursive-doubling", "tree")


def configured(name: str, setting: Callable[[str], Any]) -> Collective:
    """``name`` built with the run's settings it takes (:attr:`Collective.takes`);
    ``setting(dotted_key)`` reads one from the run's config. Raises ValueError."""
    params = {arg: setting(key) for arg, key in REGISTRY.get(name, Collective).takes.items()}
    return get_collective(name, **params)


def get_collective(name: str, **params: Any) -> Collective:
    """An algorithm by name, e.g. ``get_collective("ps", servers=4)``. Raises ValueError."""
    try:
        cls = REGISTRY[name]
    except KeyError:
        raise ValueError(unknown("collective", name, REGISTRY)) from None
    try:
        return cls(**params)
    except TypeError:
        raise ValueError(f"collective {name!r} does not take {sorted(params)}") from None


# ---- shared pieces ---------------------------------------------------------------------

def _lg(n: int) -> int:
    return n.bit_length() - 1


def _ceil_lg(n: int) -> int:
    return (n - 1).bit_length()


def _with_bit(p: int, k: int) -> int:
    """How many of 0..p-1 have bit k set: 2^k in every whole period of 2^(k+1), and the
    remainder's part past 2^k."""
    period = 2 << k
    return (p // period) * (1 << k) + max(0, p % period - (1 << k))


def _masks(pof2: int) -> list[int]:
    return [1 << k for k in range(_lg(pof2))]


def _steps(p: int) -> int:
    """Rounds of recursive doubling over p ranks, counting the fold in and out."""
    return _lg(p) + (0 if p & (p - 1) == 0 else 2)


def _fold(p: int) -> tuple[int, int, np.ndarray]:
    """(largest power of two <= p, extra ranks r, rank of each of the pof2 survivors).

    Of the first 2r ranks only the odd ones stay; the others stay as they are.
    """
    pof2 = 1 << _lg(p)
    extra = p - pof2
    new = np.arange(pof2)
    return pof2, extra, np.where(new < extra, 2 * new + 1, new + extra)


def _with_fold(rounds: list[Round], extra: int, count: int) -> list[Round]:
    """Wrap power-of-two rounds with the fold: evens give their vector, then get the sum."""
    if not extra:
        return rounds
    evens = 2 * np.arange(extra)
    return ([Round.aligned(evens, evens + 1, 0, count, SUM)] + rounds
            + [Round.aligned(evens + 1, evens, 0, count, COPY)])


def _binomial_reduce(p: int, count: int) -> list[Round]:
    ranks = np.arange(p)
    rounds = []
    for k in range(_ceil_lg(p)):
        mask = 1 << k
        senders = ranks[ranks % (2 * mask) == mask]
        rounds.append(Round.aligned(senders, senders - mask, 0, count, SUM))
    return rounds


def _binomial_broadcast(p: int, count: int) -> list[Round]:
    ranks = np.arange(p)
    rounds = []
    for k in reversed(range(_ceil_lg(p))):
        mask = 1 << k
        senders = ranks[(ranks % (2 * mask) == 0) & (ranks + mask < p)]
        rounds.append(Round.aligned(senders, senders + mask, 0, count, COPY))
    return rounds
