"""Interconnects inside a host (NVLink, NVSwitch, PCIe peer to peer), with presets and sources.

A host link is described like a fabric (:class:`~sim.network.fabrics.Fabric`): an
achievable rate per direction, a per-hop latency and a per-message overhead at each end, so
a message of n bytes between two ranks of one host, alone, takes

    T(n) = o + 2 L + n / B + o  =  alpha + n / B

(two hops: out of the sender's port, into the receiver's). What is modelled is an NVSwitch:
every rank (GPU) has one port of the host link's full per-direction bandwidth into a
non-blocking crossbar, so flows share a rank's port max-min and nothing else. On V100 SXM2
there is no NVSwitch: 4 GPUs are wired directly, 2 of the 6 links to each peer, so one pair
alone gets a third of the port (about 48 GB/s) while traffic to all three peers, as NCCL's
multi-ring collectives send it, gets the whole port. Point-to-point messages on the
``nvlink2-v100`` preset are therefore optimistic by up to 3x.

Only the end-to-end small-message latency ``a`` of these links is published, so the presets
follow :mod:`sim.network.fabrics`' convention for that case: ``latency_s = 0`` and
``overhead_s = a / 2``.
"""

from __future__ import annotations

from sim.names import unknown
from sim.network.fabrics import Fabric

NONE = "none"  # no host link: ranks of one host talk through the fabric (each its own NIC)

# p2pBandwidthLatencyTest on 4 V100 SXM2 (Dell C4130 configuration K, 2 links a pair): 143.71
# of 150 GB/s a GPU in one direction, 95.8% (Dell HPC, "Deep learning performance with
# V100 GPUs"). The same share is assumed for later NVLink generations (same 25 GB/s lanes).
_NVLINK_EFFICIENCY = 0.958
# Per-message latency: NCCL's own cost model, the per-step hardware latency of a ring on its
# small-message LL protocol (NVIDIA/nccl src/graph/tuning.cc, hwLat / hwLatencies: NVLink 0.6
# us, PCI 1.0 us, NET 2.7 us; stable across NCCL 2.1x-2.2x). A model's figure, not a
# measurement; NCCL's per-collective base latency (kernel launch, ~6.6 us for a ring) is
# left out, as the fabrics' alphas leave it out.
_NVLINK_ALPHA_S = 0.6e-6
_PCIE_ALPHA_S = 1.0e-6


def _link(name: str, per_direction_GBps: float, efficiency: float, alpha_s: float,
          source: str) -> Fabric:
    return Fabric(name, 8 * per_direction_GBps * 1e9, latency_s=0.0, overhead_s=alpha_s / 2,
                  efficiency=efficiency, source=source)


# Every number is per GPU and per direction (datasheets quote both directions together).
REGISTRY: dict[str, Fabric] = {
    # NVIDIA V100 datasheet: "NVLink 300 GB/s" (SXM2) = 6 links x 25 GB/s x 2 directions.
    "nvlink2-v100": _link("nvlink2-v100", 150, _NVLINK_EFFICIENCY, _NVLINK_ALPHA_S,
                          "NVIDIA V100 datasheet (300 GB/s total); p2pBandwidthLatencyTest"),
    # NVIDIA A100 datasheet: "NVLink 600 GB/s" (SXM4) = 12 links x 25 GB/s x 2; every GPU of
    # an HGX A100 reaches every other through NVSwitch at the full rate.
    "nvlink3-a100": _link("nvlink3-a100", 300, _NVLINK_EFFICIENCY, _NVLINK_ALPHA_S,
                          "NVIDIA A100 datasheet (600 GB/s total, NVSwitch)"),
    # NVIDIA H100 datasheet: "NVLink 900 GB/s" (SXM5) = 18 links x 25 GB/s x 2, NVSwitch.
    "nvlink4-h100": _link("nvlink4-h100", 450, _NVLINK_EFFICIENCY, _NVLINK_ALPHA_S,
                          "NVIDIA H100 datasheet (900 GB/s total, NVSwitch)"),
    # NVIDIA Tesla P100 datasheet: "NVLink 160 GB/s" (SXM2, NVLink 1.0) = 4 links x 20 GB/s
    # x 2 directions; DGX-1 (P100) and Big Basin wire 8 of them in a hybrid cube mesh, as
    # nvlink2-v100's note says (optimistic for one pair alone).
    "nvlink1-p100": _link("nvlink1-p100", 80, _NVLINK_EFFICIENCY, _NVLINK_ALPHA_S,
                          "NVIDIA Tesla P100 datasheet (160 GB/s total, NVLink 1.0)"),
    # PCIe 3.0 x16 (PCI-SIG): 8 GT/s x 16 lanes, 128b/130b -> 15.75 GB/s a direction; about
    # 12-13 GB/s is what copies reach (the same TLP and flow-control share as pcie4-x16's
    # 0.8): the GPUs of PCIe servers without NVLink, as Horovod's Pascal servers.
    "pcie3-x16": _link("pcie3-x16", 16 * 8 * 128 / 130 / 8, 0.8, _PCIE_ALPHA_S,
                       "PCI-SIG PCIe 3.0 (15.75 GB/s a direction); as pcie4-x16's share"),
    # PCIe 4.0 x16 (PCI-SIG): 16 GT/s x 16 lanes, 128b/130b -> 31.5 GB/s a direction. About
    # 25 GB/s is what cudaMemcpy and P2P copies reach (TLP headers on 256 B payloads, flow
    # control): efficiency 0.8, so the preset is the achievable rate, as the fabrics' are.
    "pcie4-x16": _link("pcie4-x16", 16 * 16 * 128 / 130 / 8, 0.8, _PCIE_ALPHA_S,
                       "PCI-SIG PCIe 4.0 (31.5 GB/s a direction); ~25 GB/s measured copies"),
}


def get_host_link(name: str) -> Fabric | None:
    """The preset called ``name``; None for ``"none"``. Raises ValueError naming the known
    presets (and the closest one) for an unknown name."""
    if name == NONE:
        return None
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(unknown("host link", name, [NONE, *REGISTRY])) from None
