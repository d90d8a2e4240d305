"""Building a network and running one collective in a fresh simulation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import simpy

from sim.network.analytical import AnalyticalNetwork
from sim.network.collectives import Collective, get_collective
from sim.network.fabrics import Fabric, get_fabric
from sim.network.flow import FlowNetwork
from sim.network.host_links import get_host_link
from sim.network.message_cost import alpha_s, beta_s, describe_fabric
from sim.network.topology import make_topology, place
from sim.network.transports import Transport
from sim.network.two_tier import TwoTierNetwork

Network = FlowNetwork | AnalyticalNetwork | TwoTierNetwork

MODELS: dict[str, type[Network]] = {
    "flow": FlowNetwork,
    "analytical": AnalyticalNetwork,
}


class Outcome(NamedTuple):
    """What :func:`simulate` returns: ``time_s, result = simulate(...)``."""

    time_s: float
    result: Sequence[np.ndarray] | None  # the buffers, reduced in place (None: timing only)


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


def simulate(collective: str | Collective, buffers: Sequence[np.ndarray] | None = None,
             **options: Any) -> Outcome:
    """Run one collective alone in a new environment: ``time_s, result = simulate(...)``.

    Give ``buffers`` (reduced in place and returned as ``result``) or ``p`` and ``nbytes``
    (timing only); other options as :func:`run_alone`. Raises ValueError.
    """
    time_s, _ = run_alone(collective, buffers, **options)
    return Outcome(time_s, buffers)


def run_alone(collective: str | Collective, buffers: Sequence[np.ndarray] | None = None, *,
              p: int | None = None, nbytes: int | None = None,
              fabric: str | Mapping[str, Any] | Fabric = "ib-hdr", topology: str = "star",
              model: str = "flow", placement: str = "block",
              host_link: str | Fabric | None = None, machines: Sequence[int] = (),
              **topology_options: Any) -> tuple[float, Network]:
    """(simulated time in s, the network it ran on) for one collective in a new environment.

    Ranks are placed on hosts by ``placement`` (block or round-robin); parameter servers
    come after the workers. ``machines[r]``: rank r's machine, whose ranks talk over
    ``host_link`` (:func:`with_host_link`; ranks beyond the list each have a machine of
    their own). Raises ValueError for bad arguments.
    """
    algo = get_collective(collective) if isinstance(collective, str) else collective
    workers = len(buffers) if buffers is not None else p
    if workers is None or workers < 1:
        raise ValueError(f"need at least one worker, got {workers}")
    endpoints = algo.n_endpoints(workers)
    env = simpy.Environment()
    network = build_network(env, fabric, endpoints, topology=topology, model=model,
                            **topology_options)
    hosts = place(network.topology, endpoints, placement)
    network = with_host_link(network, host_link, endpoint_machines(hosts, machines, endpoints))
    run = env.process(algo.run(network, buffers, p=p, nbytes=nbytes, hosts=hosts))
    env.run(run)
    return run.value, network


def time_collective(algo: Collective, p: int, nbytes: int, fabric: Fabric,
                    where: Mapping[str, Any]) -> dict[str, Any]:
    """One collective of ``nbytes`` per rank on ``p`` ranks, timed alone (no data): its
    time, closed form and lower bound (s), and nccl-tests' algorithm and bus bandwidths
    (bytes/s; None for a zero time). ``where``: topology, model and their options."""
    time_s, network = run_alone(algo, p=p, nbytes=nbytes, fabric=fabric, **where)
    total = algo.total_bytes(p, nbytes)  # nccl-tests' S: p n for an allgather
    algbw = total / time_s if time_s > 0 else None
    return {
        "algo": algo.name, "collective": algo.kind, "workers": p,
        "servers": getattr(algo, "servers", None),
        "bytes": nbytes, "total_bytes": total, "fabric": describe_fabric(fabric),
        "time_s": time_s,
        "closed_form_s": algo.closed_form_s(p, nbytes, alpha_s(fabric), beta_s(fabric)),
        "lower_bound_s": algo.lower_bound_s(p, nbytes, network.topology.injection_Bps()),
        "algbw_Bps": algbw,
        "busbw_Bps": None if algbw is None else algbw * algo.bus_factor(p),
        "bus_factor": algo.bus_factor(p), "messages": network.messages_delivered,
    }
