"""The cluster network: fabrics, topologies, flow-level sharing, collectives.

Inside a SimPy simulation::

    network = build_network(env, "ib-hdr", n_hosts=64)            # flow model, one switch
    yield network.send(0, 1, nbytes=4096)                          # point to point
    elapsed_s = yield from get_collective("ring").run(network, buffers)   # allreduce
    elapsed_s = yield from alltoallv(network, bytes_matrix)        # bytes[i, j]: i -> j

Alone: ``time_s, result = simulate("ring", buffers, fabric="ib-hdr")``.

Names are imported on first use (PEP 562), so ``python -m sim --help`` does not load
numpy, SimPy and the C kernels.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, tuple[str, str]] = {
    "AnalyticalNetwork": ("sim.network.analytical", "AnalyticalNetwork"),
    "alltoallv": ("sim.network.alltoall", "alltoallv"),
    "COLLECTIVES": ("sim.network.collectives", "REGISTRY"),
    "Collective": ("sim.network.collectives", "Collective"),
    "get_collective": ("sim.network.collectives", "get_collective"),
    "FABRICS": ("sim.network.fabrics", "REGISTRY"),
    "Fabric": ("sim.network.fabrics", "Fabric"),
    "get_fabric": ("sim.network.fabrics", "get_fabric"),
    "FlowNetwork": ("sim.network.flow", "FlowNetwork"),
    "MODELS": ("sim.network.network_builder", "MODELS"),
    "Outcome": ("sim.network.collective_alone", "Outcome"),
    "build_network": ("sim.network.network_builder", "build_network"),
    "run_alone": ("sim.network.collective_alone", "run_alone"),
    "simulate": ("sim.network.collective_alone", "simulate"),
    "TOPOLOGIES": ("sim.network.topology", "TOPOLOGIES"),
    "Topology": ("sim.network.topology", "Topology"),
    "make_topology": ("sim.network.topology", "make_topology"),
    "place": ("sim.network.topology", "place"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'sim.network' has no attribute {name!r}") from None
    return getattr(importlib.import_module(module), attribute)
