"""Topologies: hosts joined by full-duplex links, with vectorised routing.

A full-duplex link is two directed links, each with its own capacity, so traffic in one
direction never slows the other. Every topology numbers its directed links 0..n_links-1
and answers :meth:`Topology.paths` for whole arrays of (src, dst) host pairs at once, which
is what lets the flow model start a thousand flows in one numpy call.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np

from sim.names import unknown


class Paths(NamedTuple):
    """Routes of F flows as (flow, link) pairs, grouped by flow in path order."""

    flow: np.ndarray  # int64, index of the flow in the query, non-decreasing
    link: np.ndarray  # int64, directed link id
    hops: np.ndarray  # int64 per flow: links on its path (0 when src == dst)


class Topology(ABC):
    """Hosts 0..n_hosts-1 and directed links with capacities in bytes/s."""

    name: ClassVar[str]

    def __init__(self, n_hosts: int, capacity_Bps: np.ndarray, group: np.ndarray,
                 ports: Sequence[int] | None = None) -> None:
        if n_hosts < 1:
            raise ValueError(f"a topology needs at least 1 host, got {n_hosts}")
        self.n_hosts = n_hosts
        self.capacity_Bps = capacity_Bps.astype(np.float64)
        self.group = group  # per host: the switch (leaf) it hangs off, for placement
        # per host: the host whose NIC port (links to and from the switch) it uses
        self.ports = shared_ports(n_hosts, ports)

    @property
    def n_links(self) -> int:
        return len(self.capacity_Bps)

    @abstractmethod
    def paths(self, src: np.ndarray, dst: np.ndarray) -> Paths:
        """Routes for each (src[i], dst[i]); src == dst gives an empty path."""

    @abstractmethod
    def link_name(self, link: int) -> str:
        """A readable name for a directed link, e.g. 'host3->switch'."""

    @abstractmethod
    def injection_Bps(self) -> float:
        """The smallest total outgoing capacity of any host, bytes/s."""

    def route(self, src: int, dst: int) -> list[int]:
        """The directed links from host src to host dst (the same as :meth:`paths`; the
        topologies answer it in plain Python, for messages sent one at a time)."""
        return self.paths(np.array([src]), np.array([dst])).link.tolist()


class Star(Topology):
    """One non-blocking switch. Links: host h up = h, down = n_hosts + h; a host sharing
    another's NIC (``ports``) uses that one's links."""

    name = "star"

    def __init__(self, n_hosts: int, link_Bps: float, nics_per_host: int = 1,
                 ports: Sequence[int] | None = None) -> None:
        _check_positive("nics_per_host", nics_per_host)
        host_Bps = nics_per_host * link_Bps  # several NICs act as one wider port
        super().__init__(n_hosts, np.full(2 * n_hosts, host_Bps), np.zeros(n_hosts, np.int64),
                         ports)

    def paths(self, src: np.ndarray, dst: np.ndarray) -> Paths:
        links = np.stack([self.ports[src], self.n_hosts + self.ports[dst]], axis=1)
        return _fixed_paths(links, np.repeat((src != dst)[:, None], 2, axis=1))

    def route(self, src: int, dst: int) -> list[int]:
        ports = self.ports
        return [] if src == dst else [int(ports[src]), self.n_hosts + int(ports[dst])]

    def link_name(self, link: int) -> str:
        host = link % self.n_hosts
        return f"host{host}->switch" if link < self.n_hosts else f"switch->host{host}"

    def injection_Bps(self) -> float:
        return float(self.capacity_Bps[0])


class LeafSpine(Topology):
    """Two-level leaf-spine (folded Clos / fat tree) with an oversubscribed spine.

    Each leaf switch serves ``hosts_per_leaf`` hosts; its uplink to the spine carries
    hosts_per_leaf * host rate / oversubscription each way. The spine is modelled as one
    non-blocking stage, i.e. ECMP spreads a leaf's traffic evenly over its uplinks (the
    usual fluid assumption). Links: host up h, host down H + h, leaf up 2H + l, leaf down
    2H + L + l. Intra-leaf paths have 2 hops, inter-leaf paths 4.
    """

    name = "leaf-spine"

    def __init__(self, n_hosts: int, link_Bps: float, hosts_per_leaf: int = 16,
                 oversubscription: float = 1.0, nics_per_host: int = 1,
                 ports: Sequence[int] | None = None) -> None:
        _check_positive("hosts_per_leaf", hosts_per_leaf)
        _check_positive("nics_per_host", nics_per_host)
        if not oversubscription >= 1:
            raise ValueError(f"oversubscription must be >= 1 (1 = non-blocking), "
                             f"got {oversubscription}")
        self.hosts_per_leaf = hosts_per_leaf
        self.oversubscription = float(oversubscription)
        self.n_leaves = -(-n_hosts // hosts_per_leaf)
        host_Bps = nics_per_host * link_Bps
        uplink_Bps = hosts_per_leaf * host_Bps / oversubscription
        capacity = np.concatenate([np.full(2 * n_hosts, host_Bps),
                                   np.full(2 * self.n_leaves, uplink_Bps)])
        super().__init__(n_hosts, capacity, np.arange(n_hosts) // hosts_per_leaf, ports)
        # a host sharing another's NIC hangs off that one's leaf
        self.group = self.group[self.ports]

    def paths(self, src: np.ndarray, dst: np.ndarray) -> Paths:
        hosts, leaves = self.n_hosts, self.n_leaves
        src_leaf, dst_leaf = self.group[src], self.group[dst]
        links = np.stack([self.ports[src], 2 * hosts + src_leaf,
                          2 * hosts + leaves + dst_leaf, hosts + self.ports[dst]], axis=1)
        crosses = src_leaf != dst_leaf
        used = np.stack([src != dst, crosses, crosses, src != dst], axis=1)
        return _fixed_paths(links, used)

    def route(self, src: int, dst: int) -> list[int]:
        if src == dst:
            return []
        hosts, leaves = self.n_hosts, self.n_leaves
        up, down = int(self.ports[src]), int(self.ports[dst])
        src_leaf, dst_leaf = up // self.hosts_per_leaf, down // self.hosts_per_leaf
        if src_leaf == dst_leaf:
            return [up, hosts + down]
        return [up, 2 * hosts + src_leaf, 2 * hosts + leaves + dst_leaf, hosts + down]

    def link_name(self, link: int) -> str:
        hosts, leaves = self.n_hosts, self.n_leaves
        if link < hosts:
            return f"host{link}->leaf{self.group[link]}"
        if link < 2 * hosts:
            return f"leaf{self.group[link - hosts]}->host{link - hosts}"
        leaf = (link - 2 * hosts) % leaves
        return f"leaf{leaf}->spine" if link < 2 * hosts + leaves else f"spine->leaf{leaf}"

    def injection_Bps(self) -> float:
        return float(self.capacity_Bps[0])


class Ring(Topology):
    """Hosts cabled in a ring, no switch; each NIC has one port per neighbour.

    Links: h -> h+1 is link h (clockwise), h -> h-1 is link H + h. A message takes the
    shorter way round (clockwise on a tie) and crosses one link per hop.
    """

    name = "ring"

    def __init__(self, n_hosts: int, link_Bps: float) -> None:
        super().__init__(n_hosts, np.full(2 * n_hosts, link_Bps), np.zeros(n_hosts, np.int64))

    def paths(self, src: np.ndarray, dst: np.ndarray) -> Paths:
        hosts = self.n_hosts
        clockwise = (dst - src) % hosts
        forward = clockwise <= hosts - clockwise
        hops = np.where(forward, clockwise, hosts - clockwise).astype(np.int64)
        flow = np.repeat(np.arange(len(src)), hops)
        step = np.arange(hops.sum()) - np.repeat(np.cumsum(hops) - hops, hops)
        direction = np.where(forward, 1, -1)[flow]
        at = (src[flow] + direction * step) % hosts  # the host each hop leaves from
        link = np.where(direction > 0, at, hosts + at)
        return Paths(flow, link, hops)

    def route(self, src: int, dst: int) -> list[int]:
        hosts = self.n_hosts
        clockwise = (dst - src) % hosts
        if clockwise <= hosts - clockwise:
            return [(src + step) % hosts for step in range(clockwise)]
        return [hosts + (src - step) % hosts for step in range(hosts - clockwise)]

    def link_name(self, link: int) -> str:
        hosts = self.n_hosts
        host = link % hosts
        other = (host + 1) % hosts if link < hosts else (host - 1) % hosts
        return f"host{host}->host{other}"

    def injection_Bps(self) -> float:
        return 2 * float(self.capacity_Bps[0])


TOPOLOGIES: dict[str, type[Topology]] = {
    "star": Star,
    "leaf-spine": LeafSpine,
    "fat-tree": LeafSpine,  # a two-level fat tree is a leaf-spine network
    "ring": Ring,
}


def topology_class(name: str) -> type[Topology]:
    """The registered topology called ``name``; raises ValueError listing the known ones."""
    try:
        return TOPOLOGIES[name]
    except KeyError:
        raise ValueError(unknown("topology", name, TOPOLOGIES)) from None


def topology_options(name: str) -> set[str]:
    """Keyword options the topology ``name`` takes (e.g. oversubscription)."""
    parameters = inspect.signature(topology_class(name).__init__).parameters
    return set(parameters) - {"self", "n_hosts", "link_Bps"}


def make_topology(name: str, n_hosts: int, link_Bps: float, **options: Any) -> Topology:
    """Build a registered topology; raises ValueError for an unknown name or option."""
    cls = topology_class(name)
    accepted = topology_options(name)
    unknown = set(options) - accepted
    if unknown:
        raise ValueError(f"topology {name!r} takes no option {', '.join(sorted(unknown))}; "
                         f"it takes {', '.join(sorted(accepted)) or 'none'}")
    return cls(n_hosts, link_Bps, **options)


def _block(topology: Topology, n: int) -> np.ndarray:
    return np.arange(n)


def _round_robin(topology: Topology, n: int) -> np.ndarray:
    # Deal ranks across switches: rank i goes to leaf i mod L, so neighbours in rank order
    # sit on different leaves (the worst case for a ring over an oversubscribed spine).
    slot = np.arange(topology.n_hosts) - np.searchsorted(topology.group, topology.group)
    return np.lexsort((topology.group, slot))[:n]


PLACEMENTS: dict[str, Callable[[Topology, int], np.ndarray]] = {
    "block": _block,
    "round-robin": _round_robin,
}


def place(topology: Topology, n: int, how: str = "block") -> np.ndarray:
    """Hosts for ranks 0..n-1. Raises ValueError for an unknown placement or too few hosts."""
    if how not in PLACEMENTS:
        raise ValueError(f"unknown placement {how!r}; expected one of {', '.join(PLACEMENTS)}")
    if n > topology.n_hosts:
        raise ValueError(f"{n} ranks do not fit on {topology.n_hosts} hosts")
    return PLACEMENTS[how](topology, n)


def _fixed_paths(links: np.ndarray, used: np.ndarray) -> Paths:
    """Paths from a (F, k) table of candidate links and a mask of the ones each flow uses."""
    flow = np.repeat(np.arange(len(links)), links.shape[1]).reshape(links.shape)
    return Paths(flow[used], links[used].astype(np.int64), used.sum(axis=1).astype(np.int64))


def shared_ports(n_hosts: int, ports: Sequence[int] | None) -> np.ndarray:
    """Each host's NIC port as the host that owns it: ``ports[h]`` for the first
    ``len(ports)`` hosts, a host's own beyond them (and all, for None). A port's owner uses
    its own (``ports[ports[h]] == ports[h]``). Raises ValueError otherwise."""
    own = np.arange(n_hosts)
    if ports is None:
        return own
    given = np.asarray(ports, np.int64)[:n_hosts]
    own[:len(given)] = given
    if ((own < 0) | (own >= n_hosts)).any() or (own[own] != own).any():
        raise ValueError(f"ports: each host's NIC must be a host in [0, {n_hosts}) that uses "
                         f"its own, got {given.tolist()}")
    return own


def _check_positive(name: str, value: int) -> None:
    if not (isinstance(value, int) and value >= 1):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
