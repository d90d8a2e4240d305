"""An all-to-all with a size per pair (MPI_Alltoallv) by pairwise exchange, timing only.

``bytes_matrix[i, j]`` is what rank i sends rank j, in bytes (whole, >= 0; the diagonal, a
rank's block to itself, is a local copy and costs nothing). Inside a SimPy process, on the
flow, analytical or two-tier network::

    elapsed_s = yield from alltoallv(network, bytes_matrix)               # rank i on host i
    elapsed_s = yield from alltoallv(network, bytes_matrix, hosts=hosts)  # on hosts[i]

The embedding exchange of model-parallel tables (DLRM) calls it with a skewed matrix: the
shard holding the hot rows sends more. The all-to-alls of one size m per pair, with data,
are ``pairwise-alltoall`` and ``bruck-alltoall`` in :mod:`sim.network.collectives`.

The algorithm is Open MPI's ``ompi_coll_base_alltoallv_intra_pairwise`` (MPICH's pairwise
MPI_Alltoall with sizes per pair): in round k = 1..p-1 rank i sends bytes_matrix[i, i + k]
to rank i + k and receives bytes_matrix[i - k, i] from rank i - k (mod p) with one blocking
MPI_Sendrecv. So a rank goes on to round k + 1 once its own send and receive of round k are
done, with no barrier between rounds, and a message starts once both its ranks are in its
round (:mod:`sim.network.schedule`). An empty message still costs alpha (a Sendrecv of
count 0 still matches a message).

Closed form on one idle star switch (each host one uplink and one downlink of bandwidth
B = 1 / beta; :func:`closed_form_s`). While rank i is in round k the only messages on its
links are its send (on its uplink) and the one it receives (on its downlink): a rank is in
one round at a time, and a message needs both its ranks in its round. So every message has
its links to itself, max-min gives it all of B, and it takes alpha + b beta from its start,
in the flow model as in the analytical one. The time is the longest path through the
rounds, with b_ij = bytes_matrix[i, j]:

    t_i(0) = 0
    s_ij = max(t_i(k - 1), t_j(k - 1))                 the start of i -> j = i + k
    t_i(k) = max(s_{i,i+k} + alpha + b_{i,i+k} beta,  s_{i-k,i} + alpha + b_{i-k,i} beta)
    T = max_i t_i(p - 1)

A uniform matrix keeps the ranks in step: T = (p - 1)(alpha + m beta), the pairwise
all-to-all's closed form. A skewed one lies between two sums: each rank's own rounds,
max_i sum_k (alpha + max(b_{i,i+k}, b_{i-k,i}) beta) (every rank waits at least for its own
messages), and rounds kept in step by a barrier, sum_k (alpha + max_i b_{i,i+k} beta) (no
rank waits longer than the round's largest message); a rank with light rounds runs ahead
until it meets a peer still in an earlier round, so T is below the barrier sum when the
heavy messages of different rounds fall on different ranks.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.network.collectives import Collective, Plan
from sim.network.schedule import COPY, Round, Schedule

if TYPE_CHECKING:
    import simpy


def alltoallv(network: Any, bytes_matrix: Any,
              hosts: np.ndarray | None = None) -> Generator[simpy.Event, Any, float]:
    """SimPy process body: the pairwise all-to-all of ``bytes_matrix`` (p x p, bytes from
    rank i to rank j) on ``network``, rank i on host ``hosts[i]`` (default i); returns the
    elapsed simulated time (s). Raises ValueError naming ``bytes_matrix`` or the hosts."""
    return (yield from Alltoallv(bytes_matrix).run(network, hosts=hosts))


def closed_form_s(bytes_matrix: Any, alpha_s: float, beta_s: float) -> float:
    """The pairwise all-to-all's time on one idle star switch (s): the recurrence in the
    module's docstring, alpha s per message and beta s per byte. Raises ValueError."""
    b = checked_matrix(bytes_matrix)
    p = len(b)
    ranks = np.arange(p)
    done = np.zeros(p)  # t_i(k): when rank i is through round k
    for k in range(1, p):
        to = (ranks + k) % p
        arrive = np.maximum(done, done[to]) + alpha_s + b[ranks, to] * beta_s  # i -> i + k
        done = np.maximum(arrive, np.roll(arrive, k))  # and i - k -> i
    return float(done.max())


def checked_matrix(bytes_matrix: Any) -> np.ndarray:
    """``bytes_matrix`` as a p x p int64 array (p >= 1). Raises ValueError naming it unless
    it is square and holds whole, finite numbers of bytes >= 0."""
    b = np.asarray(bytes_matrix)
    if b.ndim != 2 or b.shape[0] != b.shape[1] or b.shape[0] < 1:
        raise ValueError(f"bytes_matrix: expected a p x p matrix (p >= 1 ranks), got shape "
                         f"{b.shape}")
    if b.dtype.kind not in "iuf":
        raise ValueError(f"bytes_matrix: expected numbers of bytes, got dtype {b.dtype}")
    if not np.isfinite(b).all() or (b < 0).any() or (b != np.floor(b)).any():
        raise ValueError("bytes_matrix: expected whole numbers of bytes >= 0, got "
                         f"{b[~np.isfinite(b) | (b < 0) | (b != np.floor(b))][:3].tolist()}")
    return b.astype(np.int64)


class Alltoallv(Collective):
    """The pairwise all-to-all of a p x p matrix of bytes (timing only; see the module).

    Its ``nbytes`` is the matrix's mean entry (rounded), so a uniform matrix of m bytes
    reports what :class:`~sim.network.collectives.PairwiseAlltoall` does for m; the closed
    form and the bound read the matrix itself.
    """

    name = "alltoallv"
    kind = "alltoall"

    def __init__(self, bytes_matrix: Any) -> None:
        self.bytes = checked_matrix(bytes_matrix)
        self.p = len(self.bytes)

    def schedule(self, p: int, count: int) -> Schedule:
        if p != self.p:
            raise ValueError(f"alltoallv: bytes_matrix is for {self.p} ranks, not {p}")
        ranks = np.arange(p)

        def step(r: int) -> Round:
            to = (ranks + r + 1) % p
            return Round.aligned(ranks, to, 0, self.bytes[ranks, to], COPY)

        return Schedule(p, p - 1, step)

    def closed_form_s(self, p: int, nbytes: float, alpha_s: float, beta_s: float) -> float:
        if p != self.p:
            raise ValueError(f"alltoallv: bytes_matrix is for {self.p} ranks, not {p}")
        return closed_form_s(self.bytes, alpha_s, beta_s)

    def lower_bound_s(self, p: int, nbytes: float, bandwidth_Bps: float) -> float:
        """The busiest NIC's bytes, sent or received (the diagonal stays home), over B (s)."""
        sent = self.bytes - np.diag(np.diag(self.bytes))
        return float(max(sent.sum(axis=1).max(), sent.sum(axis=0).max())) / bandwidth_Bps

    def plan(self, buffers: Sequence[np.ndarray] | None = None, *, p: int | None = None,
             nbytes: int | None = None, hosts: np.ndarray | None = None) -> Plan:
        """The plan for the matrix; ``p``, if given, must be its size. Raises ValueError."""
        if buffers is not None or nbytes is not None:
            raise ValueError("alltoallv: timing only, the bytes come from bytes_matrix (no "
                             "buffers, no nbytes)")
        if p is not None and p != self.p:
            raise ValueError(f"alltoallv: bytes_matrix is for {self.p} ranks, not {p}")
        mean = int(round(float(self.bytes.mean())))
        return super().plan(p=self.p, nbytes=mean, hosts=hosts)
