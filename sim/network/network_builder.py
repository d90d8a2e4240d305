"""Building a simulated network: the network model (flow or analytical) over a fabric and a
topology, and a host link between the endpoints of one machine.

Every simulated run's network is built here (:mod:`sim.simulated.engine`), and so is the
network of a collective timed alone (:mod:`sim.network.collective_alone`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import simpy

from sim.network.analytical import AnalyticalNetwork
from sim.network.fabrics import Fabric, get_fabric
from sim.network.flow import FlowNetwork
from sim.network.host_links import get_host_link
from sim.network.topology import make_topology
from sim.network.transports import Transport
from sim.network.two_tier import TwoTierNetwork

Network = FlowNetwork | AnalyticalNetwork | TwoTierNetwork

MODELS: dict[str, type[Network]] = {
    "flow": FlowNetwork,
    "analytical": AnalyticalNetwork,
}


def build_network(env: simpy.Environment, fabric: str | Mapping[str, Any] | Fabric,
                  n_hosts: int, *, topology: str = "star", model: str = "flow",
                  transport: Transport | None = None, **topology_options: Any) -> Network:
    """A network of ``n_hosts`` hosts whose messages go by ``transport`` (its frames and
    its window; None: MPI's, neither). Raises ValueError for an unknown name or option."""
    fabric = get_fabric(fabric)
    if model not in MODELS:
        raise ValueError(f"unknown network model {model!r}; expected one of "
                         f"{', '.join(MODELS)}")
    topo = make_topology(topology, n_hosts, fabric.bandwidth_Bps, **topology_options)
    if model == "flow":
        return FlowNetwork(env, fabric, topo, transport=transport)
    return MODELS[model](env, fabric, topo, transport=transport)


def endpoint_machines(placed: np.ndarray, rank_machines: Sequence[int],
                      n_endpoints: int) -> np.ndarray:
    """The machine of every endpoint: rank r's (``rank_machines[r]``) at ``placed[r]``; an
    endpoint holding no rank is alone on a machine of its own (a negative id)."""
    machine = -1 - np.arange(n_endpoints)
    ranks = min(len(rank_machines), len(placed))
    machine[np.asarray(placed[:ranks], np.int64)] = np.asarray(rank_machines[:ranks], np.int64)
    return machine


def nic_ports(machines: Sequence[int], nics_per_host: int) -> np.ndarray:
    """Each rank's NIC port as the first rank that uses the same NIC (ranks placed one to
    an endpoint, in order: ``cluster.placement = "block"``): a machine of g ranks with k
    NICs gives its i-th rank (in rank order) NIC (i k) // g, so consecutive ranks share one
    and every NIC serves g / k of them (as a DGX-1 pairs its 8 GPUs on 4 InfiniBand
    adapters by PCIe switch). Ranks sharing a NIC share its links to the switch
    (:class:`sim.network.topology.Topology`'s ``ports``). Raises ValueError for
    ``nics_per_host`` < 1."""
    if nics_per_host < 1:
        raise ValueError(f"nics_per_host must be >= 1, got {nics_per_host}")
    machines = np.asarray(machines, np.int64)
    ports = np.arange(len(machines))
    for machine in np.unique(machines):
        ranks = np.flatnonzero(machines == machine)
        nic = np.arange(len(ranks)) * nics_per_host // len(ranks)
        first = ranks[np.searchsorted(nic, nic)]  # nic is sorted: its first rank's
        ports[ranks] = first
    return ports


def with_host_link(network: Network, host_link: str | Fabric | None,
                   machine: np.ndarray) -> Network:
    """``network`` with a host link between endpoints of one machine (``machine[e]``:
    endpoint e's, see :mod:`sim.network.two_tier`); the network itself, unchanged, when
    ``host_link`` is None or "none" or no two endpoints share a machine. Raises ValueError
    for an unknown host link."""
    link = get_host_link(host_link) if isinstance(host_link, str) else host_link
    if link is None or len(np.unique(machine)) == len(machine):
        return network
    inside = build_network(network.env, link, len(machine), topology="star",
                           model=network.model)
    return TwoTierNetwork(network, inside, machine)
