"""Two-level allreduce schedules: inside each host, across hosts, inside again.

Ranks are grouped by host as ``cluster.ranks_per_host`` places them: consecutive ranks, g a
host (the last host may hold fewer). Inside a host the steps are ring steps
(:class:`sim.network.collectives.Ring`'s rounds on the host's ranks); messages between ranks
of one host take the host link where there is one (:mod:`sim.network.two_tier`), else the
fabric. Across hosts runs any allreduce of the registry (``inter``, ``strategy.
inter_collective``; ring by default), on the fabric.

Two variants (``leaders_only``):

* **reduce, allreduce, broadcast** (Goyal et al. 2017, sec. 4 "Communication": the 8 GPUs'
  buffers of a server are summed into one per server, the servers' buffers allreduced, the
  result broadcast to every GPU; Horovod's first hierarchical mode, NCCL reduce + MPI
  allreduce + NCCL broadcast). The reduce is Rabenseifner's long-message reduce (Thakur,
  Rabenseifner and Gropp 2005, sec. 4.4: a ring reduce-scatter, then the pieces gathered
  to local rank 0, here in one round) and the broadcast van de Geijn's (sec. 4.1:
  scattered from local rank 0 in one round, then a ring allgather). Only local rank 0
  (the leader) of each host sends across hosts, the whole vector.
* **reduce-scatter, allreduce, allgather** (Horovod's ``NCCLHierarchicalAllreduce``,
  horovod/common/ops/nccl_operations.cc: ncclReduceScatter, MPI_Allreduce across nodes,
  ncclAllGather). After the ring reduce-scatter local rank i holds piece (i + 1) mod g
  summed over its host, and allreduces that 1/g of the vector with the ranks of the same
  local index on the other hosts: g allreduces at once, each on its own rank's NIC.

With one host both are the ring allreduce of its ranks; with one rank a host both are the
``inter`` allreduce of all ranks.

Closed forms (alpha, beta per level; n bytes; H hosts of g ranks; T_inter the ``inter``
algorithm's own closed form), exact for the flow model when g divides p and the element
count divides into g equal pieces, and the inter algorithm's pieces are equal too:

    reduce, allreduce, broadcast:  2 [(g - 1)(a_i + n/g b_i) + a_i + (g - 1)/g n b_i]
                                   + T_inter(H, n)
    reduce-scatter, ..., allgather: 2 (g - 1)(a_i + n/g b_i) + T_inter(H, n/g)

The ring parts are Patarasuk and Yuan 2009's ring (a reduce-scatter and an allgather,
(g - 1)(alpha + n/g beta) each); the one-round gather and scatter are g - 1 messages of n/g
sharing the leader's port: alpha + (g - 1)/g n beta.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from sim.network.schedule import COPY, Round, Schedule, chunks

ScheduleOf = Callable[[int, int], Schedule]  # (ranks, elements) -> a schedule
ClosedForm = Callable[[int, float, float, float], float]  # (p, bytes, alpha, beta) -> s


def host_sizes(p: int, g: int) -> list[int]:
    """Ranks on each host: consecutive ranks, g a host, the last host the rest."""
    hosts = math.ceil(p / g)
    return [min(g, p - h * g) for h in range(hosts)]


def two_level_schedule(p: int, count: int, g: int, ring: ScheduleOf, inter: ScheduleOf,
                       leaders_only: bool) -> Schedule:
    """The rounds of a two-level allreduce of ``count`` elements over p ranks, g a host.

    ``ring``: the ring allreduce's schedule (its first k - 1 rounds are the reduce-scatter,
    the rest the allgather); ``inter``: the allreduce across hosts. The reduce-scatter
    variant needs even hosts (g divides p; the caller checks).
    """
    sizes = host_sizes(p, g)
    bases = np.cumsum([0] + sizes[:-1])
    intra = _Intra(sizes, bases, count, ring)
    if len(sizes) == 1:  # one host: nothing crosses hosts, a ring allreduce inside it
        phases = [intra.reduce_scatter, intra.allgather]
    elif leaders_only:
        phases = [intra.reduce_scatter, [intra.gather()],
                  _inter_rounds(inter(len(sizes), count), [(bases, 0)]),
                  [intra.scatter()], intra.allgather]
    else:
        offset, length = chunks(count, g)
        # local rank i holds piece (i + 1) mod g: it allreduces that piece across hosts
        slices = [(bases + i, (i + 1) % g) for i in range(g)]
        per_slice = [(ranks, int(offset[piece]), inter(len(sizes), int(length[piece])))
                     for ranks, piece in slices]
        phases = [intra.reduce_scatter, _parallel_inter(per_slice), intra.allgather]
    return _concatenated(p, phases)


def two_level_s(p: int, nbytes: float, g: int, intra: tuple[float, float],
                inter: tuple[float, float], inter_s: ClosedForm, leaders_only: bool) -> float:
    """The closed form (module docstring), seconds: ``intra`` and ``inter`` are (alpha s,
    beta s/byte) of the host link and the fabric, ``inter_s`` the inter algorithm's closed
    form. Uses the largest host's g (exact for even hosts)."""
    hosts, k = math.ceil(p / g), min(g, p)
    a_i, b_i = intra
    ring_half = (k - 1) * (a_i + nbytes / k * b_i)  # a ring reduce-scatter (or allgather)
    if hosts == 1:
        return 2 * ring_half
    if not leaders_only:
        return 2 * ring_half + inter_s(hosts, nbytes / k, *inter)
    gather = a_i + (k - 1) / k * nbytes * b_i if k > 1 else 0.0
    return 2 * (ring_half + gather) + inter_s(hosts, nbytes, *inter)


class _Intra:
    """The ring rounds inside every host at once, and the gather to and scatter from each
    host's local rank 0. Hosts of one size share their rounds (at most two sizes)."""

    def __init__(self, sizes: list[int], bases: np.ndarray, count: int, ring: ScheduleOf
                 ) -> None:
        self.count = count
        sizes_arr = np.asarray(sizes)
        # k -> (the first rank of each host of k ranks, the ring of k ranks)
        self.groups = {k: (bases[sizes_arr == k], ring(k, count))
                       for k in sorted(set(sizes))}
        longest = max(sizes) - 1
        self.reduce_scatter = [self._ring_round(r, 0) for r in range(longest)]
        self.allgather = [self._ring_round(r, 1) for r in range(longest)]

    def _ring_round(self, r: int, half: int) -> Round:
        """Round r of every host's reduce-scatter (half 0) or allgather (half 1)."""
        parts = []
        for k, (bases, sched) in self.groups.items():
            if r < k - 1:
                rnd = sched.round(half * (k - 1) + r)
                parts.append(_on_hosts(bases, rnd.src, rnd.dst, rnd.src_off, rnd.dst_off,
                                       rnd.count, rnd.op))
        return _joined(parts)

    def _pieces(self, to_leader: bool) -> Round:
        """Every non-leader's summed piece (local rank i's is piece (i + 1) mod k) moving
        to its host's local rank 0 (``to_leader``) or back from it."""
        parts = []
        for k, (bases, _) in self.groups.items():
            offset, length = chunks(self.count, k)
            local = np.arange(1, k)
            piece = (local + 1) % k
            leader = np.zeros_like(local)
            src, dst = (local, leader) if to_leader else (leader, local)
            parts.append(_on_hosts(bases, src, dst, offset[piece], offset[piece],
                                   length[piece], COPY))
        return _joined(parts)

    def gather(self) -> Round:
        """Every non-leader sends its summed piece to its host's local rank 0."""
        return self._pieces(to_leader=True)

    def scatter(self) -> Round:
        """Local rank 0 sends every other rank of its host that rank's piece back."""
        return self._pieces(to_leader=False)


def _on_hosts(bases: np.ndarray, src: np.ndarray, dst: np.ndarray, src_off: np.ndarray,
              dst_off: np.ndarray, count: np.ndarray, op: str) -> Round:
    """One host's transfers (local ranks) repeated on every host starting at ``bases``."""
    hosts = len(bases)
    return Round((bases[:, None] + src).ravel(), (bases[:, None] + dst).ravel(),
                 np.tile(src_off, hosts), np.tile(dst_off, hosts), np.tile(count, hosts), op)


def _inter_rounds(schedule: Schedule, slices: list[tuple[np.ndarray, int]]) -> list[Round]:
    return _parallel_inter([(ranks, offset, schedule) for ranks, offset in slices])


def _parallel_inter(per_slice: list[tuple[np.ndarray, int, Schedule]]) -> list[Round]:
    """Allreduces across hosts side by side: slice j's schedule on ranks ``ranks_j`` (its
    endpoint e is rank ranks_j[e]) over the elements from ``offset_j`` on."""
    n_rounds = per_slice[0][2].n_rounds
    rounds = []
    for r in range(n_rounds):
        parts = []
        for ranks, offset, sched in per_slice:
            rnd = sched.round(r)
            parts.append(Round(ranks[rnd.src], ranks[rnd.dst], rnd.src_off + offset,
                               rnd.dst_off + offset, rnd.count, rnd.op))
        rounds.append(_joined(parts))
    return rounds


def _joined(parts: list[Round]) -> Round:
    """Rounds of one op that run at once, as one round."""
    return Round(*(np.concatenate([getattr(part, name) for part in parts]).astype(np.int64)
                   for name in ("src", "dst", "src_off", "dst_off", "count")),
                 parts[0].op if parts else COPY)


def _concatenated(p: int, phases: list[list[Round]]) -> Schedule:
    return Schedule.of(p, [rnd for phase in phases for rnd in phase if len(rnd)])
