"""Fabrics: link rate, per-hop latency and per-message overhead, with presets and their sources.

What a fabric's numbers mean
----------------------------
``o`` is :attr:`Fabric.overhead_s`, the CPU/NIC cost of posting a send or completing a
receive (LogGP's o, paid once at each end), ``L`` is :attr:`Fabric.latency_s` per hop (wire,
serdes, switch pipeline; paid once, not per packet: switches cut through), and ``B`` is
:attr:`Fabric.bandwidth_Bps`, the achievable rate (line rate x efficiency). What a message
costs over them (alpha = 2 o + hops L, beta = 1 / B; on one non-blocking switch a path has
:data:`SWITCH_HOPS` = 2 hops) is :mod:`sim.network.message_cost`'s; ``osu_latency`` for a
small message reports that alpha, which is how the presets were set.

Calibrated profiles
-------------------
``calibrated:PATH`` loads a JSON object measured on a real cluster (the real-run tools write
it; :func:`save_profile` writes one), a :class:`FabricProfile` read by
:func:`sim.calibrated.load_profile`::

    {"format": "sgd-lab.fabric-profile/1",   # optional; checked when present
     "name": "mycluster",                    # optional
     "bandwidth_Bps": 11.9e9,                # achieved large-message bandwidth, bytes/s
     "latency_s": 1.5e-7,                    # per-hop latency, s
     "overhead_s": 3.5e-7,                   # per-message overhead at each end, s
     "source": "osu_bw/osu_latency, 2 nodes, 1 switch",   # optional, free text
     "burst_s": 0.001,                       # optional: a token bucket on every link, its
     "peak_Bps": 1.8e9,                      #   depth (s of bandwidth_Bps) and peak rate
     "measurements": {...}}                  # optional, free form (raw samples)

The bandwidth is already the achieved one, so the efficiency is 1. When only the end-to-end
small-message latency ``a`` on one switch is known, write ``latency_s = 0`` and
``overhead_s = a / 2``: times on one switch are the same either way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sim.calibrated import CALIBRATED, load_profile, write_profile

PROFILE_FORMAT = "sgd-lab.fabric-profile/1"
SWITCH_HOPS = 2  # host -> switch -> host


@dataclass(frozen=True)
class Fabric:
    """One link technology. Raises ValueError for a non-positive rate or a negative time."""

    name: str
    line_rate_bps: float  # signalling data rate after line coding, bits/s
    latency_s: float  # per hop
    overhead_s: float  # per message, at each end (LogGP o)
    efficiency: float = 1.0  # achievable / line rate (headers, protocol, host limits)
    source: str = ""
    # CPU per payload byte of the network stack at each end, as a rate (bytes/s); inf: the
    # NIC moves the data (RDMA, zero copy). Charged on the host's core, not on the wire.
    stack_Bps: float = math.inf
    # A token-bucket shaper on every link (Linux tc tbf, as on the lab's emulated networks:
    # :mod:`sim.network.token_bucket`): a link sends at peak_Bps while its bucket holds
    # tokens, which refill at its rate up to burst_s of that rate, and at its rate once the
    # bucket is dry. burst_s 0: not shaped.
    burst_s: float = 0.0
    peak_Bps: float = math.inf

    def __post_init__(self) -> None:
        if not (math.isfinite(self.line_rate_bps) and self.line_rate_bps > 0):
            raise ValueError(f"fabric {self.name!r}: line_rate_bps must be > 0, "
                             f"got {self.line_rate_bps}")
        if not 0 < self.efficiency <= 1:
            raise ValueError(f"fabric {self.name!r}: efficiency must be in (0, 1], "
                             f"got {self.efficiency}")
        for field in ("latency_s", "overhead_s"):
            value = getattr(self, field)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"fabric {self.name!r}: {field} must be >= 0, got {value}")
        if not self.stack_Bps > 0:  # also refuses NaN; inf: the NIC moves the bytes
            raise ValueError(f"fabric {self.name!r}: stack_Bps must be > 0, "
                             f"got {self.stack_Bps}")
        if not (math.isfinite(self.burst_s) and self.burst_s >= 0):
            raise ValueError(f"fabric {self.name!r}: burst_s must be >= 0, got {self.burst_s}")
        if self.shaped and not (math.isfinite(self.peak_Bps)
                                and self.peak_Bps > self.bandwidth_Bps):
            raise ValueError(f"fabric {self.name!r}: a shaped link (burst_s > 0) needs a "
                             f"finite peak_Bps above its bandwidth ({self.bandwidth_Bps:g} "
                             f"B/s), got {self.peak_Bps}")

    @property
    def shaped(self) -> bool:
        """Whether the links are token buckets (burst_s > 0)."""
        return self.burst_s > 0

    @property
    def bandwidth_Bps(self) -> float:
        """Achievable link bandwidth, bytes/s."""
        return self.line_rate_bps / 8 * self.efficiency

    def with_overrides(self, alpha_s: float | None = None,
                       bandwidth_Bps: float | None = None) -> Fabric:
        """This fabric with the one-switch alpha and/or achievable bandwidth replaced.

        The new alpha is carried by the overheads (latency 0), so every path costs alpha.
        """
        fabric = self
        if bandwidth_Bps is not None:
            fabric = replace(fabric, line_rate_bps=8 * bandwidth_Bps, efficiency=1.0)
        if alpha_s is not None:
            fabric = replace(fabric, latency_s=0.0, overhead_s=alpha_s / 2)
        if fabric is not self:
            fabric = replace(fabric, name=f"{self.name}+custom", source="command line")
        return fabric


def _ib(name: str, gbps: float, source: str, efficiency: float) -> Fabric:
    # RDMA: the host only posts a work request and polls a completion, ~0.35 us at each end
    # (the order of o measured on InfiniBand by Hoefler et al., "LogGP in theory and
    # practice", 2009);
    # ~0.15 us per hop (switch pipeline 90-130 ns + cable and serdes), so alpha on one
    # switch = 2*0.35 + 2*0.15 = 1.0 us: osu_latency for 8-byte messages on ConnectX-4..7
    # through one switch (MVAPICH2 / OMB published results).
    return Fabric(name, gbps * 1e9, latency_s=0.15e-6, overhead_s=0.35e-6,
                  efficiency=efficiency, source=source)


def _tcp(name: str, gbps: float, overhead_s: float, latency_s: float, efficiency: float,
         source: str) -> Fabric:
    # The kernel copies every payload byte between user and socket buffers at each end; one
    # core sustains ~40 Gb/s of single-stream TCP (iperf3 on tuned 100G hosts, ESnet
    # fasterdata "100G host tuning"), i.e. ~5 GB/s of CPU per byte.
    return Fabric(name, gbps * 1e9, latency_s=latency_s, overhead_s=overhead_s,
                  efficiency=efficiency, source=source, stack_Bps=5e9)


# Every number here is approximate and cited; calibrate for a real cluster.
REGISTRY: dict[str, Fabric] = {
    # 4x EDR: 4 lanes x 25.78125 Gbd, 64b/66b -> 100 Gb/s (IBTA spec; Mellanox SB7800/MSB7890
    # switch manual, "effective bandwidth of 100 Gb/s"). osu_bw peaks ~12.2 GB/s of
    # 12.5 GB/s (MVAPICH2 EDR results) -> efficiency 0.98. SB7800 port-to-port: 90 ns.
    "ib-edr": _ib("ib-edr", 100, "IBTA 4x EDR; Mellanox SB7800 brief; MVAPICH2 OMB", 0.98),
    # 4x HDR: 4 x 50 Gb/s PAM4 -> 200 Gb/s (NVIDIA ConnectX-6 datasheet). osu_bw ~24.5 GB/s
    # of 25 GB/s -> 0.98. Quantum QM8700 port-to-port: 130 ns (NVIDIA QM8700 brief).
    "ib-hdr": _ib("ib-hdr", 200, "NVIDIA ConnectX-6 datasheet; QM8700 brief; OMB", 0.98),
    # 4x NDR: 4 x 100 Gb/s PAM4 -> 400 Gb/s (NVIDIA ConnectX-7 datasheet). Large-message
    # bandwidth ~48 GB/s of 50 GB/s (ib_write_bw / osu_bw reports) -> 0.96.
    "ib-ndr": _ib("ib-ndr", 400, "NVIDIA ConnectX-7 datasheet; QM9700 manual; OMB", 0.96),
    # TCP over 10GBASE (IEEE 802.3ae). MTU 1500 with TCP timestamps carries 1448 payload
    # bytes per 1538 wire bytes -> 0.94. Kernel socket path ~10 us per send or receive
    # (netperf TCP_RR ~40-50 us round trip on 10GbE); a 1500 B frame is store-and-forwarded
    # in 1.2 us per hop -> alpha ~22 us, in line with MPI-over-TCP osu_latency.
    "eth-10g": _tcp("eth-10g", 10, overhead_s=10e-6, latency_s=1.2e-6, efficiency=0.94,
                    source="IEEE 802.3ae; TCP/IP framing; netperf TCP_RR"),
    # TCP over 25GBASE (IEEE 802.3by); same framing; ~8 us per socket call on a modern kernel,
    # 0.5 us per hop (1500 B frame at 25 Gb/s) -> alpha ~17 us.
    "eth-25g": _tcp("eth-25g", 25, overhead_s=8e-6, latency_s=0.5e-6, efficiency=0.94,
                    source="IEEE 802.3by; TCP/IP framing; netperf TCP_RR"),
    # TCP over 50GBASE-CR2 (two 25 Gb/s lanes: 25 Gigabit Ethernet Consortium's 50G
    # specification, 2014, later IEEE 802.3cd), the 50 Gbit Ethernet of Goyal et al. 2017
    # (Sec. 5: Mellanox ConnectX-4, whose datasheet lists 10/25/40/50/100 GbE); same framing
    # as the other TCP presets -> 0.94; a 1500 B frame takes 0.24 us a hop; ~8 us a socket
    # call as eth-25g -> alpha ~16.5 us.
    "eth-50g": _tcp("eth-50g", 50, overhead_s=8e-6, latency_s=0.24e-6, efficiency=0.94,
                    source="25G Ethernet Consortium 50GBASE-CR2 / IEEE 802.3cd; ConnectX-4 "
                           "datasheet; TCP/IP framing; netperf TCP_RR"),
    # TCP over 100GBASE (IEEE 802.3ba): multi-stream iperf3 reaches ~90 Gb/s on tuned hosts
    # (ESnet fasterdata, 100G host tuning) -> 0.90; cut-through switch ~0.3 us per hop
    # (NVIDIA Spectrum SN2700 brief: 300 ns); ~6 us per socket call -> alpha ~12.6 us.
    "eth-100g": _tcp("eth-100g", 100, overhead_s=6e-6, latency_s=0.3e-6, efficiency=0.90,
                     source="IEEE 802.3ba; ESnet fasterdata 100G tuning; SN2700 brief"),
    # RoCE v2 at 100 Gb/s: ~80 header bytes per 4096 B RDMA MTU and ib_write_bw ~97 Gb/s
    # (ConnectX-5) -> 0.97; RDMA verbs overhead ~0.5 us per end; Spectrum 300 ns per hop ->
    # alpha 1.6 us, the usual RoCE osu_latency (ConnectX-5 datasheet, OMB over UCX).
    "roce-100g": Fabric("roce-100g", 100e9, latency_s=0.3e-6, overhead_s=0.5e-6,
                        efficiency=0.97, source="ConnectX-5 datasheet; SN2700 brief; OMB"),
    # RoCE v2 on 25 and 50 GbE (the same Ethernet as eth-25g / eth-50g, RDMA instead of TCP:
    # ConnectX-4 Lx / ConnectX-4 datasheets, "RDMA over Converged Ethernet" at 10/25/40/50
    # GbE): the roce-100g preset's framing (4096 B RDMA MTU, ~80 B of Ethernet, IP, UDP, BTH
    # and ICRC headers, the same achieved share), verbs overhead and cut-through hop. The
    # RDMA of Horovod's 25 GbE servers (Sergeev and Del Balso 2018, Fig. 6: "RDMA" against
    # "TCP" on the same network). eth-25g with cluster.transport = "rdma" is the same
    # software (0.5 us a message, no copies) on TCP's framing and store-and-forward hop.
    "roce-25g": Fabric("roce-25g", 25e9, latency_s=0.3e-6, overhead_s=0.5e-6,
                       efficiency=0.97, source="IEEE 802.3by; ConnectX-4 Lx datasheet (RoCE); "
                                               "as roce-100g"),
    # RoCE v2 on 50 GbE: as roce-25g, at 50GBASE-CR2's rate.
    "roce-50g": Fabric("roce-50g", 50e9, latency_s=0.3e-6, overhead_s=0.5e-6,
                       efficiency=0.97, source="50GBASE-CR2 / IEEE 802.3cd; ConnectX-4 "
                                               "datasheet (RoCE); as roce-100g"),
}

_CUSTOM_KEYS = {"name", "base", "line_rate_bps", "bandwidth_Bps", "latency_s", "overhead_s",
                "efficiency", "source", "stack_Bps", "burst_s", "peak_Bps"}


def get_fabric(spec: str | Mapping[str, Any] | Fabric) -> Fabric:
    """A fabric from a preset name, ``calibrated:PATH``, a custom mapping, or a Fabric.

    Raises ValueError naming what is wrong (unknown preset, bad key, unreadable profile).
    """
    if isinstance(spec, Fabric):
        return spec
    if isinstance(spec, Mapping):
        return fabric_from_dict(spec)
    found = load_profile(spec, REGISTRY, FabricProfile, PROFILE_FORMAT, what="fabric profile",
                         preset="fabric", measurements={"measurements"},
                         defaults=lambda path: {  # the path as given, not normalised
                             "name": spec,
                             "source": f"calibrated profile {spec.removeprefix(CALIBRATED)}"})
    return found if isinstance(found, Fabric) else found.fabric()


def fabric_from_dict(spec: Mapping[str, Any]) -> Fabric:
    """A custom fabric, e.g. ``{"base": "ib-hdr", "latency_s": 2e-7}`` or a full definition.

    Keys: name, base (a preset to start from), line_rate_bps or bandwidth_Bps (achievable,
    sets efficiency 1), latency_s, overhead_s, efficiency, stack_Bps (the network stack's
    CPU per byte at each end, bytes/s), burst_s and peak_Bps (a token bucket on every link:
    its depth in seconds of the link's rate, and the rate while it holds tokens), source.
    Raises ValueError.
    """
    unknown = set(spec) - _CUSTOM_KEYS
    if unknown:
        raise ValueError(f"custom fabric: unknown key(s) {sorted(unknown)}; "
                         f"expected some of {sorted(_CUSTOM_KEYS)}")
    if "line_rate_bps" in spec and "bandwidth_Bps" in spec:
        raise ValueError("custom fabric: give line_rate_bps or bandwidth_Bps, not both")
    fields = dict(spec)
    base = get_fabric(fields.pop("base")) if "base" in fields else None
    if "bandwidth_Bps" in fields:
        fields["line_rate_bps"] = 8 * _number("bandwidth_Bps", fields.pop("bandwidth_Bps"))
        fields["efficiency"] = 1.0
    fields = {k: (v if k in ("name", "source") else _number(k, v)) for k, v in fields.items()}
    if base is not None:
        return replace(base, **{"name": f"{base.name}+custom", **fields})
    missing = {"line_rate_bps", "latency_s", "overhead_s"} - set(fields)
    if missing:
        raise ValueError(f"custom fabric: missing key(s) {sorted(missing)} "
                         "(or give a 'base' preset)")
    fields.setdefault("name", "custom")
    return Fabric(**fields)


@dataclass(frozen=True)
class FabricProfile:
    """A calibrated fabric as its JSON has it: the achieved bandwidth (efficiency 1), the
    per-hop latency and the per-message overhead. Raises ValueError as :class:`Fabric`."""

    name: str
    bandwidth_Bps: float  # achieved large-message bandwidth, bytes/s
    latency_s: float  # per hop
    overhead_s: float  # per message, at each end
    source: str = ""
    burst_s: float = 0.0  # a token bucket on every link, s of bandwidth_Bps (0: none)
    peak_Bps: float | None = None  # the links' rate while their bucket holds tokens

    def __post_init__(self) -> None:
        self.fabric()

    def fabric(self) -> Fabric:
        peak = math.inf if self.peak_Bps is None else self.peak_Bps
        return Fabric(name=self.name, line_rate_bps=8 * self.bandwidth_Bps,
                      latency_s=self.latency_s, overhead_s=self.overhead_s, source=self.source,
                      burst_s=self.burst_s, peak_Bps=peak)

    @classmethod
    def of(cls, fabric: Fabric) -> FabricProfile:
        return cls(fabric.name, fabric.bandwidth_Bps, fabric.latency_s, fabric.overhead_s,
                   fabric.source, fabric.burst_s,
                   fabric.peak_Bps if math.isfinite(fabric.peak_Bps) else None)


def save_profile(path: str | Path, fabric: Fabric, **extra: Any) -> None:
    """Write ``fabric`` as a calibrated profile (``extra``: source, measurements)."""
    write_profile(Path(path), FabricProfile.of(fabric), PROFILE_FORMAT, **extra)


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key}: expected a number, got {value!r}")
    return float(value)
