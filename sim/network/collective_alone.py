"""One collective timed alone, in a fresh simulation: :func:`simulate` (the buffers
reduced), :func:`run_alone` (time and network) and :func:`time_collective` (a row of
``sim collective``'s table)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import simpy

from sim.network.collectives import Collective, get_collective
from sim.network.fabrics import Fabric
from sim.network.message_cost import alpha_s, beta_s, describe_fabric
from sim.network.network_builder import Network, build_network, endpoint_machines, with_host_link
from sim.network.topology import place


class Outcome(NamedTuple):
    """What :func:`simulate` returns: ``time_s, result = simulate(...)``."""

    time_s: float
    result: Sequence[np.ndarray] | None  # the buffers, reduced in place (None: timing only)


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
