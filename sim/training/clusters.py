"""Clusters of published runs as presets: a GPU, how many a host holds, the link between
them, the fabric between hosts and the NICs a host has on it, each with its source.

``cluster.preset`` names one; the validator (:mod:`sim.training.validator`) fills each of
its keys the config leaves unset (:func:`with_preset`), so the resolved ``config.toml``
shows them and two configs diff key by key. A key the config sets wins. The keys' own
presets carry their numbers' sources: the devices in :mod:`sim.training.compute_model`, the
host links in :mod:`sim.network.host_links`, the fabrics in :mod:`sim.network.fabrics`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim.names import unknown


@dataclass(frozen=True)
class ClusterPreset:
    """One cluster: ``ranks_per_host`` GPUs of ``device`` a host on ``host_link``, hosts on
    ``fabric`` through ``nics_per_host`` NICs."""

    name: str
    device: str  # compute.device
    ranks_per_host: int  # cluster.ranks_per_host: GPUs a host
    host_link: str  # cluster.host_link
    fabric: str  # cluster.fabric
    nics_per_host: int  # cluster.nics_per_host
    source: str

    def keys(self) -> dict[str, dict[str, Any]]:
        """The config keys the preset sets, by table."""
        return {"cluster": {"ranks_per_host": self.ranks_per_host,
                            "host_link": self.host_link, "fabric": self.fabric,
                            "nics_per_host": self.nics_per_host},
                "compute": {"device": self.device}}


CLUSTERS: dict[str, ClusterPreset] = {
    # NVIDIA DGX-1 with V100 datasheet: 8 Tesla V100 SXM2 in an NVLink hybrid cube mesh
    # (the nvlink2-v100 link models it as a switch: see its note), 4 x 100 Gb/s EDR
    # InfiniBand adapters, one per pair of GPUs behind a PCIe switch.
    "dgx-1": ClusterPreset("dgx-1", "v100", 8, "nvlink2-v100", "ib-edr", 4,
                           "NVIDIA DGX-1 (V100) datasheet: 8 V100 SXM2, NVLink hybrid cube "
                           "mesh, 4 x 100 Gb/s EDR InfiniBand"),
    # Shoeybi et al. 2019 (Megatron-LM), Sec. 5: 32 DGX-2H servers of 16 V100 SXM3 32 GB,
    # "300 GB/sec bandwidth between GPUs inside a server via NVSwitch and 100 GB/sec of
    # interconnect bandwidth between servers using 8 InfiniBand adapters per server"
    # (8 x 100 Gb/s EDR: NVIDIA DGX-2 datasheet).
    "dgx-2h": ClusterPreset("dgx-2h", "v100-sxm3", 16, "nvlink2-v100", "ib-edr", 8,
                            "Shoeybi et al. 2019, Sec. 5; NVIDIA DGX-2/DGX-2H datasheets: "
                            "16 V100 SXM3, NVSwitch 300 GB/s a GPU, 8 x 100 Gb/s InfiniBand"),
    # NVIDIA DGX A100 datasheet: 8 A100 80 GB, 6 NVSwitches (600 GB/s a GPU), 8 single-port
    # ConnectX-6 200 Gb/s HDR InfiniBand adapters for the cluster network (its 2 dual-port
    # storage adapters left out).
    "dgx-a100": ClusterPreset("dgx-a100", "a100", 8, "nvlink3-a100", "ib-hdr", 8,
                              "NVIDIA DGX A100 datasheet: 8 A100 80 GB, NVSwitch 600 GB/s, "
                              "8 x 200 Gb/s HDR InfiniBand"),
    # Sergeev and Del Balso 2018 (Horovod), Sec. 5 and Fig. 6: servers of 4 Pascal GPUs
    # (P100 PCIe cards: no NVLink, so PCIe 3.0 between them) on 25 Gb/s Ethernet, one NIC a
    # server, RoCE-capable: its "RDMA" runs are fabric roce-25g (or eth-25g with
    # cluster.transport = "rdma"), its "TCP" ones eth-25g.
    "horovod-pascal-25gbe": ClusterPreset(
        "horovod-pascal-25gbe", "p100-pcie", 4, "pcie3-x16", "eth-25g", 1,
        "Sergeev & Del Balso 2018, Sec. 5 and Fig. 6: 4 Pascal GPUs (P100 PCIe) a server, "
        "25 GbE (RoCE-capable), one NIC"),
    # Goyal et al. 2017, Sec. 5: Facebook's Big Basin servers, 8 P100 SXM2 with NVLink (a
    # hybrid cube mesh), one Mellanox ConnectX-4 50 Gbit Ethernet adapter a server.
    "big-basin-50gbe": ClusterPreset(
        "big-basin-50gbe", "p100-sxm2", 8, "nvlink1-p100", "eth-50g", 1,
        "Goyal et al. 2017, Sec. 5: Big Basin, 8 P100 SXM2 with NVLink, 50 Gbit Ethernet "
        "(Mellanox ConnectX-4), one NIC"),
}


def get_cluster(name: str) -> ClusterPreset:
    """The preset called ``name``; raises ValueError naming the known ones."""
    try:
        return CLUSTERS[name]
    except KeyError:
        raise ValueError(unknown("cluster preset", name, CLUSTERS)) from None


def with_preset(data: Mapping[str, Any]) -> dict[str, Any]:
    """Config ``data`` (a TOML table, before the schema) with ``cluster.preset``'s keys
    filled where it sets none; ``data`` itself, copied, without a preset. Raises ValueError
    for an unknown preset or a ``cluster`` that is not a table (left to the schema)."""
    data = copy.deepcopy(dict(data))
    cluster = data.get("cluster")
    if not isinstance(cluster, dict) or cluster.get("preset") is None:
        return data
    if not isinstance(cluster["preset"], str):
        return data  # the schema names the wrong type
    for table, keys in get_cluster(cluster["preset"]).keys().items():
        section = data.setdefault(table, {})
        if isinstance(section, dict):
            for key, value in keys.items():
                section.setdefault(key, value)
    return data
